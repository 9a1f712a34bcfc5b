"""A shared warm-start folder records what it was computed from (`warm_start/folder_config.py`)."""

import json

import pytest

from mgrpo_jax.config import ConfigError, apply_overrides, base_config
from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.warm_start import folder_config
from mgrpo_jax.warm_start.folder_config import CONFIG_NAME


def _config(**overrides):
  config = base_config()
  apply_overrides(config, overrides)
  return config


def defining_values(config):
  return folder_config.defining_values(config, parse_mode(str(config.experiment.mode)))


def check_or_record(config, folder, *, built):
  folder_config.check_or_record(config, parse_mode(str(config.experiment.mode)), folder,
                                built=built)


def test_the_team_arms_share_a_warm_start_and_the_other_arms_do_not():
  team = [defining_values(_config(**{"experiment.mode": mode}))
          for mode in ("mgrpo", "frozen_sub", "no_alignment")]
  assert team[0] == team[1] == team[2]
  assert team[0]["mode.agents"] == ["main", "sub"]
  single = defining_values(_config(**{"experiment.mode": "single_agent"}))
  shared = defining_values(_config(**{"experiment.mode": "shared_policy"}))
  assert single["mode.agents"] == shared["mode.agents"] == ["main"]
  assert (single["mode.demonstration"], shared["mode.demonstration"]) == ("single_agent",
                                                                          "mgrpo")
  assert single["mode.main_role"] == "single" and shared["mode.main_role"] == "main"


def test_rl_keys_are_not_recorded_and_the_warm_start_s_inputs_are():
  values = defining_values(base_config())
  for key in ("experiment.num_steps", "experiment.run_id", "mgrpo.queries_per_step",
              "main.optim.learning_rate", "sub.loss.clip_low", "eval.num_questions",
              "warm_start.dir", "main.model.init_checkpoint", "main.sampling.temperature",
              "sub.limits.shortest_train_length", "tools.backend", "tools.web.search_url"):
    assert key not in values, key
  for key in ("experiment.seed", "world.test_seed", "warm_start.num_questions",
              "main.model.preset", "sub.limits.max_context", "mgrpo.max_sub_calls",
              "tools.visit_chars", "prompts.system"):
    assert key in values, key


def test_a_folder_is_reused_only_with_the_values_it_was_computed_from(tmp_path):
  config = _config(**{"experiment.mode": "mgrpo", "warm_start.num_questions": 2000})
  check_or_record(config, tmp_path, built=False)
  record = json.loads((tmp_path / CONFIG_NAME).read_text())
  assert record == defining_values(config)
  # RL, names and the team's other modes: the same warm start.
  check_or_record(_config(**{"experiment.mode": "frozen_sub", "warm_start.num_questions": 2000,
                             "main.optim.learning_rate": 2e-3, "experiment.run_id": "other",
                             "mgrpo.rollouts_per_query": 16}), tmp_path, built=True)
  with pytest.raises(ConfigError, match=(
      r"warm start folder .* was computed with world\.test_seed=1, but this run has 2 \(")):
    check_or_record(_config(**{"warm_start.num_questions": 2000, "world.test_seed": 2}),
                    tmp_path, built=True)
  with pytest.raises(ConfigError, match=r"mode\.agents=\['main', 'sub'\], but this run has "
                                        r"\['main'\] \(and 2 more: mode\.demonstration"):
    check_or_record(_config(**{"experiment.mode": "single_agent",
                               "warm_start.num_questions": 2000}), tmp_path, built=True)
  assert json.loads((tmp_path / CONFIG_NAME).read_text()) == record  # left as it was


def test_keys_of_another_version_and_older_folders_are_not_compared(tmp_path):
  config = base_config()
  record = dict(defining_values(config), **{"world.some_removed_key": 3})
  del record["tools.visit_chars"]  # a key this version added
  (tmp_path / CONFIG_NAME).write_text(json.dumps(record))
  check_or_record(config, tmp_path, built=True)
  older = tmp_path / "older"
  older.mkdir()
  check_or_record(config, older, built=True)  # built before records: reused, not recorded
  assert not (older / CONFIG_NAME).exists()
  (tmp_path / CONFIG_NAME).write_text("{oops")
  with pytest.raises(ConfigError, match=r"warm_start_config\.json: not a warm start record"):
    check_or_record(config, tmp_path, built=True)
