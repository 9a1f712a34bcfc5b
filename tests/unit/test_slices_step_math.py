"""The step's pure math: R_M / A_M, S records -> rewards, alignment gather, advantages.

References are straightforward numpy re-implementations of the paper's equations
(population std, advantage 0 where a group's std is 0).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from mgrpo_jax import plugins
from mgrpo_jax.agents.records import END_FORMAT, END_RESULT, MainRecord, SubRecord, Trajectory
from mgrpo_jax.core import alignment
from mgrpo_jax.core.rewards import RewardWeights
from mgrpo_jax.slices import step_math

WEIGHTS = RewardWeights()
ADV = step_math.AdvantageConfig()
CREDIT = step_math.CreditConfig(weights=WEIGHTS, advantage=ADV)
PACKING = step_math.Packing(pad_id=0, buckets=(16,))


def _trajectory(seed: int, ok: bool, length: int = 7) -> Trajectory:
  rng = np.random.default_rng(seed)
  mask = np.zeros(length, bool)
  mask[3:] = True
  logprobs = np.where(mask, -rng.random(length), 0.0).astype(np.float32)
  return Trajectory(ids=rng.integers(0, 50, length).astype(np.int32), loss_mask=mask,
                    logprobs=logprobs, roles=np.zeros(length, np.int32), messages=(),
                    policy_version=0, format_ok=ok, error="", end=END_RESULT if ok else
                    END_FORMAT, num_turns=1, tool_calls=(), final="x" if ok else None,
                    wall_s=0.0)


def _normalize(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
  out = np.zeros_like(x)
  if valid.any():
    mean, std = x[valid].mean(), x[valid].std()
    if std > 0:
      out[valid] = (x[valid] - mean) / std
  return out


def test_main_rewards_and_advantages_match_the_paper():
  format_ok = np.array([[True, True, False, True], [True, False, True, True]])
  correct = np.array([[1, 0, 1, 0], [0, 0, 0, 0]], np.float32)
  r = plugins.main_rewards(format_ok, correct, WEIGHTS)
  expected = np.where(format_ok, 0.1 + 0.9 * correct, 0.0)
  np.testing.assert_allclose(r, expected, atol=1e-7)
  adv = step_math.main_advantages(r, ADV)
  for q in range(2):
    np.testing.assert_allclose(adv[q], _normalize(expected[q], np.ones(4, bool)), atol=1e-6)


def test_main_grid_reads_records_and_rejects_missing_rollouts():
  records = [MainRecord("a", k, "main", _trajectory(k, k % 2 == 0), k, correct=float(k == 0))
             for k in range(2)]
  grid = step_math.main_grid(records, ["a"], 2)
  np.testing.assert_array_equal(grid["num_sub_calls"], [[0, 1]])
  np.testing.assert_array_equal(grid["format_ok"], [[True, False]])
  with pytest.raises(KeyError, match=r"\('a', 2\)"):
    step_math.main_grid(records, ["a"], 3)


def _sub_records(counts: np.ndarray, query_ids):
  records = []
  for q, k in np.ndindex(*counts.shape):
    for i in range(counts[q, k]):
      seed = 100 * q + 10 * k + i
      records.append(SubRecord(query_ids[q], k, i, "t", "", "r", _trajectory(seed, seed % 3 != 0),
                               expert=(seed % 5) / 4.0))
  return records


def test_index_sub_records_names_a_missing_call():
  counts = np.array([[2, 0, 1]])
  records = _sub_records(counts, ["q0"])
  indexed = step_math.index_sub_records(records, ["q0"], counts)
  assert sorted(indexed) == [(0, 0, 0), (0, 0, 1), (0, 2, 0)]
  with pytest.raises(KeyError, match=r"\('q0', 0, 1\)"):
    step_math.index_sub_records(records[:1] + records[2:], ["q0"], counts)
  with pytest.raises(KeyError, match="not among"):
    step_math.index_sub_records(records, ["q0"], np.array([[1, 0, 1]]))


def test_received_calls_keeps_what_the_outcomes_name_with_their_digest():
  counts = np.array([[2, 0, 1]])
  records = _sub_records(counts, ["q0"])
  named = {(0, 0, 0): records[0].digest(), (0, 0, 1): records[1].digest(),
           (0, 2, 0): records[2].digest()}
  never_made = SubRecord("q0", 1, 3, "sub-task", "", "report", _trajectory(9, True))
  other_query = SubRecord("q9", 0, 0, "sub-task", "", "report", _trajectory(9, True))
  changed = SubRecord(*[getattr(records[1], f) for f in ("query_id", "rollout_index",
                                                        "call_index", "subtask", "context")],
                      "another report", records[1].trajectory)
  arrived = [((0, i), r) for i, r in enumerate([records[0], never_made, records[2],
                                                 other_query])]
  kept, ignored = step_math.received_calls(arrived, ["q0"], named)
  assert [r.key for _, r in kept] == [records[0].key, records[2].key]
  assert [a for a, _ in kept] == [(0, 0), (0, 2)] and ignored == 2
  kept, ignored = step_math.received_calls([((0, 0), changed)], ["q0"], named)
  assert (kept, ignored) == ([], 1)  # content other than what M received
  with pytest.raises(KeyError, match=r"\('q0', 0, 1\) with the content M received"):
    step_math.index_sub_records([r for _, r in step_math.received_calls(
        [((0, 0), records[0]), ((0, 1), changed), ((0, 2), records[2])], ["q0"], named)[0]],
        ["q0"], counts)


@pytest.mark.parametrize("mode", ["duplicate_drop", "mask"])
def test_aligned_sub_step_gathers_and_normalizes_per_query(mode):
  counts = np.array([[3, 0, 1], [1, 2, 5]])
  ids = ["q0", "q1"]
  indexed = step_math.index_sub_records(_sub_records(counts, ids), ids, counts)
  correct = np.array([[1, 0, 0], [0, 1, 1]], np.float32)
  main_reward = np.where(correct > 0, 1.0, 0.1).astype(np.float32)
  key = jax.random.key(7)
  d = 4
  aligned = step_math.SlotAlignment(num_slots=d, mode=mode, key=key)
  out = step_math.aligned_sub_step(indexed, main_reward, correct, counts, alignment=aligned,
                                   credit=CREDIT, packing=PACKING)
  index, valid = (np.asarray(x) for x in alignment.align_indices(counts, d, key, mode=mode))
  reference = np.zeros(index.shape, np.float32)
  for q, k, j in zip(*np.nonzero(valid), strict=True):
    r = indexed[(q, k, index[q, k, j])]
    ok = r.trajectory.format_ok
    reference[q, k, j] = ok * (0.1 + 0.4 * correct[q, k] + 0.5 * r.expert)
  np.testing.assert_allclose(out.rewards, reference.reshape(-1), atol=1e-6)
  expected_adv = np.stack([_normalize(reference[q].reshape(-1), valid[q].reshape(-1))
                           for q in range(2)])
  np.testing.assert_allclose(out.advantages, expected_adv.reshape(-1), atol=1e-5)
  np.testing.assert_array_equal(out.valid, valid.reshape(-1))
  assert out.batch.ids.shape == (2 * 3 * d, 16)
  for q, k, j in np.ndindex(*index.shape):
    row = (q * 3 + k) * d + j
    if valid[q, k, j]:
      t = indexed[(q, k, index[q, k, j])].trajectory
      np.testing.assert_array_equal(out.batch.ids[row, :len(t.ids)], t.ids)
      np.testing.assert_array_equal(out.batch.old_logp[row, :len(t.ids)], t.logprobs)
      assert out.batch.weights[row] == 1.0
    else:
      assert out.batch.weights[row] == 0.0 and out.batch.loss_mask[row].sum() == 0
  # With row buckets: one row per distinct call, weighted by its slots, same advantages.
  merged = step_math.aligned_sub_step(
      indexed, main_reward, correct, counts, alignment=aligned, credit=CREDIT,
      packing=step_math.Packing(pad_id=0, buckets=(16,), row_buckets=(6, 12, 24)))
  np.testing.assert_array_equal(merged.advantages, out.advantages)
  slots_of = {}
  for q, k, j in zip(*np.nonzero(valid), strict=True):
    slots_of.setdefault((q, k, index[q, k, j]), []).append((q * 3 + k) * d + j)
  assert merged.batch.shape == (6 if len(slots_of) <= 6 else 12, 16)
  for row, slot_rows in enumerate(slots_of.values()):
    np.testing.assert_array_equal(merged.batch.ids[row], out.batch.ids[slot_rows[0]])
    assert merged.batch.weights[row] == len(slot_rows)
    assert merged.batch.advantages[row] == out.batch.advantages[slot_rows[0]]
  assert not merged.batch.weights[len(slots_of):].any()


def test_call_weighting_gives_each_kept_call_one_unit_of_loss_and_keeps_the_advantages():
  """`mgrpo.duplicate_weight = call`: the slots' advantages (duplicates in mu and sigma) are
  the paper's, but a call in m slots weighs 1 in S's loss (1/m per slot row, 1 per merged
  row): the per-slot batch's loss is then the loss of the distinct calls, each once."""
  counts = np.array([[3, 0, 1], [1, 2, 5]])
  ids = ["q0", "q1"]
  indexed = step_math.index_sub_records(_sub_records(counts, ids), ids, counts)
  correct = np.array([[1, 0, 0], [0, 1, 1]], np.float32)
  main_reward = np.where(correct > 0, 1.0, 0.1).astype(np.float32)
  paper = step_math.SlotAlignment(num_slots=4, mode="duplicate_drop", key=jax.random.key(7))
  per_call = dataclasses.replace(paper, duplicate_weight="call")
  merged_packing = step_math.Packing(pad_id=0, buckets=(16,), row_buckets=(6, 12, 24))
  out = {}
  for name, aligned in (("slots", paper), ("call", per_call)):
    for packing in (PACKING, merged_packing):
      out[name, packing.row_buckets is not None] = step_math.aligned_sub_step(
          indexed, main_reward, correct, counts, alignment=aligned, credit=CREDIT,
          packing=packing)
  np.testing.assert_array_equal(out["call", False].advantages, out["slots", False].advantages)
  index, valid = (np.asarray(x) for x in alignment.align_indices(counts, 4, jax.random.key(7)))
  rows_of = {}
  for q, k, j in zip(*np.nonzero(valid), strict=True):
    rows_of.setdefault((q, k, index[q, k, j]), []).append((q * 3 + k) * 4 + j)
  weights = out["call", False].batch.weights
  for rows in rows_of.values():
    np.testing.assert_allclose(weights[rows], 1.0 / len(rows))
  assert weights.sum() == pytest.approx(len(rows_of))
  assert out["slots", False].batch.weights.sum() == valid.sum() > len(rows_of)
  merged = out["call", True].batch
  np.testing.assert_array_equal(merged.ids, out["slots", True].batch.ids)
  assert merged.weights.tolist() == [1.0] * len(rows_of) + [0.0] * (
      merged.weights.size - len(rows_of))


