"""Group-relative advantages (paper Eq. 9-13) against a loop-based numpy reference."""

from __future__ import annotations

import math
import zlib

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.core import advantages


def reference_group(values: list[float], std: str, eps: float) -> list[float]:
  """Eq. 10 / Eq. 13 for one group, written out with Python floats."""
  n = len(values)
  ddof = 1 if std == "unbiased" else 0
  if n - ddof <= 0:
    return [0.0] * n
  mu = sum(values) / n
  sigma = math.sqrt(sum((v - mu) ** 2 for v in values) / (n - ddof))
  if sigma == 0.0:
    return [0.0] * n
  return [(v - mu) / (sigma + eps) for v in values]


def reference_group_normalize(rewards, valid, std="population", eps=0.0):
  rewards = np.asarray(rewards, np.float64)
  valid = np.ones(rewards.shape, bool) if valid is None else np.asarray(valid, bool)
  out = np.zeros(rewards.shape)
  for lead in np.ndindex(*rewards.shape[:-1]):
    members = [g for g in range(rewards.shape[-1]) if valid[lead + (g,)]]
    normalized = reference_group([float(rewards[lead + (g,)]) for g in members], std, eps)
    for g, a in zip(members, normalized, strict=True):
      out[lead + (g,)] = a
  return out


def reference_mgrpo(main_rewards, sub_rewards, sub_valid, std="population", eps=0.0):
  q_count, k_count, d_count = sub_rewards.shape
  main = np.zeros((q_count, k_count))
  sub = np.zeros((q_count, k_count, d_count))
  for q in range(q_count):
    main[q] = reference_group([float(r) for r in main_rewards[q]], std, eps)
    slots = [(k, i) for k in range(k_count) for i in range(d_count) if sub_valid[q, k, i]]
    normalized = reference_group([float(sub_rewards[q, k, i]) for k, i in slots], std, eps)
    for (k, i), a in zip(slots, normalized, strict=True):
      sub[q, k, i] = a
  return main, sub


def _random_rewards(rng: np.random.Generator, shape, kind: str) -> np.ndarray:
  if kind == "continuous":
    return rng.normal(size=shape).astype(np.float32)
  return rng.choice(np.array([0.0, 0.1, 1.0], np.float32), size=shape)


@pytest.mark.parametrize("shape", [(1, 1), (4, 8), (3, 2, 5), (7, 1), (2, 3, 4, 6), (16,)])
@pytest.mark.parametrize("kind", ["continuous", "discrete"])
@pytest.mark.parametrize("std,eps", [("population", 0.0), ("unbiased", 1e-6),
                                     ("population", 0.5)])
