"""A user's R_M registered with gin, for the tests that bind it: every page and reward
of a run must show it instead of the paper's."""

from __future__ import annotations

import gin
import numpy as np

BINDING = "mgrpo_jax.plugins.main_reward_fn.fn = @tests.support.user_rewards.all_or_nothing"


@gin.configurable(module="tests.support.user_rewards")
def all_or_nothing(format_ok, correct, *, a1, a2):
  """R_M = 2 for a well-formed correct answer, else -1 (a1, a2 unused)."""
  del a1, a2
  return np.where(np.asarray(format_ok, bool) & (np.asarray(correct) == 1), 2.0, -1.0)
