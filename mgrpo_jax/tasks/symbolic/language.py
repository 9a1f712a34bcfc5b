"""The grammar the two agents speak in the symbolic world.

  question    chain:       "E017 boss home"          (an entity, then 1..3 properties)
              list:        "E017 E044 E101 boss"     (2..6 entities, then one property:
                                                      the answer lists their values)
              difference:  "E017 year - E044 year"   (the reason tool subtracts)
              puzzle:      "37 + 45"                  (the reason tool, no look-up)
  sub-task    "E017 boss"                             (one entity, one property)
  report      "boss E044"                             (the property quoted, then its value)
              or "none" when nothing was found
  page        "E017", then one "property value" line per fact, then up to two
              inverse lines "E033 boss" (E033's boss is this entity) and a
              distractor line "see E018"

Quoting the property before the value lets the reader find the page line by its
property and copy the token after it. Every parser here returns None (or []) on text
it does not recognise; none raises.
"""

from __future__ import annotations

from typing import NamedTuple

from mgrpo_jax.tasks.symbolic import vocabulary as vocab

_PROPERTIES = frozenset(vocab.PROPERTIES)
# Entities of a list question: one delegation each.
MIN_LIST, MAX_LIST = 2, 6
_NAMES = frozenset(vocab.NAME_POOL)


class Chain(NamedTuple):
  """A chain question: the start entity and the properties, in the order they apply."""
  entity: str
  props: tuple[str, ...]


class ListQuestion(NamedTuple):
  """"E017 E044 boss": the property of each entity, answered in the entities' order."""
  entities: tuple[str, ...]
  prop: str


class Difference(NamedTuple):
  """"A year - B year": two entities whose years are subtracted."""
  first: str
  second: str


class Puzzle(NamedTuple):
  """An arithmetic expression for the reason tool."""
  expression: str


def is_name(token: str) -> bool:
  return token in _NAMES


def parse_question(text: str) -> Chain | ListQuestion | Difference | Puzzle | None:
  """The plan of a question written in the grammar above, or None."""
  if not isinstance(text, str):
    return None
  tokens = text.split()
  if len(tokens) == 3 and tokens[1] in vocab.OPERATORS and all(
      t.isdigit() for t in (tokens[0], tokens[2])):
    return Puzzle(" ".join(tokens))
  if (len(tokens) == 5 and tokens[2] == "-" and tokens[1] == tokens[4] == vocab.YEAR
      and is_name(tokens[0]) and is_name(tokens[3])):
    return Difference(tokens[0], tokens[3])
  if (MIN_LIST <= len(tokens) - 1 <= MAX_LIST and tokens[-1] in _PROPERTIES
      and all(is_name(t) for t in tokens[:-1])):
    return ListQuestion(tuple(tokens[:-1]), tokens[-1])
  if 2 <= len(tokens) <= 4 and is_name(tokens[0]) and all(t in _PROPERTIES for t in tokens[1:]):
    props = tuple(tokens[1:])
    if vocab.YEAR in props[:-1]:  # a year has no properties of its own
      return None
    return Chain(tokens[0], props)
  return None


def subtask_text(entity: str, prop: str) -> str:
  return f"{entity} {prop}"


def parse_subtask(text: str) -> tuple[str, str] | None:
  """(entity, property) of a sub-task "E017 boss", or None."""
  tokens = text.split() if isinstance(text, str) else []
  if len(tokens) == 2 and is_name(tokens[0]) and tokens[1] in _PROPERTIES:
    return tokens[0], tokens[1]
  return None


def report_text(prop: str, value: str | None) -> str:
  return vocab.NONE if value is None else f"{prop} {value}"


def parse_report(text: str) -> list[tuple[str, str]]:
  """The (property, value) claims of a report: each line or pair "prop value"."""
  tokens = text.split() if isinstance(text, str) else []
  return [(tokens[i], tokens[i + 1]) for i in range(0, len(tokens) - 1, 2)
          if tokens[i] in _PROPERTIES]


def page_lines(text: str) -> list[list[str]]:
  """The whitespace-split lines of a page after its title."""
  lines = text.splitlines() if isinstance(text, str) else []
  return [line.split() for line in lines[1:] if line.strip()]


def forward_facts(text: str) -> list[tuple[str, str]]:
  """The page's own (property, value) lines, in page order."""
  return [(line[0], line[1]) for line in page_lines(text)
          if len(line) == 2 and line[0] in _PROPERTIES]