def test_group_normalize_matches_reference(shape, kind, std, eps):
  rng = np.random.default_rng(zlib.crc32(repr((shape, kind, std, eps)).encode()))
  rewards = _random_rewards(rng, shape, kind)
  valid = rng.random(shape) < 0.7
  got = advantages.group_normalize(rewards, valid, std=std, eps=eps)
  want = reference_group_normalize(rewards, valid, std, eps)
  np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)
  got_all = advantages.group_normalize(rewards, std=std, eps=eps)
  np.testing.assert_allclose(np.asarray(got_all), reference_group_normalize(
      rewards, None, std, eps), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("q,k,d", [(1, 8, 8), (3, 4, 2), (5, 1, 3)])
@pytest.mark.parametrize("std", ["population", "unbiased"])
def test_mgrpo_advantages_matches_reference(q, k, d, std):
  rng = np.random.default_rng(q * 100 + k * 10 + d)
  main = _random_rewards(rng, (q, k), "discrete")
  sub = rng.random((q, k, d)).astype(np.float32)
  sub_valid = rng.random((q, k, d)) < 0.6
  sub_valid[0] = False  # a query whose rollouts never called the sub-agent
  main_adv, sub_adv = advantages.mgrpo_advantages(main, sub, sub_valid, std=std)
  want_main, want_sub = reference_mgrpo(main, sub, sub_valid, std)
  np.testing.assert_allclose(np.asarray(main_adv), want_main, rtol=2e-5, atol=2e-5)
  np.testing.assert_allclose(np.asarray(sub_adv), want_sub, rtol=2e-5, atol=2e-5)
  assert main_adv.shape == (q, k) and sub_adv.shape == (q, k, d)


def test_duplicates_count_as_full_samples():
  # K = 2, D = 2. Rollout 0 has calls with R_S = 1 and 0; rollout 1 has one call (R_S = 1)
  # duplicated into both slots. The group is {1, 0, 1, 1}: mu = 0.75,
  # sigma = sqrt((3 * 0.0625 + 0.5625) / 4) = sqrt(0.1875).
  sub = np.array([[[1.0, 0.0], [1.0, 1.0]]], np.float32)
  valid = np.ones((1, 2, 2), bool)
  _, sub_adv = advantages.mgrpo_advantages(np.zeros((1, 2), np.float32), sub, valid)
  sigma = math.sqrt(0.1875)
  want = np.array([[[0.25 / sigma, -0.75 / sigma], [0.25 / sigma, 0.25 / sigma]]])
  np.testing.assert_allclose(np.asarray(sub_adv), want, rtol=1e-6)


def test_degenerate_groups_give_exact_zeros():
  rewards = np.array([
      [0.1] * 8,                                 # constant: sigma 0
      [0.3, 0.7, 0.1, 0.9, 0.2, 0.4, 0.6, 0.8],  # all invalid below
      [0.1, 0.5, 0.3, 0.2, 0.9, 0.8, 0.7, 0.6],  # one valid entry
  ], np.float32)
  valid = np.array([[True] * 8, [False] * 8, [False] * 3 + [True] + [False] * 4])
  for std in ("population", "unbiased"):
    for eps in (0.0, 1e-6):
      got = np.asarray(advantages.group_normalize(rewards, valid, std=std, eps=eps))
      assert np.all(got == 0.0), (std, eps, got)
  # Main rewards {0, 0.1, 1.0} in a group where every rollout failed the same way.
  got = advantages.group_normalize(np.full((2, 8), 0.1, np.float32))
  assert np.all(np.asarray(got) == 0.0)


def test_two_valid_entries_are_plus_minus_one():
  got = advantages.group_normalize(np.array([[0.0, 1.0, 5.0]]), np.array([[1, 1, 0]], bool))
  np.testing.assert_array_equal(np.asarray(got), [[-1.0, 1.0, 0.0]])
  unbiased = advantages.group_normalize(np.array([[0.0, 1.0]]), std="unbiased")
  np.testing.assert_allclose(np.asarray(unbiased), [[-math.sqrt(0.5), math.sqrt(0.5)]],
                             rtol=1e-6)


_group_sizes = st.sampled_from([2, 5, 8])


@st.composite
def _groups(draw):
  g = draw(_group_sizes)
  rows = 3
  values = draw(st.lists(
      st.lists(st.one_of(st.sampled_from([0.0, 0.1, 1.0]),
                         st.floats(-100, 100, allow_nan=False, width=32)),
               min_size=g, max_size=g), min_size=rows, max_size=rows))
  valid = draw(st.lists(st.lists(st.booleans(), min_size=g, max_size=g),
                        min_size=rows, max_size=rows))
  return np.array(values, np.float32), np.array(valid, bool)


@given(_groups())
def test_property_zero_mean_unit_std_and_invalid_zero(groups):
  rewards, valid = groups
  adv = np.asarray(advantages.group_normalize(rewards, valid), np.float64)
  assert np.all(adv[~valid] == 0.0)
  for row in range(rewards.shape[0]):
    members = rewards[row][valid[row]].astype(np.float64)
    a = adv[row][valid[row]]
    if members.size == 0 or np.all(members == members[0]):
      assert np.all(a == 0.0)
      continue
    if members.std() < 1e-3 * max(1.0, np.abs(members).max()):
      continue  # float32 round-off dominates nearly constant groups
    assert abs(a.mean()) < 1e-4
    assert abs(np.sqrt(np.mean(a * a)) - 1.0) < 1e-4


@given(_groups(), st.randoms(use_true_random=False))
def test_property_permutation_equivariance(groups, rnd):
  rewards, valid = groups
  perm = list(range(rewards.shape[-1]))
  rnd.shuffle(perm)
  base = np.asarray(advantages.group_normalize(rewards, valid))
  permuted = np.asarray(advantages.group_normalize(rewards[:, perm], valid[:, perm]))
  np.testing.assert_allclose(permuted, base[:, perm], rtol=1e-5, atol=1e-5)


def test_works_inside_user_jit_and_matches_eager():
  rng = np.random.default_rng(0)
  rewards = rng.random((4, 6)).astype(np.float32)
  valid = rng.random((4, 6)) < 0.8
  jitted = jax.jit(lambda r, v: advantages.group_normalize(r, v, std="unbiased", eps=1e-6))
  np.testing.assert_allclose(
      np.asarray(jitted(rewards, valid)),
      np.asarray(advantages.group_normalize(rewards, valid, std="unbiased", eps=1e-6)),
      rtol=1e-6)


def test_bad_inputs_name_the_argument():
  with pytest.raises(ValueError, match="valid"):
    advantages.group_normalize(np.zeros((2, 3)), np.ones((2, 4), bool))
  with pytest.raises(ValueError, match="std"):
    advantages.group_normalize(np.zeros((2, 3)), std="sample")
  with pytest.raises(ValueError, match="eps"):
    advantages.group_normalize(np.zeros((2, 3)), eps=-1.0)
  with pytest.raises(ValueError, match="sub_rewards"):
    advantages.mgrpo_advantages(np.zeros((2, 3)), np.zeros((2, 4, 5)), np.ones((2, 4, 5)))
  with pytest.raises(ValueError, match="sub_valid"):
    advantages.mgrpo_advantages(np.zeros((2, 3)), np.zeros((2, 3, 5)), np.ones((2, 3, 4)))
  with pytest.raises(ValueError, match="main_rewards"):
    advantages.mgrpo_advantages(np.zeros(3), np.zeros((2, 3, 5)), np.ones((2, 3, 5)))


def test_python_lists_are_accepted():
  got = advantages.group_normalize([[0.0, 1.0, 5.0]], [[True, True, False]])
  np.testing.assert_array_equal(np.asarray(got), [[-1.0, 1.0, 0.0]])
