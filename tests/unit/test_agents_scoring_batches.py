"""`agents.scoring.score` asks a judge with a `batch` method once per batch of records,
with the same results as per-item calls, and gives the expert judge the evidence S read."""

from __future__ import annotations

import dataclasses
import math
import types

import pytest

from mgrpo_jax.agents import protocol
from mgrpo_jax.agents.records import SubRecord
from mgrpo_jax.agents.scoring import evidence, score, score_sub
from mgrpo_jax.config import base_config
from mgrpo_jax.tasks.judge_cache import JudgeCache
from mgrpo_jax.tasks.judges import AnswerItem, ExactMatchJudge
from mgrpo_jax.tasks.model_judge import (
  ANSWER_FIELDS,
  ANSWER_VERDICTS,
  EXPERT_FIELDS,
  EXPERT_VERDICTS,
  NO_EVIDENCE,
  PROMPTS,
  JudgePrompt,
  ModelAnswerJudge,
  ModelExpertJudge,
  ModelJudge,
)
from mgrpo_jax.training.judge_model import JudgeSettings, SamplerJudgeModel
from tests.support.page_records import delegating_record, sub_record, trajectory

QUESTIONS = {q: types.SimpleNamespace(id=q, text=f"text {q}", answer="gold")
             for q in ("q0", "q1")}
COUNTS = {("q0", 0): 2, ("q0", 1): 0, ("q1", 0): 1, ("q1", 1): 3}
ANSWERS = {("q0", 0): "gold", ("q0", 1): "no", ("q1", 0): "The Gold.", ("q1", 1): "gold"}


def _expert(task, subtask, report) -> float:
  """r_expert of a report: 1 for S's first call's, 0.5 for the others'."""
  return 1.0 if report == "s0" else 0.5


class Recording:
  """A user's judge with a `batch` method: scores as `inner`, keeps each batch."""

  def __init__(self, inner):
    self.inner = inner
    self.batches = []

  def __call__(self, *args) -> float:
    return self.inner(*args)

  def batch(self, items) -> list[float]:
    self.batches.append(list(items))
    return [self.inner(*((i.task, i.prediction) if isinstance(i, AnswerItem)
                         else (i.task, i.subtask, i.report))) for i in items]


def _records(unanswered=()):
  main = [delegating_record(qid, k, n, ANSWERS[(qid, k)], math.nan)
          for (qid, k), n in COUNTS.items()]
  main = [dataclasses.replace(r, trajectory=dataclasses.replace(r.trajectory, final=None))
          if r.key in unanswered else r for r in main]
  sub = [sub_record(qid, k, i) for (qid, k), n in COUNTS.items() for i in range(n)]
  return main, sub


def _fields(records):
  return [(r.key, r.correct) if hasattr(r, "correct") else (r.key, r.expert, r.main_correct)
          for r in records]


def test_a_batched_judge_is_asked_once_and_scores_as_per_item_calls():
  main, sub = _records(unanswered={("q1", 1)})
  answer, expert = Recording(ExactMatchJudge()), Recording(_expert)
  batched = score(main, sub, QUESTIONS, answer, expert)
  per_item = score(main, sub, QUESTIONS, ExactMatchJudge().__call__, _expert)
  assert _fields(batched[0]) == _fields(per_item[0])
  assert _fields(batched[1]) == _fields(per_item[1])
  assert [r.correct for r in batched[0]] == [1.0, 0.0, 1.0, 0.0]
  assert [(r.expert, r.main_correct) for r in batched[1]] == [
      (1.0, 1.0), (0.5, 1.0), (1.0, 1.0), (1.0, 0.0), (0.5, 0.0), (0.5, 0.0)]
  assert len(answer.batches) == 1 and len(expert.batches) == 1
  assert [i.prediction for i in answer.batches[0]] == ["gold", "no", "The Gold."]
  assert len(expert.batches[0]) == len(sub)
  assert score([], [], QUESTIONS, answer, expert) == ([], []) and len(answer.batches) == 1


def test_a_batch_of_the_wrong_length_is_an_error_naming_the_judge():
  main, sub = _records()
  short = Recording(ExactMatchJudge())
  short.batch = lambda items: [1.0]
  with pytest.raises(ValueError, match="Recording.batch returned 1 scores for 4 items"):
    score(main, sub, QUESTIONS, short)


def test_model_judges_score_a_batch_as_their_per_item_calls(tmp_path):
  cache = JudgeCache(tmp_path)
  model = SamplerJudgeModel(JudgeSettings.from_config(base_config().rewards))
  answer = ModelJudge(model, JudgePrompt.load(PROMPTS / "answer.txt", ANSWER_FIELDS), cache,
                      ANSWER_VERDICTS, verdict_format="final_line", failure_score=0.0)
  expert = ModelJudge(model, JudgePrompt.load(PROMPTS / "expert.txt", EXPERT_FIELDS), cache,
                      EXPERT_VERDICTS, verdict_format="final_line", failure_score=0.0)
  task = QUESTIONS["q0"]
  for candidate, reply in (("gold", "VERDICT: correct"), ("no", "VERDICT: incorrect"),
                           ("The Gold.", "VERDICT: correct")):
    for qid in QUESTIONS:
      fields = {"question": QUESTIONS[qid].text, "gold_answer": task.answer,
                "candidate": candidate}
      answer.cache.put(answer.key(fields), "", reply)
  for i, reply in enumerate(("VERDICT: 1", "VERDICT: 0.5", "no verdict")):
    for qid in QUESTIONS:
      fields = {"question": QUESTIONS[qid].text, "subtask": f"subtask {i}",
                "report": f"s{i}", "evidence": NO_EVIDENCE}
      expert.cache.put(expert.key(fields), "", reply)
  main, sub = _records()
  judges = ModelAnswerJudge(answer), ModelExpertJudge(expert, evidence_chars=100)
  batched = score(main, sub, QUESTIONS, *judges)
  per_item = score(main, sub, QUESTIONS, judges[0].__call__, judges[1].__call__)
  assert _fields(batched[0]) == _fields(per_item[0])
  assert _fields(batched[1]) == _fields(per_item[1])
  assert [r.expert for r in batched[1]] == [1.0, 0.5, 1.0, 1.0, 0.5, 0.0]
  assert expert.counters.failures == 2 and model.completions == 0


def test_the_expert_judge_gets_the_tool_outputs_s_read():
  observation = protocol.render_observation("Velora Trust was founded by Amon Kesh.")
  read = trajectory([("search", "search", observation), ("visit", "visit",
                                                         protocol.render_observation("p2")),
                     ("<result>Amon Kesh</result>", None, "")], "Amon Kesh")
  assert evidence(read) == "Velora Trust was founded by Amon Kesh.\n\np2"
  record = SubRecord("q0", 0, 0, "founder", "", "Amon Kesh", read)
  judge = Recording(_expert)
  scored = score_sub([record], QUESTIONS, {("q0", 0): 1.0}, judge)
  assert judge.batches[0][0].evidence == evidence(read) and scored[0].main_correct == 1.0
  with pytest.raises(KeyError, match="has no M rollout"):
    score_sub([record], QUESTIONS, {("q1", 0): 1.0}, judge)