def test_arrival_grouping_is_fifo_in_groups_of_k_times_d():
  counts = np.array([[3, 2], [1, 0]])
  ids = ["q0", "q1"]
  indexed = step_math.index_sub_records(_sub_records(counts, ids), ids, counts)
  # Arrival order: by call index first (one delegation batch per M round).
  order = sorted(indexed, key=lambda key: (key[2], key[0], key[1]))
  correct = np.array([[1, 0], [0, 0]], np.float32)
  out = step_math.arrival_sub_step([(k, indexed[k]) for k in order], correct, num_queries=2,
                                   group_size=2, credit=CREDIT, packing=PACKING)
  kept = order[:4]  # N = Q * G = 4 rows; the other 2 calls are dropped
  reference = np.array([indexed[k].trajectory.format_ok * (
      0.1 + 0.4 * correct[k[0], k[1]] + 0.5 * indexed[k].expert) for k in kept], np.float32)
  np.testing.assert_allclose(out.rewards, reference, atol=1e-6)
  groups = [_normalize(reference[g:g + 2], np.ones(2, bool)) for g in (0, 2)]
  np.testing.assert_allclose(out.advantages, np.concatenate(groups), atol=1e-5)
  assert out.num_calls == 6 and out.valid.all()
  # What S earned counts every call made, the 2 beyond the rows too.
  made = [indexed[k].trajectory.format_ok * (0.1 + 0.4 * correct[k[0], k[1]]
                                             + 0.5 * indexed[k].expert) for k in order]
  np.testing.assert_allclose(sorted(out.made_rewards), sorted(made), atol=1e-6)
  assert step_math.sub_step_scalars(out)["sub/reward_made_mean"] == pytest.approx(
      np.mean(made), abs=1e-6)


