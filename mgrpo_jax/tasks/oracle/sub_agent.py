"""Scripted sub-agent S: search for the sub-task, visit its page, extract the fact, report.

Step-wise: `next_action(subtask, history)` replays the history to find where it is.
Without noise: search(the sub-task's text) -> visit(the hit whose title is the subject)
-> report "The <label> of <subject> is <value>." An unparsable sub-task gets the same
search and then "No facts found.". Searching with the whole sub-task (BM25 over the
OR of its non-stopword terms ranks the subject's page first, as the subject alone
does) makes the query a copy of the user message from its first token, which a small
model learns by induction; the subject alone would start at a token chosen by its role.
With `SubNoise`, targeted properties get the configured systematic mistakes (see
`noise`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mgrpo_jax.tasks import schema, statements
from mgrpo_jax.tasks.oracle import noise as noise_lib
from mgrpo_jax.tasks.oracle import parsing
from mgrpo_jax.tasks.oracle.actions import Action, Step

_NUMBER = re.compile(r"\d[\d,]*\d|\d")
_MAX_QUERY = 200


def _snippet_guess(snippet: str, prop: str, subject: str) -> list[str]:
  """What a reader skimming the snippet would report (right only by luck)."""
  found = parsing.extract_property(snippet, prop, subject)
  if found:
    return found
  if prop in schema.RELATION_BY_NAME:
    names = [n for n in parsing.links(snippet) if n != subject]
    return names[:1]
  numbers = _NUMBER.findall(snippet)
  spec = schema.ATTRIBUTE_BY_NAME[prop]
  if spec.kind == "category":
    return [spec.categories[0]]
  return numbers[:1]


def _wrong_value(text: str, prop: str, subject: str, right: list[str]) -> list[str]:
  """A value of the right shape from the same page that is not the right one."""
  if prop in schema.RELATION_BY_NAME:
    others = [n for n in parsing.links(text) if n not in right and n != subject]
  else:
    spec = schema.ATTRIBUTE_BY_NAME[prop]
    if spec.kind == "category" and right:
      index = spec.categories.index(right[0]) if right[0] in spec.categories else 0
      return [spec.categories[(index + 1) % len(spec.categories)]]
    others = [n for n in _NUMBER.findall(text) if n not in right]
  return others[:1] or right


class OracleSubAgent:
  """The scripted S policy; `noise=None` is the clean oracle."""

  def __init__(self, noise: noise_lib.SubNoise | None = None):
    self.noise = noise

  def _mistake(self, kind: str, prop: str, subtask: str) -> bool:
    if self.noise is None or prop not in getattr(self.noise, kind):
      return False
    return noise_lib.triggered(noise_lib.rate_of(self.noise, kind), self.noise.seed, kind,
                               subtask)

  def next_action(self, subtask: str, history: Sequence[Step]) -> Action:
    if not history:
      return Action.tool("search", query=subtask[:_MAX_QUERY])
    parsed = statements.parse_subtask(subtask)
    if parsed is None:
      return Action.report(statements.NO_FACTS)
    prop, subject = parsed
    hits = parsing.parse_hits(history[0].observation)
    exact = [h for h in hits if h[0] == subject]
    if not exact:
      return Action.report(statements.NO_FACTS)
    if self._mistake("skip_visit", prop, subtask):
      return self._report(prop, subject, _snippet_guess(exact[0][2], prop, subject))
    wrong_page = self._mistake("wrong_page", prop, subtask)
    target = exact[0]
    if wrong_page:
      target = next((h for h in hits if h[0] != subject), exact[0])
    if len(history) == 1:
      return Action.tool("visit", page=target[1])
    text = history[1].observation
    values = parsing.extract_property(text, prop, target[0])
    if values and self._mistake("wrong_extraction", prop, subtask):
      values = _wrong_value(text, prop, target[0], values)
    return self._report(prop, subject, values)

  @staticmethod
  def _report(prop: str, subject: str, values: list[str]) -> Action:
    if not values:
      return Action.report(statements.NO_FACTS)
    return Action.report(statements.fact_sentence(prop, subject, values))
