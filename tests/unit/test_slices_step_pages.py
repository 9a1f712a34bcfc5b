"""A training step's trajectory page: R_M and A_M per rollout, R_S, A_S and the D-slot
alignment per S call, equal to what the step's own math computes (`step_math`)."""

from __future__ import annotations

import re
import types

import numpy as np
import pytest

from mgrpo_jax.agents.scoring import score
from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.core.rewards import RewardWeights
from mgrpo_jax.slices import step_math, step_pages
from mgrpo_jax.tasks.judges import ExactMatchJudge
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.paths import RunPaths
from tests.support.page_records import delegating_record, sub_record

QUERY_IDS = ["q0", "q1"]
# d_k per rollout [Q, K]: no call, one, duplicated into 3 slots, and 4 > D = 3 (a drop).
COUNTS = np.array([[1, 2, 0], [4, 1, 3]])
CORRECT = np.array([[1, 0, 0], [1, 1, 0]], np.float32)
QUESTIONS = {q: types.SimpleNamespace(id=q, text=f"text {q}", answer="gold", type="lookup")
             for q in QUERY_IDS}
CREDIT = step_math.CreditConfig(weights=RewardWeights(), advantage=step_math.AdvantageConfig())


def _judge(question, subtask, report) -> float:
  """r_expert: S's report of call 0 is right."""
  return float(report == "s0")


def _step(mode: str, served: bool = True):
  config = base_config()
  apply_overrides(config, {"experiment.mode": mode, "mgrpo.aligned_sub_calls": 3,
                           "logging.trajectory_questions": 2})
  main = [delegating_record(qid, k, int(COUNTS[q, k]),
                            "gold" if CORRECT[q, k] else "no", float(CORRECT[q, k]))
          for q, qid in enumerate(QUERY_IDS) for k in range(COUNTS.shape[1])]
  sub = [sub_record(qid, k, i) for q, qid in enumerate(QUERY_IDS)
         for k in range(COUNTS.shape[1]) for i in range(COUNTS[q, k])] if served else []
  assert step_math.CreditConfig.from_config(config) == CREDIT  # the page's credit
  return config, main, sub, step_math.MainStep.score(main, QUERY_IDS, COUNTS.shape[1], CREDIT)


def _credit(mode: str, served: bool = True):
  config, main, sub, outcome = _step(mode, served)
  if sub:
    _, sub = score(main, sub, QUESTIONS, ExactMatchJudge(), _judge)
  return (step_pages.step_credit(config, parse_mode(mode), 5, outcome, sub),
          (config, sub, outcome.grid, outcome.reward))


def test_slot_alignment_names_kept_duplicated_and_dropped_calls():
  index, valid = np.array([0, 1, 0]), np.array([True, True, True])
  assert step_pages.slot_alignment(index, valid, 0) == "slots 0, 2 (duplicated)"
  assert step_pages.slot_alignment(index, valid, 1) == "slot 1"
  assert step_pages.slot_alignment(np.array([0, 2, 3]), valid, 1).startswith("dropped")
  assert step_pages.slot_alignment(np.array([0, 0, 0]), np.array([True, False, False]),
                                   0) == "slot 0"


def test_credit_is_the_sub_slices_alignment_and_advantages():
  (credit, note), (config, sub, grid, reward) = _credit("mgrpo")
  assert note == ""
  indexed = step_math.index_sub_records(sub, QUERY_IDS, COUNTS)
  alignment = step_math.SlotAlignment(
      num_slots=3, mode="duplicate_drop",
      key=agent_setup.step_key(int(config.experiment.seed), "align", 5))
  reference = step_math.aligned_sub_step(
      indexed, reward, grid["correct"], COUNTS, alignment=alignment, credit=CREDIT,
      packing=step_math.Packing(pad_id=0, buckets=(16,)))
  aligned = step_math.sub_credit(indexed, reward, grid["correct"], COUNTS, alignment=alignment,
                                 credit=CREDIT)
  slot_adv = reference.advantages.reshape(2, 3, 3)
  assert len(credit.sub) == COUNTS.sum()
  for q, k in np.ndindex(*COUNTS.shape):
    mentioned = []
    for i in range(COUNTS[q, k]):
      r_s, a_s, where = credit.sub[(QUERY_IDS[q], k, i)]
      slots = [int(j) for j in re.findall(r"\d+", where.split("(")[0])]
      assert r_s == pytest.approx(aligned.call_rewards[(q, k, i)])
      if where.startswith("dropped"):
        assert COUNTS[q, k] > 3 and a_s is None
        continue
      assert all(aligned.index[q, k, j] == i and aligned.valid[q, k, j] for j in slots)
      assert ("duplicated" in where) == (len(slots) > 1)
      assert a_s == pytest.approx(slot_adv[q, k, slots[0]])
      assert all(slot_adv[q, k, j] == pytest.approx(a_s) for j in slots)
      mentioned += slots
    assert sorted(mentioned) == [int(j) for j in np.nonzero(aligned.valid[q, k])[0]]
  for q, k in np.ndindex(*COUNTS.shape):
    r_m, a_m = credit.main[(QUERY_IDS[q], k)]
    assert r_m == pytest.approx(reward[q, k])
    assert a_m == pytest.approx(step_math.main_advantages(reward, CREDIT.advantage)[q, k])


@pytest.mark.parametrize("mode, says", [("frozen_sub", "frozen"),
                                        ("no_alignment", "arrival order")])
def test_modes_without_an_advantage_for_s_say_so(mode, says):
  (credit, note), _ = _credit(mode)
  assert says in note
  assert len(credit.sub) == COUNTS.sum()
  assert all(a_s is None for _, a_s, _ in credit.sub.values())


def test_a_restarted_step_without_s_records_shows_m_only():
  (credit, note), _ = _credit("mgrpo", served=False)
  assert credit.sub == {} and "write-ahead cache" in note
  assert len(credit.main) == COUNTS.size


def test_the_page_shows_every_rollout_with_its_credit(tmp_path):
  config, main, sub, outcome = _step("mgrpo")
  paths = RunPaths.from_config(config, str(tmp_path))
  step_pages.write_step_page(config, paths, parse_mode("mgrpo"), 5, outcome, main, sub,
                             step_math.Scoring(QUESTIONS, _judge))
  assert [p.name for p in (tmp_path / "report").iterdir()] == ["rl_step_00005.html"]
  html = (tmp_path / "report" / "rl_step_00005.html").read_text()
  assert html.count('<article class="rollout') == COUNTS.size
  assert html.count('data-call="') == COUNTS.sum()
  assert html.count('<span class="advantage">A_M ') == COUNTS.size
  assert html.count('<span class="reward">R_S ') == COUNTS.sum()
  alignments = re.findall(r'<span class="alignment">([^<]*)</span>', html)
  assert len(alignments) == COUNTS.sum()
  assert all(re.fullmatch(r"slot \d|slots \d(, \d)+ \(duplicated\)|dropped \(.*\)", a)
             for a in alignments), alignments
  assert any("duplicated" in a for a in alignments)
  assert any(a.startswith("dropped") for a in alignments)
  assert "RL step 5" in html and 'class="legend"' in html


def test_page_due_every_n_steps_from_zero():
  config = base_config()
  apply_overrides(config, {"logging.trajectory_every": 3})
  assert [t for t in range(8) if step_pages.page_due(config, t)] == [0, 3, 6]
  apply_overrides(config, {"logging.trajectory_every": 0})
  assert not any(step_pages.page_due(config, t) for t in range(8))
