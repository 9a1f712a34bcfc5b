"""An evaluation's scored records as the trajectory page's data (`metrics.trajectory_page`).

`page_questions` groups M's records by question (in evaluation order, the first
`limit`), turns each trajectory's decoded messages into page messages and nests S's
call `i` of a rollout under M's `i`-th delegation: the controller numbers a rollout's
sub-calls in the order M delegated, and a delegation refused by the sub-call limit
(always after the accepted ones) has no S record. R_M comes from the records' format
and correctness with the run's weights `rewards.a1`, `rewards.a2`; an evaluation judges
no S execution (r_expert), so its S calls carry no R_S.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mgrpo_jax.agents import specs
from mgrpo_jax.agents.records import MainRecord, SubRecord, Trajectory
from mgrpo_jax.core import rewards as rewards_lib
from mgrpo_jax.metrics import trajectory_page as page


def _messages(trajectory: Trajectory, sub_calls: Sequence[page.SubCall] = ()
              ) -> tuple[page.Message, ...]:
  """Page messages of a trajectory; S's calls go to M's delegating turns, in order."""
  calls = {c.turn: c for c in trajectory.tool_calls}
  pending = list(sub_calls)
  out, turn, seen_task = [], 0, False
  for role, text in trajectory.messages:
    if role != "assistant":
      name = role if role == "system" else "observation" if seen_task else "task"
      seen_task = seen_task or role == "user"
      out.append(page.Message(name, text))
      continue
    call = calls.get(turn)
    turn += 1
    if call is None:
      out.append(page.Message("assistant", text))
      continue
    sub = pending.pop(0) if call.name == specs.DELEGATE and pending else None
    out.append(page.Message("assistant", text, tool=f"{call.name} {call.arguments}",
                            tool_ok=call.ok, sub_call=sub))
  return tuple(out)


def _sub_call(record: SubRecord) -> page.SubCall:
  trajectory = record.trajectory
  return page.SubCall(record.call_index, record.subtask, _messages(trajectory),
                      trajectory.final, trajectory.format_ok)


def page_questions(main: Sequence[MainRecord], sub: Sequence[SubRecord],
                   questions: Mapping[str, Any], *, limit: int, a1: float = 0.1,
                   a2: float = 0.9) -> list[page.Question]:
  """The first `limit` questions of scored records as page data (module docstring).

  `questions` maps a query id to its question (`text`, `answer`, `type`).
  """
  by_question: dict[str, list[MainRecord]] = {}
  for record in main:
    if record.query_id in by_question or len(by_question) < limit:
      by_question.setdefault(record.query_id, []).append(record)
  shown = [r for records in by_question.values() for r in records]
  if not shown:
    return []
  r_main = np.asarray(rewards_lib.main_reward(
      np.array([r.trajectory.format_ok for r in shown], bool),
      np.array([r.correct for r in shown], np.float32), a1=a1, a2=a2))
  reward = {r.key: float(v) for r, v in zip(shown, r_main, strict=True)}
  calls: dict[tuple[str, int], list[SubRecord]] = {}
  for record in sorted(sub, key=lambda r: r.call_index):
    calls.setdefault((record.query_id, record.rollout_index), []).append(record)
  out = []
  for qid, records in by_question.items():
    rollouts = tuple(
        page.Rollout(r.rollout_index,
                     _messages(r.trajectory, [_sub_call(s) for s in calls.get(r.key, [])]),
                     r.trajectory.final, bool(r.correct == 1.0), r.trajectory.format_ok,
                     r.trajectory.end, reward[r.key])
        for r in sorted(records, key=lambda r: r.rollout_index))
    question = questions[qid]
    out.append(page.Question(qid, question.text, question.answer, question.type, rollouts))
  return out
