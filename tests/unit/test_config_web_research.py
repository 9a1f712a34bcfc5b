"""configs/web_research.py: both presets validate once given what the user must pass (the
search URL; the smoke judge's weights) and hold the recipe: web tools, model judges, no
warm start, a user's JSONL questions."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from mgrpo_jax.config import ConfigError, apply_overrides, validate

CONFIG_FILE = pathlib.Path(__file__).resolve().parents[2] / "configs" / "web_research.py"
SEARCH = {"tools.web.search_url": "http://localhost:8888"}


@pytest.fixture(scope="module")
def module():
  spec = importlib.util.spec_from_file_location("web_research", CONFIG_FILE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _config(module, preset, **overrides):
  config = module.get_config(preset)
  apply_overrides(config, overrides)
  return config


def test_the_default_preset_needs_a_search_url_and_holds_the_recipe(module):
  with pytest.raises(ConfigError, match="tools.web.search_url"):
    validate(module.get_config())
  config = _config(module, "", **SEARCH)
  validate(config)
  assert (config.tools.backend, config.tools.web.search_kind) == ("web", "searxng")
  assert (config.rewards.answer_judge, config.rewards.expert_judge) == ("model", "model")
  assert config.rewards.judge.preset == config.main.model.preset == config.sub.model.preset
  assert config.world.source == "jsonl" and not config.warm_start.enabled
  # no gold path: the gold-path expert judge is refused
  config.rewards.expert_judge = "gold_path"
  with pytest.raises(ConfigError, match="rewards.expert_judge"):
    validate(config)


def test_the_smoke_preset_is_tiny_and_needs_the_judges_weights(module, tmp_path):
  with pytest.raises(ConfigError, match="rewards.judge.checkpoint"):
    validate(_config(module, "smoke", **SEARCH))
  config = _config(module, "smoke", **SEARCH, **{"rewards.judge.checkpoint": str(tmp_path)})
  validate(config)
  assert (config.mgrpo.queries_per_step, config.mgrpo.rollouts_per_query,
          config.mgrpo.aligned_sub_calls, config.experiment.num_steps) == (2, 2, 1, 2)
  assert config.main.model.preset == config.sub.model.preset == "tiny"
  assert config.rewards.judge.preset == "tiny" and not config.eval.enabled


def test_an_unknown_preset_is_named(module):
  with pytest.raises(ValueError, match="'cpu'"):
    module.get_config("cpu")
