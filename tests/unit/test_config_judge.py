"""The judge keys of `rewards` (`rewards.answer_judge`, `rewards.expert_judge`,
`rewards.judge.*`): errors name the key, and a judge model must have weights."""

from __future__ import annotations

import dataclasses

import pytest

from mgrpo_jax.config import ConfigError, apply_overrides, base_config, validate
from mgrpo_jax.training.judge_model import JudgeSettings

_WEIGHTLESS = {"rewards.answer_judge": "model", "rewards.judge.preset": "tiny"}


@pytest.mark.parametrize("overrides,message", [
    ({"rewards.answer_judge": "llm"},
     r"'rewards\.answer_judge': expected one of 'exact', 'model', got 'llm'"),
    ({"rewards.expert_judge": "exact"},
     r"'rewards\.expert_judge': expected one of 'gold_path', 'model', got 'exact'"),
    ({"rewards.judge.temperature": -0.5}, r"'rewards\.judge\.temperature': expected a float"),
    ({"rewards.judge.batch_size": 0}, r"'rewards\.judge\.batch_size': expected a int >= 1"),
    ({"rewards.judge.max_new_tokens": 0}, r"'rewards\.judge\.max_new_tokens'"),
    ({"rewards.judge.failure_score": 1.5},
     r"'rewards\.judge\.failure_score': expected a float in \[0\.0, 1\.0\]"),
    ({"rewards.judge.evidence_chars": -1}, r"'rewards\.judge\.evidence_chars'"),
    ({"rewards.judge.cache_dir": ""}, r"'rewards\.judge\.cache_dir': expected a str \(not"),
    ({"rewards.judge.dtype": "float16"}, r"'rewards\.judge\.dtype': expected one of"),
    ({"rewards.judge.verdict_format": "last_word"},
     r"'rewards\.judge\.verdict_format': expected one of 'final_line', 'first_word', got "
     r"'last_word'"),
    (_WEIGHTLESS, r"'rewards\.judge\.checkpoint': the judge preset 'tiny' is trained from "
     r"scratch"),
    ({**_WEIGHTLESS, "rewards.answer_judge": "exact", "rewards.expert_judge": "model"},
     r"'rewards\.judge\.checkpoint'"),
    ({"rewards.expert_judge": "model", "rewards.judge.preset": "no/such/model.gguf"},
     r"'rewards\.judge\.preset': 'no/such/model\.gguf' is neither a preset"),
])
def test_a_bad_judge_setting_is_an_error_naming_its_key(overrides, message):
  config = base_config()
  apply_overrides(config, overrides)
  with pytest.raises(ConfigError, match=message):
    validate(config)


@pytest.mark.parametrize("overrides", [
    {"rewards.answer_judge": "model", "rewards.expert_judge": "model"},
    {**_WEIGHTLESS, "rewards.judge.checkpoint": "warm_start/main"},
    {"rewards.judge.preset": "no/such/model.gguf"},  # no model judge: not read
    {"rewards.expert_judge": "model", "rewards.judge.verdict_format": "first_word",
     "rewards.judge.evidence_chars": 0},
    {"rewards.answer_judge": "model", "rewards.judge.temperature": 0.7,
     "rewards.judge.top_p": 0.9, "rewards.judge.top_k": 20},
])
def test_judge_settings_that_work_validate(overrides):
  config = base_config()
  apply_overrides(config, overrides)
  validate(config)


def test_the_judge_settings_read_every_judge_key():
  judge = base_config().rewards.judge
  settings = JudgeSettings.from_config(base_config().rewards)
  assert {f.name for f in dataclasses.fields(JudgeSettings)} == set(judge)
  assert all(getattr(settings, name) == judge[name] for name in judge)
