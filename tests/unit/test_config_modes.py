"""`experiment.mode` parsed once: the table every package reads (config/modes.py)."""

import pytest

from mgrpo_jax.config import SPEC
from mgrpo_jax.config.modes import MODES, parse_mode


def test_demonstration_mode_names_the_demonstrations_of_every_training_mode():
  assert {mode: parse_mode(mode).demonstration.name for mode in MODES} == {
      "mgrpo": "mgrpo", "frozen_sub": "mgrpo", "no_alignment": "mgrpo",
      "unsynchronized": "mgrpo", "shared_policy": "mgrpo", "single_agent": "single_agent"}
  with pytest.raises(ValueError, match="unknown mode 'solo'"):
    parse_mode("solo")


def test_each_mode_says_which_agents_exist_and_which_are_trained():
  table = {mode: (m.agents, m.sub_agent, m.decoupled, m.sub_trained, m.aligned, m.queued,
                  m.shared, m.single, m.main_role)
           for mode in MODES for m in [parse_mode(mode)]}
  assert table == {
      "mgrpo": (("main", "sub"), True, True, True, True, False, False, False, "main"),
      "frozen_sub": (("main", "sub"), True, True, False, True, False, False, False, "main"),
      "no_alignment": (("main", "sub"), True, True, True, False, False, False, False, "main"),
      "unsynchronized": (("main", "sub"), True, True, True, False, True, False, False, "main"),
      "shared_policy": (("main",), True, False, False, True, False, True, False, "main"),
      "single_agent": (("main",), False, False, False, True, False, False, True, "single"),
  }
  assert parse_mode(parse_mode("mgrpo")) is parse_mode("mgrpo")


def test_the_decoupled_modes_roll_out_alike():
  assert {mode: parse_mode(mode).rollouts for mode in MODES} == {
      "mgrpo": "mgrpo", "frozen_sub": "mgrpo", "no_alignment": "mgrpo",
      "unsynchronized": "mgrpo", "shared_policy": "shared_policy",
      "single_agent": "single_agent"}


def test_check_agent_names_the_mode_and_its_agents():
  assert parse_mode("frozen_sub").check_agent("sub") == "sub"
  with pytest.raises(ValueError, match=r"experiment.mode='single_agent' trains \('main',\), "
                                       r"not 'sub'"):
    parse_mode("single_agent").check_agent("sub")


def test_the_config_key_accepts_exactly_the_modes():
  assert SPEC["experiment"]["mode"].choices == MODES
