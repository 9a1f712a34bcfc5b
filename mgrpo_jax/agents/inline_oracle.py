"""The single agent's scripted policy: M's oracle with each delegation done inline."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from mgrpo_jax.tasks.oracle import Action, MainPolicy, Step, SubPolicy


class InlineOracle:
  """The single agent's scripted policy: M's oracle with each delegation done inline.

  Where M's oracle would delegate, the sub-agent oracle's tool calls are taken in the
  single agent's own trajectory, and S's report becomes the delegation's observation
  in M's replayed history. Both oracles keep their systematic mistakes.

  The single agent notes what it read: the thinking of its next turn after a
  delegation done inline is S's report ("boss E044"), where the team's M would read it
  as an observation. Without the note the single agent had to copy a value from a page
  with nothing before it that names the value's line (M's answer "E044" right after
  `<result>`), which a small model's copy-by-key circuit cannot do: S quotes the
  property before the value for the same reason (docs/RESULTS.md, "The single agent").
  """

  def __init__(self, main: MainPolicy, sub: SubPolicy):
    self.main = main
    self.sub = sub

  def next_action(self, question: str, history: Sequence[Step]) -> Action:
    """The next tool call or answer, given the single agent's steps so far."""
    pending = list(history)
    main_steps: list[Step] = []
    notes: list[str] = []  # S's reports since the single agent's last step
    while True:
      action = self.main.next_action(question, main_steps)
      if action.kind == "delegate":
        sub_steps: list[Step] = []
        while True:
          sub_action = self.sub.next_action(action.text, sub_steps)
          if sub_action.kind != "tool":
            break
          if not pending:
            return _noted(sub_action, notes)
          sub_steps.append(pending.pop(0))
          notes = []
        notes.append(sub_action.text)
        main_steps.append(Step(action, sub_action.text))
      elif action.kind == "tool" and pending:
        main_steps.append(pending.pop(0))
        notes = []
      else:
        return _noted(action, notes)


def _noted(action: Action, notes: Sequence[str]) -> Action:
  """`action` with `notes` (S's reports, in order) as its thought, if any."""
  return dataclasses.replace(action, thought=" ".join(notes)) if notes else action
