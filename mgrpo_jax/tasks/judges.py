"""Answer judge (M's correctness) and the programmatic expert judge (S's `r_expert`).

Answer judge (paper: the correctness term of R_M, Sec. 3): both strings are normalized
(Unicode NFKC, lower case, numbers made canonical ("1,200" and "1200.0" -> "1200"),
punctuation removed, the articles a/an/the dropped, whitespace collapsed). If the gold
answer is a number the prediction matches when it contains exactly one number equal to
it ("1,200", "1200.0" and "1200 people" all match "1200"); otherwise the normalized
strings must be equal.

Expert judge (paper: `r_expert` in R_S = b1*format + b2*correct_M + b3*expert): the
report's fact claims are read with `statements.parse_facts`; each claim i scores

  w_i = on_path   (1.0)  if the claim is true and matches a fact of the gold path,
        off_path  (0.5)  if it is true in the world but not on the gold path,
        0                if it is false or names an unknown entity/property,

and r_expert = mean_i w_i over the claims (at most `statements.MAX_FACTS`), or 0 for a
report with no claim. Anything implementing `ExpertJudge` (e.g. an LLM judge,
`model_judge`) can replace it; anything implementing `AnswerJudge` can replace the
answer judge.

Batches: a judge is called per item, `judge(task, prediction)` or `judge(task, subtask,
report)`; a judge that is better asked many items at once (a model) also has
`batch(items) -> [score]` over `AnswerItem`s or `ReportItem`s, which `answer_scores` and
`expert_scores` use when it exists (per-item calls otherwise, in order).
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Protocol

from mgrpo_jax.tasks import schema, statements
from mgrpo_jax.tasks.world import World

_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?|[-+]?\.\d+")
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|[^\W_]+")
_ARTICLES = frozenset({"a", "an", "the"})


class HasAnswer(Protocol):
  text: str
  answer: str


class AnswerJudge(Protocol):
  """Scores M's final answer for a task with a gold answer: 1.0 correct, 0.0 wrong."""

  def __call__(self, task: HasAnswer, prediction: str) -> float: ...


class ExpertJudge(Protocol):
  """Scores one sub-agent report for a task, in [0, 1] (the paper's r_expert)."""

  def __call__(self, task, subtask: str, report: str) -> float: ...


@dataclasses.dataclass(frozen=True)
class AnswerItem:
  """One answer to judge: M's final answer `prediction` to `task` (which has `.answer`)."""

  task: Any
  prediction: str


@dataclasses.dataclass(frozen=True)
class ReportItem:
  """One report to judge: S's `report` on `subtask` of `task`, and the `evidence` it read
  (its tool observations; "" when unknown)."""

  task: Any
  subtask: str
  report: str
  evidence: str = ""


def answer_scores(judge: AnswerJudge, items: Sequence[AnswerItem]) -> list[float]:
  """r_correct of each item: `judge.batch(items)` when the judge has it, else one call
  per item (module docstring)."""
  if not items:
    return []
  if hasattr(judge, "batch"):
    return _checked(judge.batch(list(items)), len(items), judge)
  return [float(judge(item.task, item.prediction)) for item in items]


def expert_scores(judge: ExpertJudge, items: Sequence[ReportItem]) -> list[float]:
  """r_expert of each item: `judge.batch(items)` when the judge has it, else one call per
  item, without the evidence (module docstring)."""
  if not items:
    return []
  if hasattr(judge, "batch"):
    return _checked(judge.batch(list(items)), len(items), judge)
  return [float(judge(item.task, item.subtask, item.report)) for item in items]


def _checked(scores: Sequence[float], count: int, judge: Any) -> list[float]:
  """`scores` as floats, or a ValueError naming the judge when there is not one per item."""
  out = [float(s) for s in scores]
  if len(out) != count:
    raise ValueError(f"{type(judge).__name__}.batch returned {len(out)} scores for "
                     f"{count} items")
  return out


