"""Stage 2's selection is reused only with the curriculum values it was made with."""

from __future__ import annotations

import json

import pytest

from mgrpo_jax.config import ConfigError, apply_overrides, base_config
from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.slices import curriculum


def _config(**overrides):
  config = base_config()
  apply_overrides(config, overrides)
  return config


def _write_selection(folder, threshold, samples):
  folder.mkdir(parents=True, exist_ok=True)
  (folder / curriculum.SELECTION).write_text(json.dumps(
      {"threshold": threshold, "samples": samples, "candidates": 2, "kept": ["a"],
       "mean_rate": 0.5, "rates": {"a": 0.0, "b": 1.0}}))


def test_a_selection_made_with_the_same_values_is_reused(tmp_path):
  _write_selection(tmp_path, 0.5, 4)
  curriculum.check_selection(_config(**{"curriculum.success_threshold": 0.5,
                                        "curriculum.success_samples": 4}), tmp_path)


@pytest.mark.parametrize("key, value, recorded", [
    ("curriculum.success_threshold", 0.25, 0.5),
    ("curriculum.success_samples", 8, 4),
])
def test_a_selection_made_with_other_values_is_refused_by_name(tmp_path, key, value,
                                                               recorded):
  _write_selection(tmp_path, 0.5, 4)
  config = _config(**{"curriculum.success_threshold": 0.5, "curriculum.success_samples": 4,
                      key: value})
  with pytest.raises(ConfigError, match=rf"'{key}' is {value!r}, but .* chosen with "
                                        rf"{recorded!r}"):
    curriculum.check_selection(config, tmp_path)


def test_stage2_trains_at_the_scaled_learning_rates(tmp_path):
  from mgrpo_jax.training.paths import RunPaths
  config = _config(**{"curriculum.stage2_steps": 5, "curriculum.learning_rate_scale": 0.25,
                      "main.optim.learning_rate": 1e-3, "sub.optim.learning_rate": 4e-3})
  stage2 = curriculum.stage2_config(config, parse_mode("mgrpo"),
                                    RunPaths(str(tmp_path), tmp_path, str(tmp_path / "store")),
                                    selected=False)
  assert stage2.main.optim.learning_rate == pytest.approx(2.5e-4)
  assert stage2.sub.optim.learning_rate == pytest.approx(1e-3)
  assert stage2.experiment.num_steps == 5 and stage2.curriculum.stage2_steps == 0
  assert config.main.optim.learning_rate == 1e-3  # the stage-1 config is left as it was
