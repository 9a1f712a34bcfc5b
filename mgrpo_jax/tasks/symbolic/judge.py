"""The programmatic expert score (the paper's r_expert) of S's reports in the symbolic world.

A report's claims are its "property value" pairs about the sub-task's entity; each
claim scores `on_path` (1.0) when it is true and a fact of the question's gold path,
`off_path` (0.5) when true but off the path, 0 when false; r_expert is their mean, 0
for a report without claims or a sub-task that names no entity and property.
"""

from __future__ import annotations

from mgrpo_jax.tasks.symbolic import language
from mgrpo_jax.tasks.symbolic.world import SymbolicWorld
from mgrpo_jax.tasks.world import Fact


class SymbolicExpertJudge:
  """`judges.ExpertJudge` over a symbolic world (module docstring)."""

  def __init__(self, world: SymbolicWorld, *, on_path: float = 1.0, off_path: float = 0.5):
    if not 0.0 <= off_path <= on_path <= 1.0:
      raise ValueError(f"need 0 <= off_path <= on_path <= 1, got {off_path}, {on_path}")
    self.world = world
    self.on_path = on_path
    self.off_path = off_path

  def __call__(self, task, subtask: str, report: str) -> float:
    parsed = language.parse_subtask(subtask)
    claims = language.parse_report(report)
    if parsed is None or not claims:
      return 0.0
    gold = set(getattr(task, "path", ()))
    scores = []
    for prop, value in claims:
      fact = Fact(parsed[0], prop, value)
      if not self.world.holds(fact):
        scores.append(0.0)
      else:
        scores.append(self.on_path if fact in gold else self.off_path)
    return sum(scores) / len(scores)
