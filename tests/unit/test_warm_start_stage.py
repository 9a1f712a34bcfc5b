"""A warm start whose limits cut every delegation fails naming the agent and the keys."""

from __future__ import annotations

import pytest

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.warm_start.stage import warm_start_agent


def test_a_warm_start_without_demonstrations_names_the_role_and_the_limits(tmp_path):
  config = base_config()
  apply_overrides(config, {
      "world.render": "symbolic", "world.size": "tiny", "world.stage": "stage1",
      "world.question_types": "lookup", "world.tokenizer_vocab_size": 1024,
      "warm_start.enabled": True, "warm_start.num_questions": 4,
      "main.model.preset": "tiny", "sub.model.preset": "tiny",
      "main.sampling.max_new_tokens": 2})  # too short for any delegation turn
  with pytest.raises(ValueError, match=r"warm start sub: .* 4 questions gave no sub "
                                       r"demonstrations.*max_new_tokens"):
    warm_start_agent(config, str(tmp_path), "sub")
