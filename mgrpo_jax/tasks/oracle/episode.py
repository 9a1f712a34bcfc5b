"""A sequential reference runner: one question, M's loop with S's loop per delegation.

It is the plain single-episode semantics that the lockstep controller batches; the
oracle tests and warm-start demonstration generation use it. Tool calls go through a
`ToolRegistry` (errors come back as observations, latencies are recorded per step).
"""

from __future__ import annotations

import dataclasses

from mgrpo_jax.tasks import statements
from mgrpo_jax.tasks.oracle.actions import Action, MainPolicy, Step, SubPolicy
from mgrpo_jax.tools.base import ToolRegistry


@dataclasses.dataclass
class SubCall:
  """One delegation: S's sub-task, its tool steps and its report."""
  subtask: str
  steps: list[Step]
  report: str


@dataclasses.dataclass
class Episode:
  """M's steps (delegations carry S's report as observation), S's calls, the answer."""
  question: str
  answer: str | None
  main_steps: list[Step]
  sub_calls: list[SubCall]


def _tool_step(registry: ToolRegistry, action: Action) -> Step:
  result = registry.call(action.name, dict(action.args))
  return Step(action, result.text, result.latency_s)


def run_sub(subtask: str, sub: SubPolicy, registry: ToolRegistry, *,
            max_turns: int = 6) -> SubCall:
  """S's loop for one sub-task; a turn budget or a non-S action ends with no facts."""
  steps: list[Step] = []
  for _ in range(max_turns):
    action = sub.next_action(subtask, steps)
    if action.kind == "report":
      return SubCall(subtask, steps, action.text)
    if action.kind != "tool":
      break
    steps.append(_tool_step(registry, action))
  return SubCall(subtask, steps, statements.NO_FACTS)


def run_episode(question: str, main: MainPolicy, sub: SubPolicy, registry: ToolRegistry,
                *, max_main_turns: int = 24, max_sub_turns: int = 6) -> Episode:
  """Runs M (and S per delegation) until M answers or runs out of turns."""
  main_steps: list[Step] = []
  sub_calls: list[SubCall] = []
  for _ in range(max_main_turns):
    action = main.next_action(question, main_steps)
    if action.kind == "answer":
      return Episode(question, action.text, main_steps, sub_calls)
    if action.kind == "delegate":
      call = run_sub(action.text, sub, registry, max_turns=max_sub_turns)
      sub_calls.append(call)
      main_steps.append(Step(action, call.report))
    elif action.kind == "tool":
      main_steps.append(_tool_step(registry, action))
    else:
      main_steps.append(Step(action, f"error: action kind {action.kind!r} is not M's"))
  return Episode(question, None, main_steps, sub_calls)
