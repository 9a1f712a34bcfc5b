"""Scripted M and S for the symbolic world, clean or with systematic mistakes.

M (`SymbolicMainOracle`): a chain "E017 boss home" is delegated hop by hop ("E017 boss",
then "<value> home"), the value read from S's report "boss <value>"; a list "E017 E044
boss" is one delegation per entity, answered with the values in order; a difference
delegates both years and subtracts them with the reason tool; a puzzle goes to the
reason tool. S (`SymbolicSubOracle`): visit the sub-task's entity by title, find the
line of the asked property, report "property value".

Systematic mistakes (the warm start's demonstrations leave RL something to fix; i.i.d.
noise would be averaged away by a greedy policy), each applied with probability `rate`
to its targeted cases, decided by a hash of (seed, mistake, task text):
  M, `wrong_relation_hop`: at that hop (1-based) of a chain, M asks for the previous
      hop's property again (only training M fixes it);
  M, `wrong_tool_types`: questions of these types (puzzles; differences, after their two
      look-ups) send their arithmetic to S instead of the reason tool (S finds nothing;
      only training M fixes it);
  S, `neighbour_value`: for these properties S reports the value of the page line after
      the asked one, under the asked property (only training S fixes it).
`rate` applies to each of an agent's mistakes; `rates` overrides it per mistake name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from mgrpo_jax.tasks.oracle.actions import Action, Step
from mgrpo_jax.tasks.oracle.noise import rate_of, triggered
from mgrpo_jax.tasks.symbolic import language
from mgrpo_jax.tasks.symbolic import vocabulary as vocab


@dataclasses.dataclass(frozen=True)
class MainNoise:
  wrong_relation_hop: int = 3
  wrong_tool_types: tuple[str, ...] = ("puzzle", "difference")
  rate: float = 0.7
  seed: int = 0
  rates: tuple[tuple[str, float], ...] = ()


@dataclasses.dataclass(frozen=True)
class SubNoise:
  neighbour_value: tuple[str, ...] = ("boss", "maker")
  rate: float = 0.7
  seed: int = 0
  rates: tuple[tuple[str, float], ...] = ()


MAIN_MISTAKES = ("wrong_relation", "wrong_tool")
SUB_MISTAKES = ("neighbour_value",)


class _NeedAction(Exception):
  """Raised inside a replay when the history is exhausted: carries the next action."""

  def __init__(self, action: Action):
    super().__init__(action.kind)
    self.action = action


def _ask(steps: Iterator[Step], action: Action) -> str:
  step = next(steps, None)
  if step is None:
    raise _NeedAction(action)
  return step.observation


class SymbolicMainOracle:
  """The scripted M of the symbolic world; `noise=None` is the clean oracle."""

  def __init__(self, noise: MainNoise | None = None):
    self.noise = noise

  def _mistake(self, kind: str, question: str) -> bool:
    return self.noise is not None and triggered(rate_of(self.noise, kind), self.noise.seed,
                                                kind, question)

  def next_action(self, question: str, history: Sequence[Step]) -> Action:
    plan = language.parse_question(question)
    if plan is None:
      return Action.answer(vocab.NONE)
    try:
      return Action.answer(self._replay(question, plan, iter(history)))
    except _NeedAction as need:
      return need.action

  def _look_up(self, steps: Iterator[Step], entity: str, prop: str) -> str | None:
    report = _ask(steps, Action.delegate(language.subtask_text(entity, prop)))
    return next((v for p, v in language.parse_report(report) if p == prop), None)

  def _compute(self, steps: Iterator[Step], kind: str, question: str, expression: str) -> str:
    """`expression`'s value from the reason tool, or, with the `wrong_tool` mistake on a
    question of type `kind`, the first number of S's report on it (S finds nothing)."""
    if (self.noise is not None and kind in self.noise.wrong_tool_types
        and self._mistake("wrong_tool", question)):
      report = _ask(steps, Action.delegate(expression))
      numbers = [t for t in report.split() if t.lstrip("-").isdigit()]
      return numbers[0] if numbers else vocab.NONE
    result = _ask(steps, Action.tool("reason", problem=expression)).strip()
    return vocab.NONE if result.startswith("error") else result

  def _replay(self, question: str, plan, steps: Iterator[Step]) -> str:
    if isinstance(plan, language.Puzzle):
      return self._compute(steps, "puzzle", question, plan.expression)
    if isinstance(plan, language.ListQuestion):
      values = [self._look_up(steps, e, plan.prop) for e in plan.entities]
      return vocab.NONE if None in values else " ".join(values)
    if isinstance(plan, language.Difference):
      years = [self._look_up(steps, e, vocab.YEAR) for e in (plan.first, plan.second)]
      if None in years:
        return vocab.NONE
      return self._compute(steps, "difference", question, f"{years[0]} - {years[1]}")
    current = plan.entity
    for hop, prop in enumerate(plan.props, start=1):
      asked = prop
      if (self.noise is not None and hop == self.noise.wrong_relation_hop
          and self._mistake("wrong_relation", question)):
        asked = plan.props[hop - 2]
      value = self._look_up(steps, current, asked)
      if value is None:
        return vocab.NONE
      current = value
    return current


class SymbolicSubOracle:
  """The scripted S of the symbolic world; `noise=None` is the clean oracle."""

  def __init__(self, noise: SubNoise | None = None):
    self.noise = noise

  def next_action(self, subtask: str, history: Sequence[Step]) -> Action:
    parsed = language.parse_subtask(subtask)
    if parsed is None:
      return Action.report(vocab.NONE)
    entity, prop = parsed
    if not history:
      return Action.tool("visit", page=entity)
    facts = language.forward_facts(history[0].observation)
    props = [p for p, _ in facts]
    if prop not in props:
      return Action.report(vocab.NONE)
    line = props.index(prop)
    if (self.noise is not None and prop in self.noise.neighbour_value
        and triggered(rate_of(self.noise, "neighbour_value"), self.noise.seed,
                      "neighbour_value", subtask)):
      line = line + 1 if line + 1 < len(facts) else line - 1
    return Action.report(language.report_text(prop, facts[line][1]))
