"""Scored records as the trajectory page's data (`metrics.trajectory_page`).

`page_questions` groups M's records by question (in their order, the first `limit`),
turns each trajectory's decoded messages into page messages and nests S's call `i` of a
rollout under M's `i`-th delegation: the controller numbers a rollout's sub-calls in the
order M delegated, and a delegation refused by the sub-call limit (always after the
accepted ones) has no S record. What each rollout and call is credited with comes from
a `PageCredit`: an evaluation's (`evaluation_credit`: R_M of the records' format and
correctness through `plugins.main_rewards` with the run's `rewards.*`, so a gin-bound
R_M is the one shown; no A_M, and S's calls carry no R_S, since an evaluation judges no
S execution), or a training step's: R_M and A_M of each rollout, R_S, A_S and the
D-slot alignment of each S call, as the step computed them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mgrpo_jax import plugins
from mgrpo_jax.agents import specs
from mgrpo_jax.agents.records import MainRecord, SubRecord, Trajectory
from mgrpo_jax.core.rewards import RewardWeights
from mgrpo_jax.metrics import trajectory_page as page


@dataclasses.dataclass(frozen=True)
class PageCredit:
  """What a page credits the shown rollouts and S calls with (module docstring).

  Attributes:
    main: {(query id, k): (R_M, A_M or None)} of every rollout; A_M is None in an
      evaluation.
    sub: {(query id, k, i): (R_S, A_S or None, alignment)} of S's calls; A_S is None
      where the step computed none for the call (a dropped call, a frozen S), and
      `alignment` says which of the D slots the call filled ("" when not shown).
  """

  main: Mapping[tuple[str, int], tuple[float, float | None]]
  sub: Mapping[tuple[str, int, int], tuple[float, float | None, str]]


def evaluation_credit(main: Sequence[MainRecord], weights: RewardWeights) -> PageCredit:
  """An evaluation's credit: R_M of each scored M record through `plugins.main_rewards`
  (format_ok, correct [N] -> R_M [N]), no A_M, no S call credited."""
  if not main:
    return PageCredit({}, {})
  reward = plugins.main_rewards(np.array([r.trajectory.format_ok for r in main], bool),
                                np.array([r.correct for r in main], np.float32), weights)
  return PageCredit({r.key: (float(v), None) for r, v in zip(main, reward, strict=True)}, {})


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


def _sub_call(record: SubRecord, credit: PageCredit) -> page.SubCall:
  trajectory = record.trajectory
  reward, advantage, alignment = credit.sub.get(record.key, (None, None, ""))
  return page.SubCall(record.call_index, record.subtask, _messages(trajectory),
                      trajectory.final, trajectory.format_ok, reward, advantage, alignment)


def page_questions(main: Sequence[MainRecord], sub: Sequence[SubRecord],
                   questions: Mapping[str, Any], *, limit: int, credit: PageCredit
                   ) -> list[page.Question]:
  """The first `limit` questions of scored records as page data (module docstring).

  `questions` maps a query id to its question (`text`, `answer`, `type`); `credit` has
  R_M of every shown rollout.
  """
  by_question: dict[str, list[MainRecord]] = {}
  for record in main:
    if record.query_id in by_question or len(by_question) < limit:
      by_question.setdefault(record.query_id, []).append(record)
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
                     r.trajectory.end, *credit.main[r.key])
        for r in sorted(records, key=lambda r: r.rollout_index))
    question = questions[qid]
    out.append(page.Question(qid, question.text, question.answer, question.type, rollouts))
  return out