def parse_number(text: str) -> float | None:
  """The value of a string that is one number ("1,200", "1200.0", "-3"), else None."""
  if not isinstance(text, str):
    return None
  candidate = text.strip().replace(",", "").replace(" ", "")
  try:
    value = float(candidate)
  except ValueError:
    return None
  return value if value == value and abs(value) != float("inf") else None


def numbers_in(text: str) -> list[float]:
  """All numbers written in `text` (thousands separators allowed)."""
  out = []
  for token in _NUMBER.findall(text):
    value = parse_number(token)
    if value is not None:
      out.append(value)
  return out


def _canonical_number(token: str) -> str:
  value = parse_number(token)
  if value is None:
    return token
  return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def normalize_answer(text: str) -> str:
  """NFKC, lower case, canonical numbers, no punctuation, no articles, single spaces."""
  if not isinstance(text, str):
    return ""
  text = unicodedata.normalize("NFKC", text).lower()
  text = _NUMBER.sub(lambda m: f" {_canonical_number(m.group(0))} ", text)
  tokens = _TOKEN.findall(text)
  return " ".join(t for t in tokens if t not in _ARTICLES)


def exact_match(prediction: str, gold: str) -> bool:
  return normalize_answer(prediction) == normalize_answer(gold) != ""


def numeric_match(prediction: str, gold: str, *, rel_tol: float = 1e-9) -> bool:
  """True iff gold is a number and the prediction holds exactly one, equal to it."""
  target = parse_number(gold)
  if target is None or not isinstance(prediction, str):
    return False
  found = numbers_in(prediction)
  if len(found) != 1:
    return False
  return abs(found[0] - target) <= rel_tol * max(1.0, abs(target))


def answers_match(prediction: str, gold: str) -> bool:
  """Numeric match for numeric gold answers, normalized exact match otherwise."""
  if parse_number(gold) is not None:
    return numeric_match(prediction, gold)
  return exact_match(prediction, gold)


class ExactMatchJudge:
  """The default `AnswerJudge`."""

  def __call__(self, task: HasAnswer, prediction: str) -> float:
    return 1.0 if answers_match(prediction, task.answer) else 0.0


def _value_key(value: str) -> str:
  number = parse_number(value)
  if number is not None:
    return repr(number)
  return normalize_answer(value)


class ProgrammaticExpertJudge:
  """`ExpertJudge` that checks report claims against the world and the gold path."""

  def __init__(self, world: World, *, on_path: float = 1.0, off_path: float = 0.5):
    if not 0.0 <= off_path <= on_path <= 1.0:
      raise ValueError(f"need 0 <= off_path <= on_path <= 1, got {off_path}, {on_path}")
    self.world = world
    self.on_path = on_path
    self.off_path = off_path
    self._by_normalized_name = {normalize_answer(n): i for i, n in enumerate(world.names)}

  def claim_score(self, claim: statements.Statement, gold_keys: set) -> float:
    entity = self.world.name_to_id.get(claim.subject)
    if entity is None:
      entity = self._by_normalized_name.get(normalize_answer(claim.subject))
    if entity is None:
      return 0.0
    prop = claim.prop
    etype = self.world.type_of(entity)
    applies = (prop in schema.RELATION_BY_NAME
               and schema.RELATION_BY_NAME[prop].subject_type == etype
               or prop in schema.ATTRIBUTE_BY_NAME
               and etype in schema.ATTRIBUTE_BY_NAME[prop].subject_types)
    if not applies:
      return 0.0
    true_values = {_value_key(v) for v in self.world.values(entity, prop)}
    value = _value_key(claim.object)
    if value not in true_values:
      return 0.0
    key = (normalize_answer(self.world.names[entity]), prop, value)
    return self.on_path if key in gold_keys else self.off_path

  def __call__(self, task, subtask: str, report: str) -> float:
    """r_expert of `report` for `task` (a Question with a gold path); see module doc."""
    claims = statements.parse_facts(report)
    if not claims:
      return 0.0
    gold_keys = {(normalize_answer(f.subject), f.relation, _value_key(f.object))
                 for f in getattr(task, "path", ())}
    return sum(self.claim_score(c, gold_keys) for c in claims) / len(claims)
