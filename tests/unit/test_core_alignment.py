"""Trajectory alignment (paper section 4.1): invariants, determinism, uniformity."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.core import alignment

# Upper 0.001 quantiles of the chi-square distribution (standard tables).
CHI2_CRITICAL_0_001 = {2: 13.816, 8: 26.124, 9: 27.877}


def chi_square(observed: np.ndarray, expected: np.ndarray) -> float:
  observed = np.asarray(observed, np.float64)
  expected = np.asarray(expected, np.float64)
  return float(np.sum((observed - expected) ** 2 / expected))


_counts = st.lists(
    st.one_of(st.integers(0, 20), st.sampled_from([0, 1, 7, 8, 9, 10**6, 2**31 - 1])),
    min_size=12, max_size=12).map(lambda c: np.array(c, np.int64).reshape(3, 4))


@given(_counts, st.sampled_from([1, 3, 8]), st.integers(0, 2**31 - 1))
def test_property_duplicate_drop(counts, d_max, seed):
  index, valid = alignment.align_indices(counts, d_max, jax.random.key(seed))
  index, valid = np.asarray(index), np.asarray(valid)
  assert index.shape == valid.shape == (3, 4, d_max)
  assert index.dtype == np.int32 and valid.dtype == bool
  for q, k in np.ndindex(3, 4):
    c, row, ok = int(counts[q, k]), index[q, k], valid[q, k]
    if c == 0:
      assert not ok.any() and np.all(row == 0)
      continue
    assert ok.all()
    assert np.all((row >= 0) & (row < c))
    if c >= d_max:
      assert len(set(row.tolist())) == d_max  # distinct calls
      assert np.all(np.diff(row) > 0)  # in call order
    else:
      assert set(row.tolist()) == set(range(c))  # every call at least once
      np.testing.assert_array_equal(row[:c], np.arange(c))  # originals first


@given(_counts, st.sampled_from([1, 3, 8]), st.integers(0, 2**31 - 1))
def test_property_mask_mode_and_shared_drop(counts, d_max, seed):
  key = jax.random.key(seed)
  index, valid = map(np.asarray, alignment.align_indices(counts, d_max, key, mode="mask"))
  dup_index, _ = alignment.align_indices(counts, d_max, key)
  dup_index = np.asarray(dup_index)
  for q, k in np.ndindex(3, 4):
    c = int(counts[q, k])
    if c >= d_max:
      assert valid[q, k].all()
      np.testing.assert_array_equal(index[q, k], dup_index[q, k])  # the same drop
    else:
      np.testing.assert_array_equal(valid[q, k], np.arange(d_max) < c)
      np.testing.assert_array_equal(index[q, k], np.where(np.arange(d_max) < c,
                                                          np.arange(d_max), 0))


@given(st.integers(0, 2**31 - 1))
def test_property_same_key_same_result(seed):
  counts = np.array([[0, 3, 8, 50], [1, 12, 5, 10**5], [2, 2, 9, 0]], np.int32)
  first = alignment.align_indices(counts, 8, jax.random.key(seed))
  second = alignment.align_indices(counts, 8, jax.random.key(seed))
  for a, b in zip(first, second, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  other, _ = alignment.align_indices(counts, 8, jax.random.key(seed + 1))
  assert not np.array_equal(np.asarray(other), np.asarray(first[0]))


def test_raw_uint32_keys_work_like_typed_keys():
  counts = np.array([[3, 9, 0, 1]] * 3, np.int32)
  typed = alignment.align_indices(counts, 8, jax.random.key(7))
  raw = alignment.align_indices(counts, 8, jax.random.PRNGKey(7))
  np.testing.assert_array_equal(np.asarray(typed[0]), np.asarray(raw[0]))


def _subset_ids(index: np.ndarray, c: int, d: int) -> np.ndarray:
  subsets = {s: i for i, s in enumerate(itertools.combinations(range(c), d))}
  return np.array([subsets[tuple(row)] for row in index.reshape(-1, d).tolist()])


def test_drop_selects_every_subset_uniformly_over_many_keys():
  c, d, n = 5, 3, 2000  # C(5, 3) = 10 subsets, 200 expected each
  keys = jax.random.split(jax.random.key(1234), n)
  counts = np.array([[c]], np.int32)
  index = jax.vmap(lambda k: alignment.align_indices(counts, d, k)[0])(keys)
  observed = np.bincount(_subset_ids(np.asarray(index), c, d), minlength=10)
  assert chi_square(observed, np.full(10, n / 10)) < CHI2_CRITICAL_0_001[9], observed


def test_drop_of_one_call_is_uniform():
  c, d = 9, 8  # the dropped call is uniform over 9
  counts = np.full((500, 8), c, np.int32)
  index = np.asarray(alignment.align_indices(counts, d, jax.random.key(99))[0]).reshape(-1, d)
  dropped = np.array([next(iter(set(range(c)) - set(row))) for row in index.tolist()])
  observed = np.bincount(dropped, minlength=c)
  assert chi_square(observed, np.full(c, len(dropped) / c)) < CHI2_CRITICAL_0_001[8], observed


def test_drop_from_many_calls_is_uniform_across_the_range():
  c, d = 1000, 8  # inclusion of each call has probability 8/1000; bin calls by hundreds
  counts = np.full((500, 8), c, np.int32)
  index = np.asarray(alignment.align_indices(counts, d, jax.random.key(5))[0])
  observed = np.bincount(index.ravel() // 100, minlength=10)
  assert chi_square(observed, np.full(10, index.size / 10)) < CHI2_CRITICAL_0_001[9], observed


def test_duplicates_are_uniform_draws_from_the_rollouts_calls():
  c, d = 3, 8  # slots 3..7 are uniform draws from {0, 1, 2}
  counts = np.full((500, 8), c, np.int32)
  index = np.asarray(alignment.align_indices(counts, d, jax.random.key(11))[0])
  observed = np.bincount(index[..., c:].ravel(), minlength=c)
  assert chi_square(observed, np.full(c, index[..., c:].size / c)) < CHI2_CRITICAL_0_001[2]


def test_chi_square_check_rejects_a_biased_selection():
  # "Keep the first D calls" is not uniform: the same statistic must reject it.
  c, d = 5, 3
  biased = np.tile(np.arange(d), (2000, 1))
  observed = np.bincount(_subset_ids(biased, c, d), minlength=10)
  assert chi_square(observed, np.full(10, 200.0)) > CHI2_CRITICAL_0_001[9]


def test_counts_beyond_any_width_and_under_user_jit():
  counts = np.array([[2**31 - 1, 10**9, 8, 0]] * 3, np.int64)
  index, valid = alignment.align_indices(counts, 8, jax.random.key(3))
  index = np.asarray(index)
  for k, c in enumerate(counts[0]):
    if c:
      assert len(set(index[0, k].tolist())) == 8 and index[0, k].max() < c
  jitted = jax.jit(lambda c, key: alignment.align_indices(c, 8, key))
  j_index, j_valid = jitted(counts.astype(np.int32), jax.random.key(3))
  np.testing.assert_array_equal(np.asarray(j_index), index)
  np.testing.assert_array_equal(np.asarray(j_valid), np.asarray(valid))
  # Under tracing, negative counts cannot be rejected and count as 0.
  _, neg_valid = jitted(np.array([[-2, 1, 1, 1]] * 3, np.int32), jax.random.key(3))
  assert not np.asarray(neg_valid)[0, 0].any()


def test_alignment_stats():
  counts = np.array([[0, 1, 3, 8], [12, 9, 0, 2]], np.int32)
  stats = alignment.alignment_stats(counts, 8)
  assert int(stats["dropped_calls"]) == 4 + 1
  assert int(stats["filled_slots"]) == 7 + 5 + 6
  assert int(stats["empty_rollouts"]) == 2
  assert float(stats["frac_rollouts_within_d"]) == pytest.approx(6 / 8)


def test_registered_mode_is_used():
  name = "test_first_calls_only"
  if name not in alignment.MODES:
    @alignment.MODES.register(name)
    def _first_calls(counts, d_max, key):
      del key
      step = jax.numpy.arange(d_max)
      valid = step < counts[..., None]
      return jax.numpy.where(valid, step, 0), valid

  index, valid = alignment.align_indices(np.array([[2, 10]]), 4, jax.random.key(0), mode=name)
  np.testing.assert_array_equal(np.asarray(index), [[[0, 1, 0, 0], [0, 1, 2, 3]]])
  np.testing.assert_array_equal(np.asarray(valid), [[[1, 1, 0, 0], [1, 1, 1, 1]]])
  with pytest.raises(ValueError, match="already registered"):
    alignment.MODES.register(name)(lambda *a: a)


def test_bad_inputs_name_the_argument():
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="counts must be >= 0"):
    alignment.align_indices(np.array([[1, -1]]), 8, key)
  with pytest.raises(ValueError, match="counts must be an integer"):
    alignment.align_indices(np.array([[1.5, 2.0]]), 8, key)
  with pytest.raises(ValueError, match=r"counts must have shape \[Q, K\]"):
    alignment.align_indices(np.array([1, 2]), 8, key)
  with pytest.raises(ValueError, match="d_max"):
    alignment.align_indices(np.array([[1, 2]]), 0, key)
  with pytest.raises(ValueError, match="alignment mode"):
    alignment.align_indices(np.array([[1, 2]]), 8, key, mode="fifo")
  with pytest.raises(ValueError, match="key"):
    alignment.align_indices(np.array([[1, 2]]), 8, 42)
