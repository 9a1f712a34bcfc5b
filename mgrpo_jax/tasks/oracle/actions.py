"""Actions of the two agents and the step records a policy reads back.

Main agent M: `delegate(subtask)`, `tool("reason", problem=...)`, `answer(text)`.
Sub-agent S: `tool("search", query=...)`, `tool("visit", page=...)`, `report(text)`.
A policy is step-wise: given the task text and the history of (action, observation)
steps so far it returns the next action (`MainPolicy` / `SubPolicy`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

KINDS = ("tool", "delegate", "answer", "report")


@dataclasses.dataclass(frozen=True)
class Action:
  """kind in KINDS; `name`/`args` for tool calls, `text` for the others.

  `thought` is what a scripted agent writes in the turn's `<thinking>` (empty: the
  fixed phrase of its kind); it is not part of the action and not in `to_json`.
  """
  kind: str
  text: str = ""
  name: str = ""
  args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  thought: str = ""

  @staticmethod
  def tool(name: str, **args: Any) -> Action:
    return Action("tool", name=name, args=args)

  @staticmethod
  def delegate(subtask: str) -> Action:
    return Action("delegate", text=subtask)

  @staticmethod
  def answer(text: str) -> Action:
    return Action("answer", text=text)

  @staticmethod
  def report(text: str) -> Action:
    return Action("report", text=text)

  def to_json(self) -> str:
    """{"tool": name, "arguments": {...}} or {"delegate"|"answer"|"report": text}."""
    if self.kind == "tool":
      return json.dumps({"tool": self.name, "arguments": dict(self.args)}, sort_keys=True)
    return json.dumps({self.kind: self.text})


@dataclasses.dataclass(frozen=True)
class Step:
  """An action and what came back (tool text, or S's report for a delegation)."""
  action: Action
  observation: str
  latency_s: float = 0.0


class MainPolicy(Protocol):
  def next_action(self, question: str, history: Sequence[Step]) -> Action: ...


class SubPolicy(Protocol):
  def next_action(self, subtask: str, history: Sequence[Step]) -> Action: ...
