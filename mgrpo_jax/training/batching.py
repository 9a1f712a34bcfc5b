"""Fixed-shape training batches from variable-length trajectories (pure numpy).

The jitted update compiles once per batch shape, so trajectories are packed into a
[N, T] batch: one trajectory per row, right-padded to T, the smallest length bucket
that holds the longest row (few buckets -> few compiled programs).

Row i of a `TrainBatch`:
  ids         int32 [N, T]    the trajectory's tokens (prompt, M/S turns, tool outputs),
                              then `pad_id`.
  loss_mask   float32 [N, T]  1 at tokens the policy sampled, 0 elsewhere (prompts, tool
                              outputs, the other agent's text, padding).
  old_logp    float32 [N, T]  log pi_old of token t given tokens < t, as the sampler
                              reported it; 0 off the mask.
  advantages  float32 [N]     A_i (main: A_{q,M} of the rollout; sub: A_{q,S} of the slot).
  weights     float32 [N]     1 for real rows, 0 for padding rows and invalid slots.

Right padding is inert: attention is causal, so the logits of real tokens never see the
padding, and padding has mask 0 and weight 0.

`aligned_batch` builds the sub-agent batch of a step from the alignment of
`mgrpo_jax.core.alignment.align_indices`: slot (q, k, j) of [Q, K, D] holds the S
trajectory of call index[q, k, j] of rollout (q, k); rows are in (q, k, j) row-major
order (N = Q * K * D); duplicated calls appear as many times as they were drawn (the
paper counts them as full samples); invalid slots are empty rows of weight 0. With
`row_buckets`, each call drawn w times is one row of weight w instead (the loss weighs a
row's terms and its count by w_i: the same loss, gradient and metrics,
`mgrpo_jax.core.losses`), and N is the smallest row bucket that holds the distinct
calls: about half the rows when M makes one or two calls of D = 3 slots.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
from flax import struct

from mgrpo_jax.sampling.buckets import pick_bucket

DEFAULT_LENGTH_BUCKETS = (128, 256, 512, 1024, 2048, 4096)


@struct.dataclass
class TrainBatch:
  """One agent's update batch (shapes in the module docstring)."""

  ids: np.ndarray
  loss_mask: np.ndarray
  old_logp: np.ndarray
  advantages: np.ndarray
  weights: np.ndarray

  @property
  def shape(self) -> tuple[int, int]:
    """(N rows, T tokens)."""
    return tuple(self.ids.shape)