def test_arrival_rows_without_the_empty_ones_fill_a_row_bucket():
  counts = np.array([[1, 0], [2, 0]])
  ids = ["q0", "q1"]
  indexed = step_math.index_sub_records(_sub_records(counts, ids), ids, counts)
  order = sorted(indexed, key=lambda key: (key[2], key[0], key[1]))
  correct = np.array([[1, 0], [0, 0]], np.float32)
  full, compact = (step_math.arrival_sub_step(
      [(k, indexed[k]) for k in order], correct, num_queries=2, group_size=4, credit=CREDIT,
      packing=step_math.Packing(pad_id=0, buckets=(16,), row_buckets=buckets))
      for buckets in (None, (2, 4, 6, 8)))
  assert full.batch.shape == (8, 16) and compact.batch.shape == (4, 16)  # 3 calls
  for name in ("ids", "loss_mask", "old_logp", "advantages", "weights"):
    np.testing.assert_array_equal(getattr(compact.batch, name), getattr(full.batch, name)[:4])
  np.testing.assert_array_equal(compact.advantages, full.advantages)


def _scored(seed: int, ok: bool, expert: float, main_correct: float) -> SubRecord:
  return SubRecord(f"q{seed}", 0, seed, "E017 boss", "", "boss E044", _trajectory(seed, ok),
                   expert=expert, main_correct=main_correct)


