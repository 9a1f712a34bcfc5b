"""The imitation ceiling: the best teacher-forced turn accuracy any model can reach on
demonstrations with systematic mistakes.

A noisy oracle makes a mistake of rate p on a targeted case when a hash of (seed,
mistake, task text) says so (`tasks.oracle.noise`). A model reading a turn's history
cannot compute that hash for an unseen question, so on a turn whose action depends on a
draw not yet visible in the history, the best it can do is to write the action the
draws make most likely. Draws that changed an earlier turn are fixed: their
consequences are in the history (S's wrong report, the note it left), and an imitator
copies them. Per demonstrated turn with history h:

  ceiling(h) = max_a P(a | h),  P over the draws no earlier turn showed
  ceiling    = mean over turns of ceiling(h)

so `demonstrated_turn_accuracy` (`held_out`) is at most `ceiling` in expectation: 1
where every mistake has rate 0 or 1, max(p, 1 - p) on a turn that decides one mistake
of rate p. `CeilingScorer` wraps the policy that writes the turns (M's or S's oracle,
the single agent's `InlineOracle`) and replays each turn under every assignment of its
fresh draws (`noise.decided`).
"""

from __future__ import annotations

from collections.abc import Sequence

from mgrpo_jax.agents.oracle_policy import render_oracle_action
from mgrpo_jax.tasks.oracle import Step
from mgrpo_jax.tasks.oracle import noise as noise_lib

# Fresh uncertain draws one turn may depend on before the enumeration (2^n replays)
# is refused: the scripted worlds' turns decide at most one or two.
MAX_FRESH_DRAWS = 8

DrawKey = tuple[int, str, str]


class _Unassigned(Exception):
  """A replay reached an uncertain draw that the assignment does not fix yet."""

  def __init__(self, rate: float, key: DrawKey):
    super().__init__(key)
    self.rate, self.key = rate, key


class CeilingScorer:
  """A scripted policy that scores the ideal imitator at every turn it writes.

  `next_action` is the wrapped oracle's (the demonstrations are unchanged); `scores`
  holds ceiling(h) of every turn written, in order (module docstring). Each turn is
  scored from its own history alone (the draws its earlier turns showed are found by
  replaying them), so trajectories of the same task may interleave.
  """

  def __init__(self, oracle):
    self.oracle = oracle
    self.scores: list[float] = []

  @property
  def ceiling(self) -> float:
    """Mean ceiling(h) over the turns written so far."""
    if not self.scores:
      raise ValueError("CeilingScorer wrote no turns")
    return sum(self.scores) / len(self.scores)

  def next_action(self, task: str, history: Sequence[Step]):
    history = list(history)
    shown: dict[DrawKey, bool] = {}
    for turn in range(len(history)):  # the draws the history's own turns made visible
      if len(self._action_probabilities(task, history[:turn], shown)) > 1:
        shown.update(self._realized(task, history[:turn], shown)[1])
    action, _ = self._realized(task, history, shown)
    probabilities = self._action_probabilities(task, history, shown)
    if render_oracle_action(action) not in probabilities:
      raise RuntimeError(f"replaying a turn of task {task!r} under every draw never wrote "
                         "the turn's own action: the oracle decides outside `noise.triggered`")
    self.scores.append(max(probabilities.values()))
    return action

  def _realized(self, task: str, history: list[Step], shown: dict[DrawKey, bool]):
    """(the oracle's action at `history`, every draw it consulted: {key: outcome})."""
    consulted: dict[DrawKey, bool] = {}

    def as_drawn(rate: float, key: DrawKey) -> bool:
      consulted[key] = shown[key] if key in shown else noise_lib.hashed_draw(rate, *key)
      return consulted[key]

    with noise_lib.decided(as_drawn):
      action = self.oracle.next_action(task, list(history))
    return action, consulted

  def _action_probabilities(self, task: str, history: list[Step],
                            shown: dict[DrawKey, bool]) -> dict[str, float]:
    """P(action | history) over the draws not in `shown`: {rendered action: p}."""
    probabilities: dict[str, float] = {}
    pending: list[tuple[dict[DrawKey, bool], float]] = [({}, 1.0)]
    while pending:
      assigned, weight = pending.pop()

      def decide(rate: float, key: DrawKey, assigned=assigned) -> bool:
        if key in shown:
          return shown[key]
        if key in assigned:
          return assigned[key]
        if 0.0 < rate < 1.0:
          raise _Unassigned(rate, key)
        return rate >= 1.0

      try:
        with noise_lib.decided(decide):
          action = self.oracle.next_action(task, list(history))
      except _Unassigned as draw:
        if len(assigned) >= MAX_FRESH_DRAWS:
          raise ValueError(f"a turn of task {task!r} depends on more than "
                           f"{MAX_FRESH_DRAWS} fresh mistake draws") from None
        pending.append(({**assigned, draw.key: True}, weight * draw.rate))
        pending.append(({**assigned, draw.key: False}, weight * (1.0 - draw.rate)))
        continue
      rendered = render_oracle_action(action)
      probabilities[rendered] = probabilities.get(rendered, 0.0) + weight
    return probabilities
