"""Rewards R_M and R_S (paper section 3.2), the R_S presets (the paper's, the released
code's) and the config's weights."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mgrpo_jax.core import rewards


def test_main_reward_table():
  # (format_ok, correct) -> R_M; an invalid format zeroes the reward whatever the answer.
  cases = {(0, 0): 0.0, (0, 1): 0.0, (1, 0): 0.1, (1, 1): 1.0}
  fmt, correct = np.array(list(cases)).T
  got = rewards.main_reward(fmt.astype(bool), correct)
  np.testing.assert_allclose(np.asarray(got), list(cases.values()), rtol=1e-6)
  weighted = rewards.main_reward(np.array([1, 1, 0]), np.array([0.0, 1.0, 1.0]), a1=0.3,
                                 a2=0.5)
  np.testing.assert_allclose(np.asarray(weighted), [0.3, 0.8, 0.0], rtol=1e-6)


def test_sub_reward_matches_the_paper_formula():
  grid = list(itertools.product([0, 1], [0, 1], [0.0, 0.25, 1.0]))
  fmt, main_correct, expert = (np.array(c) for c in zip(*grid, strict=True))
  got = np.asarray(rewards.sub_reward(fmt, main_correct, expert))
  want = [f * (0.1 + 0.4 * c + 0.5 * e) for f, c, e in grid]
  np.testing.assert_allclose(got, want, rtol=1e-6)
  custom = rewards.sub_reward(1, 1, 0.5, b1=0.2, b2=0.3, b3=0.4)
  assert float(custom) == pytest.approx(0.2 + 0.3 + 0.2)


def test_released_variant_is_point_one_or_one():
  got = rewards.SUB_REWARDS.get("released")(np.array([1, 1, 0, 0]), np.array([0, 1, 0, 1]),
                                            np.array([0.9, 0.0, 1.0, 1.0]))
  np.testing.assert_allclose(np.asarray(got), [0.1, 1.0, 0.0, 0.0], rtol=1e-6)
  # The config's weights reach it: format * (b1 + b2 * main_correct), no expert term.
  weighted = rewards.sub_reward_released(np.array([1, 1]), np.array([0, 1]),
                                         np.array([1.0, 1.0]), b1=0.2, b2=0.5, b3=0.0)
  np.testing.assert_allclose(np.asarray(weighted), [0.2, 0.7], rtol=1e-6)
  with pytest.raises(ValueError, match="no expert term: b3 must be 0, got 0.5"):
    rewards.sub_reward_released(np.array([1]), np.array([1]), np.array([1.0]), b3=0.5)


def test_sub_reward_presets_are_a_registry():
  assert rewards.SUB_REWARDS.names() == ["paper", "released"]
  assert rewards.SUB_REWARDS.get("paper") is rewards.sub_reward
  assert rewards.SUB_REWARDS.get("released") is rewards.sub_reward_released
  with pytest.raises(ValueError, match=r"unknown sub reward 'expert_only'; known: "
                                       r"\['paper', 'released'\]"):
    rewards.SUB_REWARDS.get("expert_only")
  with pytest.raises(ValueError, match="sub reward 'paper' is already registered"):
    rewards.SUB_REWARDS.register("paper")(rewards.sub_reward)


def test_reward_weights_are_the_configs_keys_as_set():
  assert rewards.RewardWeights.from_config(
      {"a1": 0.1, "a2": 0.9, "b1": 0.1, "b2": 0.4, "b3": 0.5, "sub_reward": "paper"}
  ) == rewards.RewardWeights()
  got = rewards.RewardWeights.from_config(
      {"a1": 0.2, "a2": 0.7, "b1": 0.3, "b2": 0.6, "b3": 0, "sub_reward": "released"})
  assert got == rewards.RewardWeights(a1=0.2, a2=0.7, b1=0.3, b2=0.6, b3=0.0,
                                      sub_reward="released")
  assert isinstance(got.b3, float)


def test_rollout_correctness_broadcasts_to_aligned_slots():
  main_correct = np.array([[1, 0]])  # [Q, K]
  fmt = np.array([[[1, 1, 0], [1, 0, 1]]], bool)  # [Q, K, D]
  expert = np.full((1, 2, 3), 0.2)
  got = np.asarray(rewards.sub_reward(fmt, main_correct[..., None], expert))
  want = fmt * (0.1 + 0.4 * main_correct[..., None] + 0.5 * 0.2)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert got.shape == (1, 2, 3) and got.dtype == np.float32


def test_bad_inputs_name_the_argument():
  with pytest.raises(ValueError, match="format_ok"):
    rewards.main_reward(np.array([2]), np.array([1]))
  with pytest.raises(ValueError, match="correct"):
    rewards.main_reward(np.array([1]), np.array([1.5]))
  with pytest.raises(ValueError, match="expert"):
    rewards.sub_reward(np.array([1]), np.array([1]), np.array([-0.1]))
  with pytest.raises(ValueError, match="main_correct"):
    rewards.sub_reward_released(np.array([1]), np.array([np.nan]))
