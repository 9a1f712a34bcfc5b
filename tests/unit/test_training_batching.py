"""Packing trajectories into fixed [N, T] batches: no token lost or moved, padding inert."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.core.alignment import align_indices
from mgrpo_jax.core.losses import AGGREGATIONS, Surrogate, policy_loss
from mgrpo_jax.training import TokenSequence, TrainBatch, aligned_batch, pack_sequences
from mgrpo_jax.training.batching import row_buckets

BUCKETS = (4, 8, 16, 32)


@st.composite
def sequences(draw, max_count: int = 6) -> list[TokenSequence]:
  out = []
  for _ in range(draw(st.integers(0, max_count))):
    length = draw(st.integers(1, 32))
    ids = draw(st.lists(st.integers(1, 999), min_size=length, max_size=length))
    mask = [0] + draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=length - 1,
                               max_size=length - 1))
    logp = draw(st.lists(st.floats(-20.0, 0.0), min_size=length, max_size=length))
    out.append(TokenSequence(ids=np.array(ids), loss_mask=np.array(mask, np.float32),
                             logp=np.array(logp, np.float32)))
  return out


def _check_row(batch, row: int, sequence: TokenSequence, pad_id: int) -> None:
  n = len(sequence)
  assert np.array_equal(batch.ids[row, :n], sequence.ids)
  assert np.array_equal(batch.loss_mask[row, :n], sequence.loss_mask)
  on = sequence.loss_mask != 0
  np.testing.assert_array_equal(batch.old_logp[row, :n][on], sequence.logp[on])
  assert np.all(batch.old_logp[row, :n][~on] == 0)
  # Padding: pad id, no loss, no log-prob.
  assert np.all(batch.ids[row, n:] == pad_id)
  assert np.all(batch.loss_mask[row, n:] == 0) and np.all(batch.old_logp[row, n:] == 0)


@given(sequences(), st.integers(0, 3), st.integers(0, 5))
def test_pack_keeps_every_token_in_place(trajectories, extra_rows, pad_id):
  count = len(trajectories)
  advantages = np.arange(count, dtype=np.float32) - 1.5
  batch = pack_sequences(trajectories, advantages, num_rows=count + extra_rows,
                         buckets=BUCKETS, pad_id=pad_id)
  longest = max((len(s) for s in trajectories), default=1)
  seq_len = min(b for b in BUCKETS if b >= longest)
  assert batch.shape == (count + extra_rows, seq_len)
  assert batch.ids.dtype == np.int32 and batch.loss_mask.dtype == np.float32
  for row, sequence in enumerate(trajectories):
    _check_row(batch, row, sequence, pad_id)
  assert np.array_equal(batch.advantages[:count], advantages)
  assert np.array_equal(batch.weights, [1.0] * count + [0.0] * extra_rows)
  for row in range(count, count + extra_rows):  # padding rows are inert
    assert batch.advantages[row] == 0 and not batch.loss_mask[row].any()
  assert batch.loss_mask.sum() == sum(s.loss_mask.sum() for s in trajectories)


@given(st.data())
def test_aligned_batch_gathers_each_slot(data):
  num_q, num_k, num_d = (data.draw(st.integers(1, 3)) for _ in range(3))
  counts = np.array(data.draw(st.lists(st.integers(0, 4), min_size=num_q * num_k,
                                       max_size=num_q * num_k))).reshape(num_q, num_k)
  store = {}
  for q in range(num_q):
    for k in range(num_k):
      for call in range(counts[q, k]):
        length = data.draw(st.integers(1, 12))
        ids = np.full(length, 1000 * q + 100 * k + call + 1)
        mask = np.r_[0.0, np.ones(length - 1)].astype(np.float32)
        store[(q, k, call)] = TokenSequence(ids=ids, loss_mask=mask,
                                            logp=np.full(length, -0.5, np.float32))
  # Any alignment output: slot j of rollout (q, k) holds a call < counts[q, k] or is invalid.
  rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
  valid = (counts[..., None] > 0) & (rng.random((num_q, num_k, num_d)) < 0.8)
  index = np.where(valid, rng.integers(0, np.maximum(counts, 1)[..., None],
                                       (num_q, num_k, num_d)), 0).astype(np.int32)
  advantages = rng.standard_normal((num_q, num_k, num_d))
  batch = aligned_batch(store, index, valid, advantages, buckets=BUCKETS)
  assert batch.shape[0] == num_q * num_k * num_d
  for q in range(num_q):
    for k in range(num_k):
      for j in range(num_d):
        row = (q * num_k + k) * num_d + j
        if valid[q, k, j]:
          _check_row(batch, row, store[(q, k, int(index[q, k, j]))], 0)
          assert batch.weights[row] == 1.0
          assert batch.advantages[row] == np.float32(advantages[q, k, j])
        else:
          assert batch.weights[row] == 0 and batch.advantages[row] == 0
          assert not batch.loss_mask[row].any() and not batch.ids[row].any()


def test_aligned_batch_from_align_indices_keeps_each_rollouts_calls():
  counts = np.array([[3, 0, 1], [5, 2, 2]])
  index, valid = (np.asarray(x) for x in align_indices(counts, 4, jax.random.key(7)))
  store = {(q, k, c): TokenSequence(ids=np.array([9, 10 * q + k, c]), loss_mask=np.array(
      [0, 0, 1]), logp=np.array([0.0, 0.0, -1.0])) for q in range(2) for k in range(3)
           for c in range(counts[q, k])}
  batch = aligned_batch(store, index, valid, np.ones((2, 3, 4)), buckets=(4,))
  rows = batch.ids.reshape(2, 3, 4, 4)
  assert batch.weights.reshape(2, 3, 4)[0, 1].tolist() == [0, 0, 0, 0]  # no calls
  for q, k in ((0, 0), (0, 2), (1, 0), (1, 1), (1, 2)):
    assert np.all(rows[q, k, :, 1] == 10 * q + k)         # only its own rollout's calls
    used = set(rows[q, k, :, 2].tolist())
    assert used == set(range(min(counts[q, k], 4))) or counts[q, k] > 4
  assert len(set(rows[1, 0, :, 2].tolist())) == 4           # 5 calls -> 4 distinct kept


def test_aligned_batch_counts_duplicates_and_names_missing_calls():
  store = {(0, 0, 0): TokenSequence(ids=np.array([5, 6]), loss_mask=np.array([0, 1]),
                                    logp=np.array([0.0, -1.0]))}
  index = np.zeros((1, 2, 3), np.int32)
  valid = np.array([[[True, True, True], [False, False, False]]])
  batch = aligned_batch(store, index, valid, np.ones((1, 2, 3)), buckets=(4,))
  assert batch.ids[:3, :2].tolist() == [[5, 6]] * 3  # a duplicated call is three rows
  assert batch.weights.tolist() == [1, 1, 1, 0, 0, 0]
  valid[0, 1, 0] = True
  with pytest.raises(KeyError, match=r"\(0, 1, 0\)"):
    aligned_batch(store, index, valid, np.ones((1, 2, 3)), buckets=(4,))


def _slot_store(data, counts):
  store = {}
  for q, k in np.ndindex(*counts.shape):
    for call in range(counts[q, k]):
      length = data.draw(st.integers(2, 12))
      mask = np.r_[0.0, data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=length - 1,
                                           max_size=length - 1))].astype(np.float32)
      store[(q, k, call)] = TokenSequence(
          ids=np.full(length, 1000 * q + 100 * k + call + 1), loss_mask=mask,
          logp=np.linspace(-2.0, -0.1, length).astype(np.float32))
  return store


# The property's largest batch: Q*K*D <= 27 rows, sequences of at most 12 tokens.
PADDED_SHAPE = (27, 16)


def _padded(batch: TrainBatch) -> TrainBatch:
  """`batch` with empty rows (weight 0, no loss tokens) and loss-free columns up to
  PADDED_SHAPE: the same loss, gradient and metrics (`core.losses`: an all-zero mask row
  is not counted) in one shape, so the property compiles once per aggregation."""
  rows, length = PADDED_SHAPE

  def pad(x: np.ndarray) -> np.ndarray:
    widths = [(0, rows - x.shape[0]), (0, length - x.shape[-1])][:x.ndim]
    return np.pad(x, widths)

  return TrainBatch(*(pad(getattr(batch, f.name)) for f in dataclasses.fields(TrainBatch)))


@functools.partial(jax.jit, static_argnames="aggregation")
def _loss_and_shift_grad(batch, shift, aggregation):
  """((loss, metrics), d loss / d shift) of a batch whose log-probs move by shift*cos(ids);
  jitted over `_padded` batches, so the property's examples share one compiled program per
  aggregation instead of running op by op."""

  def objective(shift):
    logp = jnp.where(batch.loss_mask > 0, batch.old_logp + shift * jnp.cos(batch.ids), 0.0)
    return policy_loss(logp, batch.old_logp, batch.advantages, batch.loss_mask,
                       weights=batch.weights, surrogate=Surrogate(aggregation=aggregation))

  return jax.value_and_grad(objective, has_aux=True)(shift)


@given(st.data())
def test_a_merged_batch_has_the_per_slot_batchs_loss_gradient_and_metrics(data):
  """One row of weight w per call drawn into w slots: the same objective on fewer rows."""
  num_q, num_k, num_d = (data.draw(st.integers(1, 3)) for _ in range(3))
  counts = np.array(data.draw(st.lists(st.integers(0, 5), min_size=num_q * num_k,
                                       max_size=num_q * num_k))).reshape(num_q, num_k)
  store = _slot_store(data, counts)
  # Aligned in the largest [Q, K] grid (empty rollouts around it), so `align_indices`
  # compiles once per D: a rollout's slots depend on its own count alone.
  grid = np.zeros((3, 3), counts.dtype)
  grid[:num_q, :num_k] = counts
  index, valid = (np.asarray(x)[:num_q, :num_k] for x in align_indices(
      grid, num_d, jax.random.key(data.draw(st.integers(0, 2**16)))))
  # One advantage per call (its slots share a reward and a group), as mgrpo_advantages.
  call_advantage = {key: np.float32(np.sin(sum(key) + 0.5)) for key in store}
  advantages = np.zeros(index.shape, np.float32)
  for q, k, j in zip(*np.nonzero(valid), strict=True):
    advantages[q, k, j] = call_advantage[(q, k, int(index[q, k, j]))]
  slots = aligned_batch(store, index, valid, advantages, buckets=BUCKETS)
  buckets = row_buckets(num_q * num_k * num_d)
  merged = aligned_batch(store, index, valid, advantages, buckets=BUCKETS,
                         row_buckets=buckets)
  distinct = {(q, k, int(index[q, k, j])) for q, k, j in zip(*np.nonzero(valid), strict=True)}
  assert merged.shape[0] == min(b for b in buckets if b >= max(len(distinct), 1))
  assert merged.weights.sum() == slots.weights.sum() == valid.sum()
  assert np.count_nonzero(merged.weights) == len(distinct)
  aggregation = data.draw(st.sampled_from(sorted(AGGREGATIONS.names())))

  for shift in (0.0, 0.3):
    (loss_slots, metrics_slots), grad_slots = _loss_and_shift_grad(_padded(slots), shift,
                                                                   aggregation)
    (loss_merged, metrics_merged), grad_merged = _loss_and_shift_grad(_padded(merged), shift,
                                                                      aggregation)
    np.testing.assert_allclose(loss_merged, loss_slots, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad_merged, grad_slots, rtol=1e-5, atol=1e-6)
    for name, value in metrics_slots.items():
      np.testing.assert_allclose(metrics_merged[name], value, rtol=1e-5, atol=1e-6,
                                 err_msg=name)


def test_a_merged_batch_rejects_two_advantages_for_one_call():
  store = {(0, 0, 0): TokenSequence(ids=np.array([5, 6]), loss_mask=np.array([0, 1]),
                                    logp=np.array([0.0, -1.0]))}
  index = np.zeros((1, 1, 2), np.int32)
  valid = np.ones((1, 1, 2), bool)
  merged = aligned_batch(store, index, valid, np.ones((1, 1, 2)), buckets=(4,),
                         row_buckets=(1, 2))
  assert merged.shape == (1, 4) and merged.weights.tolist() == [2.0]
  with pytest.raises(ValueError, match=r"call \(q, k, call\) = \(0, 0, 0\) has advantages"):
    aligned_batch(store, index, valid, np.array([[[1.0, 2.0]]]), buckets=(4,),
                  row_buckets=(1, 2))


def test_row_buckets_are_quarters_in_multiples_of_the_micro_batch():
  assert row_buckets(192) == (48, 96, 144, 192)
  assert row_buckets(24, 8) == (8, 16, 24)
  assert row_buckets(2) == (1, 2)
  with pytest.raises(ValueError, match="max_rows=20 must be a positive multiple of 8"):
    row_buckets(20, 8)


def test_bad_trajectories_are_rejected():
  with pytest.raises(ValueError, match="loss_mask\\[0\\] must be 0"):
    TokenSequence(ids=np.array([1, 2]), loss_mask=np.array([1, 1]), logp=np.zeros(2))
  with pytest.raises(ValueError, match="logp has shape"):
    TokenSequence(ids=np.array([1, 2]), loss_mask=np.array([0, 1]), logp=np.zeros(3))
  long = TokenSequence(ids=np.arange(40), loss_mask=np.zeros(40), logp=np.zeros(40))
  with pytest.raises(ValueError, match="trajectory length 40 exceeds the largest bucket"):
    pack_sequences([long], [0.0], buckets=BUCKETS)
  with pytest.raises(ValueError, match="num_rows=0"):
    pack_sequences([long], [0.0], num_rows=0, buckets=(64,))
