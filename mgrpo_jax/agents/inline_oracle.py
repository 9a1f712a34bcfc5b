"""The single agent's scripted policy: M's oracle with each delegation done inline."""

from __future__ import annotations

from collections.abc import Sequence

from mgrpo_jax.tasks.oracle import Action, MainPolicy, Step, SubPolicy


class InlineOracle:
  """The single agent's scripted policy: M's oracle with each delegation done inline.

  Where M's oracle would delegate, the sub-agent oracle's tool calls are taken in the
  single agent's own trajectory, and S's report becomes the delegation's observation
  in M's replayed history. Both oracles keep their systematic mistakes.
  """

  def __init__(self, main: MainPolicy, sub: SubPolicy):
    self.main = main
    self.sub = sub

  def next_action(self, question: str, history: Sequence[Step]) -> Action:
    """The next tool call or answer, given the single agent's steps so far."""
    pending = list(history)
    main_steps: list[Step] = []
    while True:
      action = self.main.next_action(question, main_steps)
      if action.kind == "delegate":
        sub_steps: list[Step] = []
        while True:
          sub_action = self.sub.next_action(action.text, sub_steps)
          if sub_action.kind != "tool":
            break
          if not pending:
            return sub_action
          sub_steps.append(pending.pop(0))
        main_steps.append(Step(action, sub_action.text))
      elif action.kind == "tool" and pending:
        main_steps.append(pending.pop(0))
      else:
        return action
