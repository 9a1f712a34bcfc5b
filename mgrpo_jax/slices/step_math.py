"""Rewards, alignment and advantages of one training step, from records and outcomes (pure).

Main agent (paper section 3.1, Eq. 9-10), Q queries x K rollouts:
  R_M [Q, K]      = plugins.main_rewards(format_ok, correct; a1, a2)
  A_M [Q, K]      = group_normalize(R_M) over the K rollouts of each query

Sub-agent (paper sections 3.2 and 4), D aligned slots per rollout:
  R_S of call i   = plugins.sub_rewards(format_ok_S, correct_M[q, k], expert; b1, b2, b3)
  index, valid    = align_indices(d [Q, K], D, key)                  [Q, K, D]
  A_S [Q, K, D]   = mgrpo_advantages(R_M, R_S[index], valid): normalized over all valid
                    [K, D] slots of query q (duplicates count as full samples)

`no_alignment` (the released code's grouping, docs/ALGORITHM.md section 4): the
step's S calls in arrival order (the order the service received them: delegation batch,
then position in the batch) fill N = Q*K*D rows; calls beyond N are dropped, missing
ones leave empty rows of weight 0; consecutive groups of G = K*D rows are normalized
together whatever query or rollout they came from. Unlike the released FIFO, nothing is
carried over to the next step, so each step's batch is a function of that step alone.

`unsynchronized` (the paper's arm without synchronization, section 5.3.3; the released
code's FIFO): S trains on the N oldest calls of a FIFO that every step's calls join after
its own update (`sub_queue.py`), groups of G consecutive calls normalized together:
`queued_sub_step`.

What a step's functions share travels as small frozen objects: `CreditConfig` (the reward
weights and the normalization), `SlotAlignment` (D, the alignment mode, the step's key),
`Packing` (the pad id, the row lengths and row counts of S's batch), `MainStep` (M's
side: the [Q, K] grid, R_M, A_M) and `Scoring` (the questions and r_expert).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from mgrpo_jax import plugins
from mgrpo_jax.agents.records import MainRecord, SubRecord, Trajectory
from mgrpo_jax.core import advantages as advantages_lib
from mgrpo_jax.core import alignment as alignment_lib
from mgrpo_jax.core.rewards import RewardWeights
from mgrpo_jax.sampling.buckets import pick_bucket
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.batching import (
  DEFAULT_LENGTH_BUCKETS,
  TokenSequence,
  TrainBatch,
  aligned_batch,
  pack_sequences,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdvantageConfig:
  """Group normalization (keys `mgrpo.advantage_std`, `mgrpo.advantage_eps`)."""

  std: str = "population"
  eps: float = 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreditConfig:
  """How a step's credit is computed: the reward weights (alpha_1, alpha_2 of R_M;
  beta_1..3 of R_S) and the group normalization of A_M and A_S."""

  weights: RewardWeights
  advantage: AdvantageConfig

  @classmethod
  def from_config(cls, config: Any) -> CreditConfig:
    """The run's (keys `rewards.*`, `mgrpo.advantage_std`, `mgrpo.advantage_eps`)."""
    mgrpo = config.mgrpo
    return cls(weights=RewardWeights.from_config(config.rewards),
               advantage=AdvantageConfig(std=str(mgrpo.advantage_std),
                                         eps=float(mgrpo.advantage_eps)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlotAlignment:
  """S's alignment of one step's calls to D slots (paper section 4, `core.alignment`).

  Attributes:
    num_slots: D, slots per rollout.
    mode: "duplicate_drop" or "mask".
    key: the step's alignment key (which calls are duplicated or dropped).
    duplicate_weight: a kept call's weight in S's loss: "slots" (the paper: a call in m
      slots weighs m, so every rollout with a call weighs D and a call of a rollout of
      c <= D calls about D / c) or "call" (each kept call weighs 1; its duplicates still
      enter mu_{q,S} and sigma_{q,S}).
  """

  num_slots: int
  mode: str
  key: jax.Array
  duplicate_weight: str = "slots"

  @classmethod
  def of_step(cls, config: Any, step: int) -> SlotAlignment:
    """Step t's alignment in the run `config` (`mgrpo.aligned_sub_calls`,
    `mgrpo.alignment`, the key from (experiment.seed, t)): the same in both slices."""
    return cls(num_slots=int(config.mgrpo.aligned_sub_calls),
               mode=str(config.mgrpo.alignment),
               key=agent_setup.step_key(int(config.experiment.seed), "align", step),
               duplicate_weight=str(config.mgrpo.duplicate_weight))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Packing:
  """How S's rows become its [N, T] batch (`batching.pack_sequences`, `aligned_batch`).

  Attributes:
    pad_id: the id of padding tokens.
    buckets: the row lengths T a batch may be padded to.
    row_buckets: the row counts N a batch may have (None: N is every slot, or row).
  """

  pad_id: int
  buckets: Sequence[int] = DEFAULT_LENGTH_BUCKETS
  row_buckets: Sequence[int] | None = None


@dataclasses.dataclass(frozen=True)
class Scoring:
  """What S's reports are scored with: the training questions by id and r_expert
  (`judge(question, subtask, report)`; None: S's records are left unscored)."""

  questions: Mapping[str, Any]
  judge: Callable[..., float] | None

  @classmethod
  def of(cls, questions: Sequence[Any], judge: Callable[..., float] | None) -> Scoring:
    """From the questions themselves (objects with an `id`)."""
    return cls({q.id: q for q in questions}, judge)


def token_sequence(trajectory: Trajectory) -> TokenSequence:
  """The trainer's view of a trajectory (sampled ids carry loss, token in token out)."""
  return TokenSequence(trajectory.ids, trajectory.loss_mask.astype(np.float32),
                       trajectory.logprobs)


def main_grid(records: Sequence[MainRecord], query_ids: Sequence[str], num_rollouts: int
              ) -> dict[str, np.ndarray]:
  """Scored M records -> arrays [Q, K]: format_ok, correct, num_sub_calls, policy_version."""
  position = {qid: q for q, qid in enumerate(query_ids)}
  shape = (len(query_ids), num_rollouts)
  grid = {"format_ok": np.zeros(shape, bool), "correct": np.zeros(shape, np.float32),
          "num_sub_calls": np.zeros(shape, np.int32),
          "policy_version": np.zeros(shape, np.int32)}
  seen = np.zeros(shape, bool)
  for record in records:
    if record.query_id not in position or not 0 <= record.rollout_index < num_rollouts:
      raise KeyError(f"M record {record.key} is outside the step's queries x {num_rollouts} "
                     "rollouts")
    q, k = position[record.query_id], record.rollout_index
    if np.isnan(record.correct):
      raise ValueError(f"M record {record.key} is not scored (correct is NaN)")
    seen[q, k] = True
    grid["format_ok"][q, k] = record.trajectory.format_ok
    grid["correct"][q, k] = record.correct
    grid["num_sub_calls"][q, k] = record.num_sub_calls
    grid["policy_version"][q, k] = record.trajectory.policy_version
  if not seen.all():
    q, k = np.argwhere(~seen)[0]
    raise KeyError(f"no M record for (query, rollout) = ({query_ids[q]!r}, {k})")
  return grid


def main_advantages(rewards: np.ndarray, config: AdvantageConfig) -> np.ndarray:
  """A_M float32 [Q, K]: R_M normalized over each query's K rollouts."""
  return np.asarray(advantages_lib.group_normalize(rewards, std=config.std, eps=config.eps),
                    np.float32)


@dataclasses.dataclass(frozen=True)
class MainStep:
  """M's side of one step's credit.

  Attributes:
    query_ids: the step's Q queries.
    grid: `main_grid`'s [Q, K] arrays (format_ok, correct, num_sub_calls, ...).
    reward: R_M float32 [Q, K].
    advantage: A_M float32 [Q, K].
  """

  query_ids: list[str]
  grid: dict[str, np.ndarray]
  reward: np.ndarray
  advantage: np.ndarray

  @classmethod
  def score(cls, records: Sequence[MainRecord], query_ids: Sequence[str], num_rollouts: int,
            credit: CreditConfig) -> MainStep:
    """R_M (`plugins.main_rewards`) and A_M of the step's scored M records."""
    grid = main_grid(records, query_ids, num_rollouts)
    reward = plugins.main_rewards(grid["format_ok"], grid["correct"], credit.weights)
    return cls(list(query_ids), grid, reward, main_advantages(reward, credit.advantage))


def received_calls(arrived: Sequence[tuple[tuple[int, int], SubRecord]],
                   query_ids: Sequence[str], named: Mapping[tuple[int, int, int], str]
                   ) -> tuple[list[tuple[tuple[int, int], SubRecord]], int]:
  """The S records M received, as the step's outcomes name them.

  Args:
    arrived: (arrival, record) of every S record the service stored for the step.
    query_ids: the step's queries (q indexes them).
    named: {(q, k, i): digest} of each call M received (`MainOutcomes.sub_call_digests`).

  Returns:
    The (arrival, record) pairs whose key the outcomes name with the record's digest, in
    their order, and how many others there were (calls M never made, or stored content
    other than what M received): S trains on none of those.
  """
  position = {qid: q for q, qid in enumerate(query_ids)}
  kept = []
  for arrival, record in arrived:
    q = position.get(record.query_id)
    key = None if q is None else (q, record.rollout_index, record.call_index)
    if key in named and named[key] == record.digest():
      kept.append((arrival, record))
  return kept, len(arrived) - len(kept)


def index_sub_records(records: Sequence[SubRecord], query_ids: Sequence[str],
                      counts: np.ndarray) -> dict[tuple[int, int, int], SubRecord]:
  """{(q, k, i): record}; every rollout (q, k) must have exactly calls 0..d_k - 1.

  Raises:
    KeyError: naming (query id, k, i) of a missing call, or of a call that the
      outcomes do not account for.
  """
  position = {qid: q for q, qid in enumerate(query_ids)}
  indexed = {}
  for record in records:
    q = position.get(record.query_id)
    k, i = record.rollout_index, record.call_index
    if q is None or not (0 <= k < counts.shape[1] and 0 <= i < counts[q, k]):
      raise KeyError(f"S record (query, k, i) = {record.key} is not among the step's "
                     "delegations (outcomes' d_k)")
    indexed[(q, k, i)] = record
  for q, k in np.ndindex(*counts.shape):
    for i in range(int(counts[q, k])):
      if (q, k, i) not in indexed:
        raise KeyError(f"missing S record for (query, k, i) = ({query_ids[q]!r}, {k}, {i}) "
                       f"with the content M received; the outcomes say rollout {k} made "
                       f"{int(counts[q, k])} calls")
  return indexed


def sub_rewards(records: Mapping[tuple[int, int, int], SubRecord], correct: np.ndarray,
                weights: RewardWeights) -> dict[tuple[int, int, int], float]:
  """R_S of every call; `records` carry `expert`, correct_M comes from `correct` [Q, K]."""
  keys = sorted(records)
  if not keys:
    return {}
  main_correct = np.array([correct[q, k] for q, k, _ in keys], np.float32)
  values = call_rewards([records[key] for key in keys], main_correct, weights)
  return {key: float(value) for key, value in zip(keys, values, strict=True)}


def call_rewards(records: Sequence[SubRecord], main_correct: np.ndarray,
                 weights: RewardWeights) -> np.ndarray:
  """R_S float32 [N] of N scored calls (`expert` filled in), correct_M float [N] of the
  rollout each was made in, through `plugins.sub_rewards`."""
  format_ok = np.array([r.trajectory.format_ok for r in records], bool)
  expert = np.array([r.expert for r in records], np.float32)
  if np.isnan(expert).any():
    raise ValueError("S records must be scored (expert is NaN)")
  return plugins.sub_rewards(format_ok, np.asarray(main_correct, np.float32), expert,
                             weights)


@dataclasses.dataclass(frozen=True)
class SubCredit:
  """S's hierarchical credit of one step in the aligned modes, before packing.

  Attributes:
    index: int32 [Q, K, D]: slot (q, k, j) holds call index[q, k, j] of rollout (q, k).
    valid: bool [Q, K, D], slots holding a call.
    rewards: R_S float32 [Q, K, D] of each slot (0 at empty slots).
    advantages: A_S float32 [Q, K, D] of each slot (0 at empty slots).
    call_rewards: R_S of every call (q, k, i), the dropped ones too.
  """

  index: np.ndarray
  valid: np.ndarray
  rewards: np.ndarray
  advantages: np.ndarray
  call_rewards: dict[tuple[int, int, int], float]


def sub_credit(records: Mapping[tuple[int, int, int], SubRecord], main_reward: np.ndarray,
               correct: np.ndarray, counts: np.ndarray, *, alignment: SlotAlignment,
               credit: CreditConfig) -> SubCredit:
  """The paper's S credit: align calls to D slots, normalize per query (module docstring).

  Args:
    records: scored S calls keyed (q, k, i) (`index_sub_records`).
    main_reward: R_M float [Q, K]; correct: correct_M [Q, K]; counts: d_k int [Q, K].
    alignment: D, the alignment mode and the step's key.
    credit: R_S's weights and the advantages' normalization.
  """
  reward_of = sub_rewards(records, correct, credit.weights)
  index, valid = alignment_lib.align_indices(np.asarray(counts, np.int32), alignment.num_slots,
                                             alignment.key, mode=alignment.mode)
  index, valid = np.asarray(index), np.asarray(valid)
  slot_rewards = np.zeros(index.shape, np.float32)
  for q, k, j in zip(*np.nonzero(valid), strict=True):
    slot_rewards[q, k, j] = reward_of[(int(q), int(k), int(index[q, k, j]))]
  advantage = credit.advantage
  _, sub_adv = advantages_lib.mgrpo_advantages(main_reward, slot_rewards, valid,
                                               std=advantage.std, eps=advantage.eps)
  sub_adv = np.where(valid, np.asarray(sub_adv, np.float32), 0.0)
  return SubCredit(index, valid, slot_rewards, sub_adv, reward_of)


@dataclasses.dataclass(frozen=True)
class SubStep:
  """S's update batch of one step and what to log about it.

  Attributes:
    batch: [N, T] rows: one per slot, N = Q*K*D, in (q, k, j) order (aligned) or
      arrival order (no_alignment); with row buckets, one per distinct call of weight =
      its slots (aligned) or the arrival rows without the empty ones, N the smallest row
      bucket that holds them (`batching.aligned_batch`).
    rewards: R_S float32 [Q*K*D] of each slot (0 at empty slots).
    advantages: A_S float32 [Q*K*D] of each slot.
    valid: bool [Q*K*D], slots holding a call.
    num_calls: S calls made in the step.
    made_rewards: R_S float32 [num_calls] of every call made in the step, trained on
      or not (dropped, beyond the arrival rows, or queued for later steps): what S's
      served policy earned, comparable across modes.
  """

  batch: TrainBatch
  rewards: np.ndarray
  advantages: np.ndarray
  valid: np.ndarray
  num_calls: int
  made_rewards: np.ndarray


def aligned_sub_step(records: Mapping[tuple[int, int, int], SubRecord],
                     main_reward: np.ndarray, correct: np.ndarray, counts: np.ndarray, *,
                     alignment: SlotAlignment, credit: CreditConfig,
                     packing: Packing) -> SubStep:
  """`sub_credit`'s slots packed into S's batch (arguments: `sub_credit`; `packing`'s
  row buckets: `batching.aligned_batch`'s)."""
  slots = sub_credit(records, main_reward, correct, counts, alignment=alignment,
                     credit=credit)
  sequences = {key: token_sequence(r.trajectory) for key, r in records.items()}
  batch = aligned_batch(sequences, slots.index, slots.valid, slots.advantages,
                        buckets=packing.buckets, row_buckets=packing.row_buckets,
                        pad_id=packing.pad_id)
  if alignment.duplicate_weight == "call":
    batch = dataclasses.replace(batch, weights=_one_weight_per_call(
        slots, batch.weights, merged=packing.row_buckets is not None))
  return SubStep(batch, slots.rewards.reshape(-1), slots.advantages.reshape(-1),
                 slots.valid.reshape(-1), len(records),
                 np.array(list(slots.call_rewards.values()), np.float32))


def _one_weight_per_call(slots: SubCredit, weights: np.ndarray, *, merged: bool
                         ) -> np.ndarray:
  """S's row weights [N] with each kept call weighing 1 (`SlotAlignment.duplicate_weight`
  "call"): a `merged` batch's row of weight m (one row per distinct call, in m slots)
  gets 1; a per-slot batch's N = Q*K*D rows get 1/m each."""
  if merged:
    return (weights > 0).astype(np.float32)
  calls = np.where(slots.valid, slots.index, -1)
  per_slot = np.zeros(slots.valid.shape, np.float32)
  for q, k, j in zip(*np.nonzero(slots.valid), strict=True):
    per_slot[q, k, j] = 1.0 / np.count_nonzero(calls[q, k] == calls[q, k, j])
  return per_slot.reshape(-1)


def arrival_sub_step(records_in_arrival_order: Sequence[tuple[tuple[int, int, int], SubRecord]],
                     correct: np.ndarray, *, num_queries: int, group_size: int,
                     credit: CreditConfig, packing: Packing) -> SubStep:
  """`no_alignment`: arrival-order rows, groups of `group_size` = K*D consecutive rows
  (with `packing.row_buckets`, the batch keeps the filled rows only, in a row bucket)."""
  num_rows = num_queries * group_size
  kept = list(records_in_arrival_order)[:num_rows]
  advantage = credit.advantage
  reward_of = sub_rewards(dict(records_in_arrival_order), correct, credit.weights)
  rewards = np.zeros(num_rows, np.float32)
  valid = np.zeros(num_rows, bool)
  for row, (key, _) in enumerate(kept):
    rewards[row], valid[row] = reward_of[key], True
  adv = advantages_lib.group_normalize(rewards.reshape(num_queries, group_size),
                                       valid.reshape(num_queries, group_size),
                                       std=advantage.std, eps=advantage.eps)
  adv = np.where(valid, np.asarray(adv, np.float32).reshape(-1), 0.0)
  sequences = [token_sequence(r.trajectory) for _, r in kept]
  batch = _pack(sequences, adv[:len(kept)], num_rows, packing)
  return SubStep(batch, rewards, adv, valid, len(records_in_arrival_order),
                 np.array(list(reward_of.values()), np.float32))


def queued_sub_step(calls: Sequence[SubRecord], made: Sequence[SubRecord], *, num_rows: int,
                    group_size: int, credit: CreditConfig, packing: Packing) -> SubStep:
  """The unsynchronized arm's batch: the `calls` taken from the front of S's FIFO
  (`sub_queue`, each scored with its own rollout's correct_M), in queue order, in
  N = `num_rows` rows; consecutive groups of G = `group_size` rows are normalized
  together whatever step, query or rollout they came from (the released code's groups).
  `made` are the step's own scored calls, which join the queue after it.

    R_S [N]  = call_rewards(calls)          (0 at empty rows)
    A_S [N]  = group_normalize(R_S.reshape(N / G, G)) over the filled rows of each group
  """
  if num_rows % group_size:
    raise ValueError(f"{num_rows} rows do not split into groups of {group_size}")
  calls = list(calls)[:num_rows]
  weights, advantage = credit.weights, credit.advantage
  rewards = np.zeros(num_rows, np.float32)
  valid = np.zeros(num_rows, bool)
  if calls:
    rewards[:len(calls)] = call_rewards(calls, np.array([r.main_correct for r in calls]),
                                        weights)
    valid[:len(calls)] = True
  adv = advantages_lib.group_normalize(rewards.reshape(-1, group_size),
                                       valid.reshape(-1, group_size),
                                       std=advantage.std, eps=advantage.eps)
  adv = np.where(valid, np.asarray(adv, np.float32).reshape(-1), 0.0)
  batch = _pack([token_sequence(r.trajectory) for r in calls], adv[:len(calls)], num_rows,
                packing)
  made_rewards = (call_rewards(made, np.array([r.main_correct for r in made]), weights)
                  if made else np.zeros(0, np.float32))
  return SubStep(batch, rewards, adv, valid, len(made), made_rewards)


def _pack(sequences: Sequence[TokenSequence], advantages: np.ndarray, num_rows: int,
          packing: Packing) -> TrainBatch:
  """The filled rows of an unaligned step (`advantages` [len(sequences)]) in a batch of
  `num_rows` rows, or with `packing.row_buckets`, of the smallest row bucket that holds
  them."""
  batch_rows = num_rows if packing.row_buckets is None else pick_bucket(
      max(len(sequences), 1), packing.row_buckets, "sub-agent calls")
  return pack_sequences(sequences, advantages, num_rows=batch_rows, buckets=packing.buckets,
                        pad_id=packing.pad_id)


def concat_batches(first: TrainBatch, second: TrainBatch, pad_id: int) -> TrainBatch:
  """Rows of `first` then `second`, right-padded to the longer T (shared_policy)."""
  length = max(first.ids.shape[1], second.ids.shape[1])

  def widen(x: np.ndarray, fill) -> np.ndarray:
    out = np.full((x.shape[0], length), fill, x.dtype)
    out[:, :x.shape[1]] = x
    return out

  return TrainBatch(
      ids=np.concatenate([widen(first.ids, pad_id), widen(second.ids, pad_id)]),
      loss_mask=np.concatenate([widen(first.loss_mask, 0), widen(second.loss_mask, 0)]),
      old_logp=np.concatenate([widen(first.old_logp, 0), widen(second.old_logp, 0)]),
      advantages=np.concatenate([first.advantages, second.advantages]),
      weights=np.concatenate([first.weights, second.weights]))


def sub_step_scalars(sub_step: SubStep) -> dict[str, float]:
  """What to log about S's step: calls, valid slots, R_S and A_S statistics."""
  valid = sub_step.valid
  rewards = sub_step.rewards[valid]
  made = sub_step.made_rewards
  return {"sub/calls": float(sub_step.num_calls), "sub/valid_slots": float(valid.sum()),
          "sub/reward_mean": float(rewards.mean()) if valid.any() else 0.0,
          "sub/reward_made_mean": float(made.mean()) if made.size else 0.0,
          "sub/advantage_abs_mean": float(np.abs(sub_step.advantages).mean()),
          "sub/advantage_std": float(sub_step.advantages[valid].std()) if valid.any()
          else 0.0}
