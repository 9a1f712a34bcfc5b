"""The warm start's stage: a run whose limits cut every delegation fails naming the agent
and the keys; its SFT micro-batches as the agent's updates do; its optimizer's schedule
covers every step."""

from __future__ import annotations

import pytest

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.training import learning_rate_schedule
from mgrpo_jax.warm_start import stage
from mgrpo_jax.warm_start.sft import SFTConfig, sft_steps
from mgrpo_jax.warm_start.stage import SFT_WARMUP_STEPS, warm_start_agent, warm_start_optimizer

TINY_SYMBOLIC = {
    "world.render": "symbolic", "world.size": "tiny", "world.stage": "stage1",
    "world.question_types": "lookup", "world.tokenizer_vocab_size": 1024,
    "warm_start.enabled": True, "warm_start.num_questions": 4,
    "main.model.preset": "tiny", "sub.model.preset": "tiny"}


def test_a_warm_start_without_demonstrations_names_the_role_and_the_limits(tmp_path):
  config = base_config()
  apply_overrides(config, {**TINY_SYMBOLIC,
                           "main.sampling.max_new_tokens": 2})  # too short for any delegation
  with pytest.raises(ValueError, match=r"warm start sub: .* 4 questions gave no sub "
                                       r"demonstrations.*max_new_tokens"):
    warm_start_agent(config, parse_mode("mgrpo"), str(tmp_path), "sub")


@pytest.mark.parametrize("micro", [0, 4])
def test_the_sft_micro_batches_as_the_agents_updates_do(tmp_path, monkeypatch, micro):
  config = base_config()
  apply_overrides(config, {**TINY_SYMBOLIC, "warm_start.batch_rows": 8,
                           "sub.optim.micro_batch_size": micro})
  taken = []

  def recorded_sft(state, layout, sequences, sft_config, **kwargs):
    taken.append(sft_config)
    raise InterruptedError  # the SFT's configuration is all this test needs

  monkeypatch.setattr(stage, "sft", recorded_sft)
  with pytest.raises(InterruptedError):
    warm_start_agent(config, parse_mode("mgrpo"), str(tmp_path), "sub")
  assert [(c.batch_rows, c.micro_batch_size) for c in taken] == [(8, micro)]


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_the_warm_start_schedule_spans_the_copy_curriculum_and_every_sft_step(schedule):
  config = base_config()
  apply_overrides(config, {"warm_start.copy_steps": 200, "warm_start.window_copy_steps": 30,
                           "warm_start.learning_rate": 3e-3, "warm_start.schedule": schedule})
  sft_config = SFTConfig(epochs=6, batch_rows=16)
  optim = warm_start_optimizer(config.warm_start, 2001, sft_config)
  # 126 batches of 16 rows per epoch (the last one short), six epochs.
  assert sft_steps(2001, sft_config) == 756
  assert optim.total_steps == 200 + 30 + 756
  lr = learning_rate_schedule(optim)
  assert float(lr(SFT_WARMUP_STEPS)) == pytest.approx(3e-3)
  last, after_last = float(lr(optim.total_steps - 1)), float(lr(optim.total_steps))
  if schedule == "constant":
    assert last == after_last == pytest.approx(3e-3)
  else:  # halfway down at the middle of the post-warm-up steps, 0 after the last one
    middle = SFT_WARMUP_STEPS + (optim.total_steps - SFT_WARMUP_STEPS) // 2
    assert float(lr(middle)) == pytest.approx(1.5e-3, rel=1e-2)
    assert 0 < last < 1e-7 and after_last == 0.0
