"""A run's defining config keys are recorded in its workdir; a resume may not change them."""

from __future__ import annotations

import json

import pytest

from mgrpo_jax.config import ConfigError, apply_overrides, base_config, iter_fields
from mgrpo_jax.slices.run_fingerprint import (
  FINGERPRINT_KEY,
  RESUMABLE_KEYS,
  check_fingerprint,
)


def _config(**overrides):
  config = base_config()
  apply_overrides(config, overrides)
  return config


def test_the_first_launch_records_every_defining_key(tmp_path):
  check_fingerprint(_config(), str(tmp_path))
  recorded = json.loads((tmp_path / FINGERPRINT_KEY).read_text())
  assert recorded["mgrpo.rollouts_per_query"] == 8
  assert "experiment.num_steps" not in recorded and "serving.port" not in recorded
  every = {key for key, _ in iter_fields()}
  resumable = {k for k in every if any(k == r or (r.endswith(".") and k.startswith(r))
                                       for r in RESUMABLE_KEYS)}
  assert set(recorded) == every - resumable
  assert all(any(k == r or k.startswith(r) for k in every) for r in RESUMABLE_KEYS)


@pytest.mark.parametrize("key,value,recorded", [
    ("mgrpo.rollouts_per_query", 4, 8),
    ("rewards.sub_reward", "released", "paper"),
    ("sub.model.preset", "small", "tiny"),
    ("experiment.seed", 3, 0),
])
def test_a_resume_with_another_defining_value_names_the_key(tmp_path, key, value, recorded):
  check_fingerprint(_config(), str(tmp_path))
  with pytest.raises(ConfigError, match=rf"config key '{key}' is {value!r}, but the run in "
                                        rf"{tmp_path} was started with {recorded!r}"):
    check_fingerprint(_config(**{key: value}), str(tmp_path))
  check_fingerprint(_config(), str(tmp_path))  # the original values still resume


def test_resumable_keys_may_change(tmp_path):
  check_fingerprint(_config(), str(tmp_path))
  check_fingerprint(_config(**{"experiment.num_steps": 50, "logging.tensorboard": False,
                               "eval.every": 5, "serving.deadline_s": 5.0,
                               "serving.port": 4000, "checkpoint.keep_period": 5,
                               "main.mesh.data": 2, "curriculum.stage2_steps": 20}),
                    str(tmp_path))


def test_an_empty_init_checkpoint_matches_the_one_the_pipeline_derives(tmp_path):
  check_fingerprint(_config(), str(tmp_path))
  check_fingerprint(_config(**{"main.model.init_checkpoint": "/w/warm_start/main"}),
                    str(tmp_path))
  other = tmp_path / "other"
  check_fingerprint(_config(**{"sub.model.init_checkpoint": "a"}), str(other))
  with pytest.raises(ConfigError, match="'sub.model.init_checkpoint' is 'b'"):
    check_fingerprint(_config(**{"sub.model.init_checkpoint": "b"}), str(other))


def test_several_changes_are_counted_and_the_file_is_never_rewritten(tmp_path):
  check_fingerprint(_config(), str(tmp_path))
  before = (tmp_path / FINGERPRINT_KEY).read_bytes()
  with pytest.raises(ConfigError, match=r"'main\.optim\.learning_rate' is 0\.5, .* \(and 1 "
                                        r"more: mgrpo\.staleness\)"):
    check_fingerprint(_config(**{"main.optim.learning_rate": 0.5, "mgrpo.staleness": 1,
                                 "checkpoint.keep": 5}), str(tmp_path))
  assert (tmp_path / FINGERPRINT_KEY).read_bytes() == before


def test_a_damaged_fingerprint_is_named(tmp_path):
  (tmp_path / FINGERPRINT_KEY).write_text("{nope")
  with pytest.raises(ConfigError, match=f"{tmp_path}/{FINGERPRINT_KEY}: not a run fingerprint"):
    check_fingerprint(_config(), str(tmp_path))

