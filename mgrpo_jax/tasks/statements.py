"""The plain-text protocol between M and S: sub-task requests and fact reports.

A sub-task names one property of one entity: "Find the founder of Velora Trust."
A report states facts as "The <label> of <subject> is <object>." (or "are A, B and C"
for list-valued relations). The programmatic expert judge and the oracle both read
reports with `parse_facts`; labels are the ones in `schema` (unique per property).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from mgrpo_jax.tasks import schema

NO_FACTS = "No facts found."
_LABELS = sorted(schema.PROPERTY_BY_LABEL, key=len, reverse=True)
_LABEL_RE = "|".join(re.escape(label) for label in _LABELS)
_SUBTASK = re.compile(rf"^\s*Find the ({_LABEL_RE}) of (.+?)\.?\s*$")
_FACT = re.compile(rf"\bThe ({_LABEL_RE}) of (.+?) (?:is|are) (.+?)\.(?=\s|$)")
MAX_FACTS = 32


class Statement(NamedTuple):
  """A parsed fact claim: property id (relation or attribute), subject, object text."""
  prop: str
  subject: str
  object: str


def subtask_text(prop: str, subject: str) -> str:
  return f"Find the {schema.property_label(prop)} of {subject}."


def parse_subtask(text: str) -> tuple[str, str] | None:
  """(property id, subject) of a canonical sub-task, or None."""
  match = _SUBTASK.match(text) if isinstance(text, str) else None
  if match is None:
    return None
  return schema.PROPERTY_BY_LABEL[match.group(1)], match.group(2).strip()


def join_values(values: list[str]) -> str:
  return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def split_values(text: str) -> list[str]:
  parts = re.split(r",\s+|\s+and\s+", text.strip())
  return [p.strip() for p in parts if p.strip()]


def fact_sentence(prop: str, subject: str, values: list[str]) -> str:
  verb = "are" if len(values) > 1 else "is"
  return f"The {schema.property_label(prop)} of {subject} {verb} {join_values(values)}."


def parse_facts(text: str) -> list[Statement]:
  """Fact claims in a report, at most MAX_FACTS; list objects are split into items."""
  out: list[Statement] = []
  if not isinstance(text, str):
    return out
  for match in _FACT.finditer(text):
    prop = schema.PROPERTY_BY_LABEL[match.group(1)]
    spec = schema.RELATION_BY_NAME.get(prop)
    obj = match.group(3).strip()
    values = split_values(obj) if spec is not None and spec.multi else [obj]
    out.extend(Statement(prop, match.group(2).strip(), v) for v in values)
    if len(out) >= MAX_FACTS:
      return out[:MAX_FACTS]
  return out
