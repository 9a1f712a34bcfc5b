"""Scores rollout records: r_correct for M, r_expert for S, M's correctness replicated.

  main, sub = score(batch.main, batch.sub, tasks, answer_judge, expert_judge)

- M's `correct` = answer_judge(task, answer) for a rollout that answered, else 0
  (a rollout without a well-formed `<result>` has format 0 and R_M = 0 anyway).
- S's `expert` = expert_judge(task, subtask, S's own result) for a call that reported,
  else 0; `main_correct` = its rollout's `correct` (paper section 3.2: "Main Agent's
  correctness reward, replicated to Sub-Agent").

R_M and R_S are computed from these fields by `plugins.main_rewards` and
`plugins.sub_rewards`, the one path of every reward of a run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from mgrpo_jax.agents.records import MainRecord, SubRecord
from mgrpo_jax.tasks.judges import AnswerJudge, ExpertJudge


def _task_lookup(tasks) -> Mapping:
  return tasks if isinstance(tasks, Mapping) else {t.id: t for t in tasks}


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
  scored_main, correct = [], {}
  for record in main:
    answer = record.trajectory.final
    value = float(answer_judge(by_id[record.query_id], answer)) if answer is not None else 0.0
    correct[record.key] = value
    scored_main.append(dataclasses.replace(record, correct=value))
  scored_sub = []
  for record in sub:
    report = record.trajectory.final
    expert = 0.0
    if expert_judge is not None and report is not None:
      expert = float(expert_judge(by_id[record.query_id], record.subtask, report))
    main_correct = correct.get((record.query_id, record.rollout_index))
    if main_correct is None:
      raise KeyError(f"S record {record.key} has no M rollout in this batch")
    scored_sub.append(dataclasses.replace(record, expert=expert, main_correct=main_correct))
  return scored_main, scored_sub

