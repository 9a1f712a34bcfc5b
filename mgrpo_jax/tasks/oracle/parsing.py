"""What the scripted oracle knows: the world's *language*, never its facts.

It parses question text into a plan (`parse_question`), search results into hits
(`parse_hits`) and page text into property values (`extract_property`), using only the
templates in `schema` and `questions`. It never reads a `World` or a gold path.
"""

from __future__ import annotations

import dataclasses
import re

from mgrpo_jax.tasks import questions, schema
from mgrpo_jax.tasks.statements import parse_facts

_HIT = re.compile(r"^\d+\. (.+) \(page (\d+)\): ?(.*)$")
_LINK = re.compile(r"\[\[([^\]]+)\]\]")
_LINK_LIST = r"((?:\[\[[^\]]+\]\](?:, | and )?)+)"
_VALUE_PATTERNS = {"year": r"(\d{1,4})", "int": r"(\d[\d,]*\d|\d)", "category": r"([a-z]+)"}
_NOUN_PHRASES = sorted(((t[:-2], r) for r in schema.RELATIONS for t in r.noun_phrases),
                       key=lambda p: -len(p[0]))


@dataclasses.dataclass(frozen=True)
class Operand:
  """An entity named in the question and the properties to look up, innermost first."""
  name: str
  props: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Plan:
  """op: value | count | difference | max | min | count_before | expression."""
  op: str
  operands: tuple[Operand, ...] = ()
  threshold: int | None = None
  expression: str | None = None


def _template_regex(template: str) -> re.Pattern:
  return re.compile("^" + re.escape(template).replace(r"\{\}", "(.+)") + "$")


def parse_noun_phrase(phrase: str) -> tuple[str, list[schema.RelationSpec]] | None:
  """"the founder of the employer of X" -> ("X", [works_for, founded_by])."""
  rels = []
  while True:
    for prefix, spec in _NOUN_PHRASES:
      if phrase.startswith(prefix):
        rels.append(spec)
        phrase = phrase[len(prefix):]
        break
    else:
      break
  rels.reverse()
  for inner, outer in zip(rels, rels[1:], strict=False):
    if inner.object_type != outer.subject_type:
      return None
  return (phrase, rels) if phrase else None


def _operand(phrase: str, final: str | None, final_types=None) -> Operand | None:
  parsed = parse_noun_phrase(phrase)
  if parsed is None:
    return None
  name, rels = parsed
  if rels and final_types is not None and rels[-1].object_type not in final_types:
    return None
  props = [r.name for r in rels] + ([final] if final else [])
  return Operand(name, tuple(props))


def _attribute_patterns():
  for spec in schema.ATTRIBUTES:
    for template in spec.questions:
      yield _template_regex(template), spec


_ATTRIBUTE_QUESTIONS = list(_attribute_patterns())
_ENTITY_QUESTIONS = [(_template_regex(t.replace("{noun}", noun)), etype)
                     for t in questions.ENTITY_QUESTIONS
                     for etype, noun in schema.TYPE_NOUNS.items()]
_DIFFERENCE = _template_regex(questions.DIFFERENCE_QUESTION)
_COUNT_LIST = [_template_regex(t) for t in questions.COUNT_LIST_QUESTIONS]
_BEFORE = {a.before_phrase: a for a in schema.ATTRIBUTES if a.before_phrase}
_COUNT_BEFORE = re.compile(
  r"^How many of (.+) (" + "|".join(map(re.escape, _BEFORE)) + r") before (\d+)\?$")
_COMPARISONS = [(re.compile("^" + re.escape(a.comparison[0]).replace(r"\{\}", "(.+)", 1)
                            .replace(r"\{\}", "(.+)") + "$"), a)
                for a in schema.ATTRIBUTES if a.comparison]


def _puzzle_regex(template: str) -> re.Pattern:
  pattern, seen = re.escape(template), set()
  for key in re.findall(r"\\\{(\w+)\\\}", pattern):
    if key in seen:
      group = f"(?P={key})"
    elif key in ("d1", "d2"):
      group = rf"(?P<{key}>\d{{4}}-\d{{2}}-\d{{2}})"
    elif key in ("p", "q"):
      group = rf"(?P<{key}>\w+)"
    else:
      group = rf"(?P<{key}>\d+)"
    seen.add(key)
    pattern = pattern.replace(rf"\{{{key}\}}", group, 1)
  return re.compile("^" + pattern + "$")