def test_queued_step_normalizes_consecutive_groups_of_calls_from_any_step():
  calls = [_scored(i, ok, expert, correct) for i, (ok, expert, correct) in enumerate(
      [(True, 1.0, 1.0), (True, 0.5, 0.0), (False, 1.0, 1.0), (True, 0.0, 0.0),
       (True, 1.0, 0.0)])]
  made = [_scored(9, True, 0.5, 1.0)]
  out = step_math.queued_sub_step(calls, made, num_rows=6, group_size=2, credit=CREDIT,
                                  packing=PACKING)
  # R_S = format * (0.1 + 0.4 correct_M + 0.5 r_expert) of each call's own rollout.
  reference = np.array([c.trajectory.format_ok * (0.1 + 0.4 * c.main_correct
                                                  + 0.5 * c.expert) for c in calls])
  np.testing.assert_allclose(out.rewards[:5], reference, atol=1e-6)
  assert out.rewards[5] == 0 and out.valid.tolist() == [True] * 5 + [False]
  valid = np.arange(6) < 5
  groups = [_normalize(np.append(reference, 0.0)[g:g + 2], valid[g:g + 2]) for g in (0, 2, 4)]
  np.testing.assert_allclose(out.advantages, np.concatenate(groups), atol=1e-5)
  assert out.batch.shape == (6, 16) and out.num_calls == 1  # the step's own calls
  np.testing.assert_allclose(out.made_rewards, [0.1 + 0.4 + 0.25], atol=1e-6)
  np.testing.assert_array_equal(out.batch.ids[1, :7], calls[1].trajectory.ids)


def test_queued_step_of_an_empty_queue_has_no_loss_token_and_rejects_ragged_groups():
  out = step_math.queued_sub_step([], [], num_rows=4, group_size=2, credit=CREDIT,
                                  packing=PACKING)
  assert not out.valid.any() and not out.batch.loss_mask.any() and out.num_calls == 0
  assert step_math.sub_step_scalars(out)["sub/reward_made_mean"] == 0.0
  with pytest.raises(ValueError, match="groups of 3"):
    step_math.queued_sub_step([], [], num_rows=4, group_size=3, credit=CREDIT,
                              packing=PACKING)


def test_call_rewards_take_the_configs_preset_and_weights():
  calls = [_scored(i, ok, expert, correct) for i, (ok, expert, correct) in enumerate(
      [(True, 1.0, 1.0), (True, 0.5, 0.0), (False, 1.0, 1.0)])]
  main_correct = np.array([c.main_correct for c in calls])
  paper = RewardWeights(b1=0.2, b2=0.3, b3=0.4)
  np.testing.assert_allclose(step_math.call_rewards(calls, main_correct, paper),
                             [0.2 + 0.3 + 0.4, 0.2 + 0.4 * 0.5, 0.0], atol=1e-6)
  released = RewardWeights(b1=0.1, b2=0.9, b3=0.0, sub_reward="released")
  np.testing.assert_allclose(step_math.call_rewards(calls, main_correct, released),
                             [1.0, 0.1, 0.0], atol=1e-6)
