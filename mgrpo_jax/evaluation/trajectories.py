"""Scored records as the trajectory page's data (`metrics.trajectory_page`).

`page_questions` groups M's records by question (in their order, the first `limit`),
turns each trajectory's decoded messages into page messages and nests S's call `i` of a
rollout under M's `i`-th delegation: the controller numbers a rollout's sub-calls in the
order M delegated, and a delegation refused by the sub-call limit (always after the
accepted ones) has no S record. For an evaluation, R_M comes from the records' format
and correctness with the run's weights `rewards.a1`, `rewards.a2`, and S's calls carry
no R_S (an evaluation judges no S execution); a training step's page passes its
`StepCredit` instead: R_M and A_M of each rollout, R_S, A_S and the D-slot alignment of
each S call, as the step computed them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mgrpo_jax.agents import specs
from mgrpo_jax.agents.records import MainRecord, SubRecord, Trajectory
from mgrpo_jax.core import rewards as rewards_lib
from mgrpo_jax.metrics import trajectory_page as page


@dataclasses.dataclass(frozen=True)
class StepCredit:
  """What a training step credited the shown rollouts and S calls with.

  Attributes:
    main: {(query id, k): (R_M, A_M)} of every rollout.
    sub: {(query id, k, i): (R_S, A_S or None, alignment)} of S's calls; A_S is None
      where the step computed none for the call (a dropped call, a frozen S), and
      `alignment` says which of the D slots the call filled ("" when not shown).
  """

  main: Mapping[tuple[str, int], tuple[float, float]]
  sub: Mapping[tuple[str, int, int], tuple[float, float | None, str]]


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


def _sub_call(record: SubRecord, credit: StepCredit | None) -> page.SubCall:
  trajectory = record.trajectory
  reward, advantage, alignment = (None, None, "")
  if credit is not None and record.key in credit.sub:
    reward, advantage, alignment = credit.sub[record.key]
  return page.SubCall(record.call_index, record.subtask, _messages(trajectory),
                      trajectory.final, trajectory.format_ok, reward, advantage, alignment)


def page_questions(main: Sequence[MainRecord], sub: Sequence[SubRecord],
                   questions: Mapping[str, Any], *, limit: int, a1: float = 0.1,
                   a2: float = 0.9, credit: StepCredit | None = None) -> list[page.Question]:
  """The first `limit` questions of scored records as page data (module docstring).

  `questions` maps a query id to its question (`text`, `answer`, `type`); `credit` is a
  training step's (R_M then comes from it, not from `a1`, `a2`).
  """
  by_question: dict[str, list[MainRecord]] = {}
  for record in main:
    if record.query_id in by_question or len(by_question) < limit:
      by_question.setdefault(record.query_id, []).append(record)
  shown = [r for records in by_question.values() for r in records]
  if not shown:
    return []
  if credit is not None:
    reward = {r.key: credit.main[r.key][0] for r in shown}
  else:
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
                     _messages(r.trajectory,
                               [_sub_call(s, credit) for s in calls.get(r.key, [])]),
                     r.trajectory.final, bool(r.correct == 1.0), r.trajectory.format_ok,
                     r.trajectory.end, reward[r.key],
                     None if credit is None else credit.main[r.key][1])
        for r in sorted(records, key=lambda r: r.rollout_index))
    question = questions[qid]
    out.append(page.Question(qid, question.text, question.answer, question.type, rollouts))
  return out