_PUZZLES = [(_puzzle_regex(q), expr) for q, expr in questions.PUZZLES]


def _event_operand(text: str) -> Operand | None:
  for spec in schema.ATTRIBUTES:
    if spec.event_phrase and text.startswith(spec.event_phrase[:-2]):
      return _operand(text[len(spec.event_phrase) - 2:], spec.name, spec.subject_types)
  return None


def _parse_all(text: str):
  for regex, expression in _PUZZLES:
    match = regex.match(text)
    if match:
      yield Plan("expression", expression=expression.format(**match.groupdict()))
  match = _DIFFERENCE.match(text)
  if match:
    first, second = _event_operand(match.group(1)), _event_operand(match.group(2))
    if first and second:
      yield Plan("difference", (first, second))
  match = _COUNT_BEFORE.match(text)
  if match:
    spec = _BEFORE[match.group(2)]
    names = re.split(r", | and ", match.group(1))
    yield Plan("count_before", tuple(Operand(n, (spec.name,)) for n in names),
               threshold=int(match.group(3)))
  for regex in _COUNT_LIST:
    match = regex.match(text)
    if match:
      operand = _operand(match.group(1), "flows_through", ("river",))
      if operand:
        yield Plan("count", (operand,))
  for regex, spec in _COMPARISONS:
    match = regex.match(text)
    if match:
      ops = [_operand(match.group(k), spec.name, spec.subject_types) for k in (1, 2)]
      if all(ops):
        yield Plan(spec.comparison[1], tuple(ops))
  for regex, spec in _ATTRIBUTE_QUESTIONS:
    match = regex.match(text)
    if match:
      operand = _operand(match.group(1), spec.name, spec.subject_types)
      if operand:
        yield Plan("value", (operand,))
  for regex, etype in _ENTITY_QUESTIONS:
    match = regex.match(text)
    if match:
      operand = _operand(match.group(1), None)
      if operand and operand.props and schema.RELATION_BY_NAME[
          operand.props[-1]].object_type == etype:
        yield Plan("value", (operand,))


def parse_question(text: str) -> Plan | None:
  """The first consistent plan for a question written with the world's templates."""
  return next(_parse_all(text.strip()), None)


def parse_hits(text: str) -> list[tuple[str, int, str]]:
  """Search observation -> [(title, page id, snippet)]."""
  hits = []
  for line in text.splitlines():
    match = _HIT.match(line)
    if match:
      hits.append((match.group(1), int(match.group(2)), match.group(3)))
  return hits


def _object_pattern(prop: str) -> str:
  if prop in schema.RELATION_BY_NAME:
    return _LINK_LIST if schema.RELATION_BY_NAME[prop].multi else r"\[\[([^\]]+)\]\]"
  return _VALUE_PATTERNS[schema.ATTRIBUTE_BY_NAME[prop].kind]


def _page_templates(prop: str) -> tuple[str, ...]:
  if prop in schema.RELATION_BY_NAME:
    return schema.RELATION_BY_NAME[prop].page_templates
  return schema.ATTRIBUTE_BY_NAME[prop].page_templates


def extract_property(text: str, prop: str, subject: str) -> list[str]:
  """Values of `prop` for `subject` stated in page `text` (links unwrapped), or []."""
  for template in _page_templates(prop):
    pattern = re.escape(template)
    pattern = pattern.replace(r"\{s\}", re.escape(subject)).replace(
      r"\{o\}", _object_pattern(prop))
    if template.startswith("{s}"):
      pattern = r"(?:^|(?<=[.\n] )|(?<=\n))" + pattern
    match = re.search(pattern, text)
    if match:
      value = match.group(1)
      return _LINK.findall(value) if value.startswith("[[") else [value]
  return []


def links(text: str) -> list[str]:
  return _LINK.findall(text)


def report_values(report: str, prop: str, subject: str) -> list[str]:
  """Values a report states for (prop, subject), or []."""
  return [s.object for s in parse_facts(report) if s.prop == prop and s.subject == subject]