@dataclasses.dataclass(frozen=True)
class TokenSequence:
  """One trajectory as the trainer sees it (token in, token out: never re-tokenized).

  Attributes:
    ids: int [L] token ids.
    loss_mask: [L], nonzero at tokens this policy sampled (position 0 never: it has no
      context to be sampled from).
    logp: float [L], the sampler's log-probability of each token (0 where not sampled).
  """

  ids: np.ndarray
  loss_mask: np.ndarray
  logp: np.ndarray

  def __post_init__(self):
    ids, mask, logp = (np.asarray(x) for x in (self.ids, self.loss_mask, self.logp))
    if ids.ndim != 1:
      raise ValueError(f"TokenSequence.ids must be 1-D [L], got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer) and ids.size:
      raise ValueError(f"TokenSequence.ids must be integers, got dtype {ids.dtype}")
    for name, value in (("loss_mask", mask), ("logp", logp)):
      if value.shape != ids.shape:
        raise ValueError(f"TokenSequence.{name} has shape {value.shape}, ids has {ids.shape}")
    if mask.size and mask[0] != 0:
      raise ValueError("TokenSequence.loss_mask[0] must be 0: the first token has no context")
    object.__setattr__(self, "ids", ids)
    object.__setattr__(self, "loss_mask", mask)
    object.__setattr__(self, "logp", logp)

  def __len__(self) -> int:
    return int(self.ids.shape[0])


def _empty_batch(num_rows: int, seq_len: int, pad_id: int) -> TrainBatch:
  return TrainBatch(ids=np.full((num_rows, seq_len), pad_id, np.int32),
                    loss_mask=np.zeros((num_rows, seq_len), np.float32),
                    old_logp=np.zeros((num_rows, seq_len), np.float32),
                    advantages=np.zeros((num_rows,), np.float32),
                    weights=np.zeros((num_rows,), np.float32))


def _write_row(batch: TrainBatch, row: int, sequence: TokenSequence) -> None:
  n = len(sequence)
  batch.ids[row, :n] = sequence.ids
  batch.loss_mask[row, :n] = sequence.loss_mask
  batch.old_logp[row, :n] = np.where(sequence.loss_mask != 0, sequence.logp, 0.0)


def _seq_len(sequences: Sequence[TokenSequence], buckets: Sequence[int]) -> int:
  longest = max((len(s) for s in sequences), default=1)
  return pick_bucket(longest, buckets, "trajectory length")


def pack_sequences(sequences: Sequence[TokenSequence], advantages: Sequence[float], *,
                   weights: Sequence[float] | None = None, num_rows: int | None = None,
                   buckets: Sequence[int] = DEFAULT_LENGTH_BUCKETS,
                   pad_id: int = 0) -> TrainBatch:
  """Packs trajectories into one right-padded [N, T] batch, one row each, in order.

  Args:
    sequences: the trajectories (main agent: the Q*K rollouts in (q, k) order).
    advantages: float [len(sequences)], A_i of each trajectory.
    weights: optional float [len(sequences)] row weights (default 1).
    num_rows: N; rows beyond the trajectories are empty rows of weight 0 (default: one
      row per trajectory).
    buckets: allowed T values; T is the smallest one >= the longest trajectory.
    pad_id: token id of padding.

  Returns:
    A `TrainBatch` of numpy arrays.
  """
  count = len(sequences)
  num_rows = count if num_rows is None else num_rows
  if num_rows < count:
    raise ValueError(f"num_rows={num_rows} is smaller than the {count} trajectories")
  advantages = np.asarray(advantages, np.float32)
  if advantages.shape != (count,):
    raise ValueError(f"advantages has shape {advantages.shape}, expected ({count},)")
  weights = np.ones(count, np.float32) if weights is None else np.asarray(weights, np.float32)
  if weights.shape != (count,):
    raise ValueError(f"weights has shape {weights.shape}, expected ({count},)")
  batch = _empty_batch(num_rows, _seq_len(sequences, buckets), pad_id)
  for row, sequence in enumerate(sequences):
    _write_row(batch, row, sequence)
  batch.advantages[:count] = advantages
  batch.weights[:count] = weights
  return batch


def row_buckets(max_rows: int, multiple: int = 1, count: int = 4) -> tuple[int, ...]:
  """Row counts a compacted batch may take: max_rows * i / count for i = 1..count, each
  rounded up to a multiple of `multiple` (a micro-batch size dividing max_rows)."""
  if max_rows < 1 or multiple < 1 or max_rows % multiple:
    raise ValueError(f"max_rows={max_rows} must be a positive multiple of {multiple}")
  return tuple(sorted({min(max_rows, -(-(max_rows * i // count or 1) // multiple) * multiple)
                       for i in range(1, count + 1)}))


def aligned_batch(sequences: Mapping[tuple[int, int, int], TokenSequence], index: np.ndarray,
                  valid: np.ndarray, advantages: np.ndarray, *,
                  buckets: Sequence[int] = DEFAULT_LENGTH_BUCKETS,
                  row_buckets: Sequence[int] | None = None,
                  pad_id: int = 0) -> TrainBatch:
  """The sub-agent batch of one step, gathered through the alignment.

  Args:
    sequences: S trajectories keyed (q, k, call): call `call` of rollout k of query q.
    index: int [Q, K, D] from `align_indices`: the call held by each slot.
    valid: bool [Q, K, D]: whether the slot holds a call.
    advantages: float [Q, K, D], A_{q,S} of each slot (`mgrpo_advantages`); ignored at
      invalid slots. A call's slots share one advantage (one reward, one group).
    buckets: allowed T values.
    row_buckets: None, or the allowed N values (`row_buckets`) of a merged batch.
    pad_id: token id of padding.

  Returns:
    Without `row_buckets`, a `TrainBatch` of N = Q*K*D rows in (q, k, j) order; invalid
    slots are empty rows with weight 0 and advantage 0. With them, one row per distinct
    call in the order of its first slot, its weight the number of slots holding it, then
    empty rows up to N, the smallest row bucket that holds them (module docstring).
  """
  index, valid = np.asarray(index), np.asarray(valid, bool)
  advantages = np.asarray(advantages, np.float32)
  if index.ndim != 3:
    raise ValueError(f"index must be [Q, K, D], got shape {index.shape}")
  for name, value in (("valid", valid), ("advantages", advantages)):
    if value.shape != index.shape:
      raise ValueError(f"{name} has shape {value.shape}, index has {index.shape}")
  slots = list(zip(*np.nonzero(valid), strict=True))
  chosen = []
  for q, k, j in slots:
    key = (int(q), int(k), int(index[q, k, j]))
    if key not in sequences:
      raise KeyError(f"no sub-agent trajectory for (q, k, call) = {key}, needed by slot "
                     f"(q, k, j) = {(int(q), int(k), int(j))}")
    chosen.append(sequences[key])
  if row_buckets is not None:
    return _merged_batch(slots, chosen, index, advantages, row_buckets, buckets, pad_id)
  num_q, num_k, num_d = index.shape
  batch = _empty_batch(num_q * num_k * num_d, _seq_len(chosen, buckets), pad_id)
  for (q, k, j), sequence in zip(slots, chosen, strict=True):
    _write_row(batch, (q * num_k + k) * num_d + j, sequence)
  flat_valid = valid.reshape(-1)
  batch.advantages[:] = np.where(flat_valid, advantages.reshape(-1), 0.0)
  batch.weights[:] = flat_valid.astype(np.float32)
  return batch


def _merged_batch(slots: list, chosen: list[TokenSequence], index: np.ndarray,
                  advantages: np.ndarray, row_buckets: Sequence[int],
                  buckets: Sequence[int], pad_id: int) -> TrainBatch:
  """`aligned_batch` with each call's slots in one row of weight = their count."""
  rows: dict[tuple[int, int, int], int] = {}
  sequences, row_advantages, weights = [], [], []
  for (q, k, j), sequence in zip(slots, chosen, strict=True):
    call = (int(q), int(k), int(index[q, k, j]))
    if call in rows:
      row = rows[call]
      if advantages[q, k, j] != row_advantages[row]:
        raise ValueError(f"call (q, k, call) = {call} has advantages {row_advantages[row]} "
                         f"and {advantages[q, k, j]} in two slots; a call's slots share one")
      weights[row] += 1.0
      continue
    rows[call] = len(sequences)
    sequences.append(sequence)
    row_advantages.append(float(advantages[q, k, j]))
    weights.append(1.0)
  return pack_sequences(sequences, row_advantages, weights=weights,
                        num_rows=pick_bucket(max(len(sequences), 1), row_buckets,
                                             "distinct sub-agent calls"),
                        buckets=buckets, pad_id=pad_id)
