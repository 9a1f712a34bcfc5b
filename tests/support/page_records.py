"""Hand-made M and S records for the trajectory pages' data: decoded messages, tool calls."""

from __future__ import annotations

import numpy as np

from mgrpo_jax.agents.records import MainRecord, SubRecord, ToolCall, Trajectory


def trajectory(turns, final, format_ok=True) -> Trajectory:
  """turns: (assistant text, tool name or None, observation) per assistant turn."""
  messages = [("system", "sys"), ("user", "task")]
  calls = []
  for i, (text, tool, observation) in enumerate(turns):
    messages.append(("assistant", text))
    if tool is not None:
      calls.append(ToolCall(i, tool, '{"subtask": "x"}', True, 0.0))
      messages.append(("user", observation))
  empty = np.zeros(0, np.int32)
  return Trajectory(empty, empty.astype(bool), empty.astype(np.float32), empty,
                    tuple(messages), 0, format_ok, "", "result", len(turns), tuple(calls),
                    final, 0.0)


def sub_record(qid: str, k: int, i: int, **scores) -> SubRecord:
  """S's call i of rollout (qid, k): one search, then the report `s<i>`; `scores` sets
  `expert` and `main_correct` (unscored without them)."""
  calls = trajectory([("search", "search", "obs"), (f"<result>s{i}</result>", None, "")],
                     f"s{i}")
  return SubRecord(qid, k, i, f"subtask {i}", "", f"s{i}", calls, **scores)


def delegating_record(qid: str, k: int, calls: int, answer: str, correct: float) -> MainRecord:
  """M's rollout (qid, k): `calls` delegations, then the answer `answer`."""
  turns = [(f"d{i}", "delegate", f"r{i}") for i in range(calls)]
  return MainRecord(qid, k, "main", trajectory(turns + [(f"<result>{answer}</result>", None,
                                                         "")], answer), calls, correct)
