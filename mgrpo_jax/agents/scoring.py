"""Scores rollout records: r_correct for M, r_expert for S, M's correctness replicated.

  main, sub = score(batch.main, batch.sub, tasks, answer_judge, expert_judge)

- M's `correct` = answer_judge(task, answer) for a rollout that answered, else 0
  (a rollout without a well-formed `<result>` has format 0 and R_M = 0 anyway).
- S's `expert` = expert_judge(task, subtask, S's own result) for a call that reported,
  else 0; `main_correct` = its rollout's `correct` (paper section 3.2: "Main Agent's
  correctness reward, replicated to Sub-Agent").

Each judge is asked once for the whole batch (`tasks.judges.answer_scores`,
`expert_scores`: its `batch` method when it has one, e.g. a model judge, else one call
per record); an expert judge's batch also gets the evidence S read, its tool
observations (`evidence`).

R_M and R_S are computed from these fields by `plugins.main_rewards` and
`plugins.sub_rewards`, the one path of every reward of a run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from mgrpo_jax.agents import protocol
from mgrpo_jax.agents.episode import OBSERVATION_ROLE
from mgrpo_jax.agents.records import MainRecord, SubRecord, Trajectory
from mgrpo_jax.tasks.judges import (
  AnswerItem,
  AnswerJudge,
  ExpertJudge,
  ReportItem,
  answer_scores,
  expert_scores,
)


def _task_lookup(tasks) -> Mapping:
  return tasks if isinstance(tasks, Mapping) else {t.id: t for t in tasks}


def evidence(trajectory: Trajectory) -> str:
  """What an agent read: the outputs of its tool calls (its `<tool_response>`
  observations, unwrapped), in order, one blank line apart."""
  opening, closing = protocol.RESPONSE_OPEN, protocol.RESPONSE_CLOSE
  return "\n\n".join(
      text[len(opening):len(text) - len(closing)] for role, text in trajectory.messages
      if role == OBSERVATION_ROLE and text.startswith(opening) and text.endswith(closing))


def score(main: Sequence[MainRecord], sub: Sequence[SubRecord], tasks,
          answer_judge: AnswerJudge, expert_judge: ExpertJudge | None = None
          ) -> tuple[list[MainRecord], list[SubRecord]]:
  """Records with `correct`, `expert` and `main_correct` filled in (see the docstring).

  Args:
    main: M's records. sub: S's records of the same batch.
    tasks: the batch's tasks (sequence with `.id`, or a mapping id -> task).
    answer_judge: `judge(task, answer) -> 0/1`.
    expert_judge: `judge(task, subtask, report) -> [0, 1]`; None leaves `expert` at 0.
  """
  by_id = _task_lookup(tasks)
  missing = sorted({r.query_id for r in main} - set(by_id))
  if missing:
    raise KeyError(f"no task for query ids {missing[:5]}")
  answered = [r for r in main if r.trajectory.final is not None]
  values = dict(zip((r.key for r in answered), answer_scores(
      answer_judge, [AnswerItem(by_id[r.query_id], r.trajectory.final) for r in answered]),
      strict=True))
  scored_main = [dataclasses.replace(r, correct=values.get(r.key, 0.0)) for r in main]
  correct = {r.key: r.correct for r in scored_main}
  return scored_main, score_sub(sub, by_id, correct, expert_judge)


def score_sub(sub: Sequence[SubRecord], tasks, correct: Mapping[tuple[str, int], float],
              expert_judge: ExpertJudge | None) -> list[SubRecord]:
  """S's records with `expert` (one batch for the judge) and `main_correct` filled in.

  Args:
    tasks: as `score`'s.
    correct: r_correct of M's rollouts by (query id, k), e.g. of scored M records.
    expert_judge: as `score`'s.

  Raises:
    KeyError: an S record's rollout is not in `correct`.
  """
  by_id = _task_lookup(tasks)
  for record in sub:
    if (record.query_id, record.rollout_index) not in correct:
      raise KeyError(f"S record {record.key} has no M rollout in this batch")
  reported = ([r for r in sub if r.trajectory.final is not None]
              if expert_judge is not None else [])
  experts = dict(zip((r.key for r in reported), expert_scores(expert_judge, [
      ReportItem(by_id[r.query_id], r.subtask, r.trajectory.final, evidence(r.trajectory))
      for r in reported]), strict=True))
  return [dataclasses.replace(r, expert=experts.get(r.key, 0.0),
                              main_correct=float(correct[(r.query_id, r.rollout_index)]))
          for r in sub]
