"""Scripted main agent M: decompose, delegate each hop to S, use `reason`, answer.

Step-wise: `next_action(question, history)` parses the question into a plan (see
`parsing.parse_question`) and replays the history: the k-th delegation's report
supplies the entity for the next hop. Arithmetic and comparisons go to the reason
tool (differences `y2 - y1`, comparisons `v1 > v2`, counts `(y1 < T) + ...`,
puzzles); the answer is the last value. With `MainNoise`, targeted plans get vague
sub-tasks or have their arithmetic delegated to S (the wrong tool).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from mgrpo_jax.tasks import statements
from mgrpo_jax.tasks.oracle import noise as noise_lib
from mgrpo_jax.tasks.oracle import parsing
from mgrpo_jax.tasks.oracle.actions import Action, Step

UNKNOWN = "unknown"
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


class _NeedAction(Exception):
  """Raised inside a replay when the history is exhausted: carries the next action."""

  def __init__(self, action: Action):
    super().__init__(action.kind)
    self.action = action


def _number(text: str) -> str:
  return text.replace(",", "")


class OracleMainAgent:
  """The scripted M policy; `noise=None` is the clean oracle."""

  def __init__(self, noise: noise_lib.MainNoise | None = None):
    self.noise = noise

  def _mistake(self, kind: str, question: str) -> bool:
    if self.noise is None:
      return False
    return noise_lib.triggered(noise_lib.rate_of(self.noise, kind), self.noise.seed, kind,
                               question)

  def next_action(self, question: str, history: Sequence[Step]) -> Action:
    plan = parsing.parse_question(question)
    if plan is None:
      return Action.answer(UNKNOWN)
    steps = iter(history)
    try:
      return Action.answer(self._replay(question, plan, steps))
    except _NeedAction as need:
      return need.action

  @staticmethod
  def _ask(steps: Iterator[Step], action: Action) -> str:
    step = next(steps, None)
    if step is None:
      raise _NeedAction(action)
    return step.observation

  def _replay(self, question: str, plan: parsing.Plan, steps: Iterator[Step]) -> str:
    if plan.op == "expression":
      return self._compute(question, plan, plan.expression, steps, fallback=UNKNOWN)
    hops = sum(len(o.props) for o in plan.operands)
    if (plan.op == "value" and self.noise is not None
        and hops >= self.noise.vague_min_hops and self._mistake("vague", question)):
      report = self._ask(steps, Action.delegate(f"Research this: {question}"))
      claims = statements.parse_facts(report)
      return claims[-1].object if claims else UNKNOWN
    entities, values = [], []
    for operand in plan.operands:
      current: str | list[str] = operand.name
      entity = operand.name
      for prop in operand.props:
        entity = current
        report = self._ask(steps, Action.delegate(statements.subtask_text(prop, entity)))
        found = parsing.report_values(report, prop, entity)
        if not found:
          return UNKNOWN
        current = found if prop == "flows_through" else found[0]
      entities.append(entity)
      values.append(current)
    return self._combine(question, plan, entities, values, steps)

  def _combine(self, question, plan, entities, values, steps) -> str:
    if plan.op == "value":
      return values[0]
    if plan.op == "count":
      return str(len(values[0]))
    if plan.op == "difference":
      expression = f"{_number(values[1])} - {_number(values[0])}"
      return self._compute(question, plan, expression, steps, fallback=values[1])
    if plan.op in ("max", "min"):
      sign = ">" if plan.op == "max" else "<"
      result = self._compute(question, plan, f"{_number(values[0])} {sign} "
                             f"{_number(values[1])}", steps, fallback=UNKNOWN)
      return {"True": entities[0], "False": entities[1]}.get(result, UNKNOWN)
    if plan.op == "count_before":
      expression = " + ".join(f"({_number(v)} < {plan.threshold})" for v in values)
      return self._compute(question, plan, expression, steps, fallback=UNKNOWN)
    return UNKNOWN

  def _compute(self, question, plan, expression, steps, *, fallback: str) -> str:
    """The reason tool's value; with the wrong-tool mistake, S is asked instead."""
    if (self.noise is not None and plan.op in self.noise.wrong_tool_ops
        and self._mistake("wrong_tool", question)):
      report = self._ask(steps, Action.delegate(f"Compute {expression}."))
      numbers = _NUMBER.findall(report)
      return numbers[0] if numbers else fallback
    result = self._ask(steps, Action.tool("reason", problem=expression))
    return UNKNOWN if result.startswith("error") else result.strip()
