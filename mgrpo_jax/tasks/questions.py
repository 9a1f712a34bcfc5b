"""Question synthesis from sampled graph paths (the paper's KG-subgraph QA, Sec. 4.1).

Types (`Question.type`):
  lookup      1 hop: an attribute or relation of a named entity.
  multihop    a chain of relations ("the founder of the employer of X"), then an
              attribute or the end entity's name; 2..H hops.
  difference  "How many years after E1 was E2?" over two year attributes (reason tool).
  comparison  "Which is longer, A or B?" over a numeric attribute (reason tool).
  count       "Through how many cities does R flow?" (a list) or "How many of A, B and C
              were born before Y?" (retrieve each, count with the reason tool).
  puzzle      arithmetic / date puzzles that need the reason tool and no search.

Every question carries its gold answer, its gold path (the facts that answer it, as
`Fact(subject, relation, object)` with the object as `World.values` writes it) and
`meta` saying how the answer follows from the path (`op`, and `split` = number of path
facts of the first operand where there are two). `hops` = number of distinct
(subject, relation) lookups in the path.

Stage 1 (format and basics) mixes lookups, 2-hop chains, counts and puzzles; stage 2
(collaboration) mixes 2-4 hop chains, differences, comparisons, counts and puzzles.
`low_success_filter` is the paper's filter (keep what the untrained system rarely solves).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mgrpo_jax.tasks import schema
from mgrpo_jax.tasks.world import Fact, World
from mgrpo_jax.tools import reason

ENTITY_QUESTIONS = ("What is the name of {}?", "Which {noun} is {}?")
DIFFERENCE_QUESTION = "How many years after {} was {}?"
COUNT_LIST_QUESTIONS = ("Through how many cities does {} flow?",
                        "How many cities does {} flow through?")
COUNT_BEFORE_QUESTION = "How many of {} {} before {}?"
PUZZLES: tuple[tuple[str, str], ...] = (  # (question template, expression template)
  ("A crate holds {a} jars and each jar holds {b} beads. How many beads are in {c} crates?",
   "{c} * {a} * {b}"),
  ("What is {a} multiplied by {b}, minus {c}?", "{a} * {b} - {c}"),
  ("What is the remainder when {a} is divided by {b}?", "{a} % {b}"),
  ("How many days are there from {d1} to {d2}?", "days_between('{d1}', '{d2}')"),
  ("How many full years passed from {d1} to {d2}?", "years_between('{d1}', '{d2}')"),
  ("Which is larger, {a}^{e1} or {b}^{e2}? Give its value.", "max({a}**{e1}, {b}**{e2})"),
  ("{p} has {a} coins and {q} has {b} more coins than {p}. How many coins do they have "
   "together?", "{a} + ({a} + {b})"),
)
QUESTION_TYPES = ("lookup", "multihop", "difference", "comparison", "count", "puzzle")


@dataclasses.dataclass(frozen=True)
class Question:
  """One task. `path` facts are in answer order; `meta` is JSON-serializable."""
  id: str
  text: str
  answer: str
  path: tuple[Fact, ...]
  type: str
  hops: int
  meta: dict[str, Any] = dataclasses.field(default_factory=dict)

  def to_json(self) -> str:
    return json.dumps({"id": self.id, "text": self.text, "answer": self.answer,
                       "path": [list(f) for f in self.path], "type": self.type,
                       "hops": self.hops, "meta": self.meta}, sort_keys=True)

  @classmethod
  def from_json(cls, payload: str) -> Question:
    d = json.loads(payload)
    return cls(d["id"], d["text"], d["answer"], tuple(Fact(*f) for f in d["path"]),
               d["type"], int(d["hops"]), d.get("meta", {}))


@dataclasses.dataclass(frozen=True)
class Mixture:
  """Question-type weights and the hop range of chains."""
  weights: dict[str, float]
  min_hops: int
  max_hops: int

  def restricted(self, types: Sequence[str]) -> Mixture:
    """This mixture over `types` only (`synthesize` renormalizes the weights)."""
    unknown = sorted(set(types) - set(self.weights))
    if unknown:
      raise ValueError(f"question types {unknown} are not in this mixture's "
                       f"{sorted(self.weights)}")
    return Mixture({t: w for t, w in self.weights.items() if t in types}, self.min_hops,
                   self.max_hops)


STAGE1 = Mixture({"lookup": 0.45, "multihop": 0.25, "count": 0.1, "puzzle": 0.2}, 1, 2)
STAGE2 = Mixture({"multihop": 0.4, "difference": 0.2, "comparison": 0.2, "count": 0.1,
                  "puzzle": 0.1}, 2, 4)
STAGES = {1: STAGE1, 2: STAGE2}


def count_hops(path: Sequence[Fact]) -> int:
  return len({(f.subject, f.relation) for f in path})


class _Sampler:
  """Draws paths and phrases them; all randomness from one numpy Generator."""

  def __init__(self, world: World, rng: np.random.Generator):
    self.world = world
    self.rng = rng
    self.functional = {t: schema.relations_of(t, functional_only=True)
                       for t in schema.ENTITY_TYPES}

  def reachable(self, n_rel: int) -> set[str]:
    """Types that can end a chain of exactly n_rel functional relations."""
    types = set(schema.ENTITY_TYPES)
    for _ in range(n_rel):
      types = {r.object_type for r in schema.RELATIONS if not r.multi and r.subject_type in types}
    return types

  def choice(self, seq):
    return seq[int(self.rng.integers(0, len(seq)))]

  def entity(self, etype: str) -> int:
    return int(self.choice(self.world.ids_by_type[etype]))

  def chain(self, n_rel: int, end_types: Sequence[str] | None = None):
    """(start id, relation specs, facts, end id): a walk of n_rel functional relations."""
    for _ in range(1000):
      start = self.entity(self.choice(schema.ENTITY_TYPES))
      current, rels, facts = start, [], []
      for _ in range(n_rel):
        options = self.functional[self.world.type_of(current)]
        if not options:
          break
        spec = self.choice(options)
        nxt = self.world.related(current, spec.name)[0]
        facts.append(Fact(self.world.names[current], spec.name, self.world.names[nxt]))
        rels.append(spec)
        current = nxt
      if len(rels) == n_rel and (end_types is None or self.world.type_of(current) in end_types):
        return start, rels, facts, current
    raise RuntimeError(f"no chain of {n_rel} relations ending in {end_types}")

  def noun_phrase(self, start: int, rels) -> str:
    phrase = self.world.names[start]
    for spec in rels:
      phrase = self.choice(spec.noun_phrases).format(phrase)
    return phrase

  def operand(self, n_rel: int, attribute_filter: Callable[[schema.AttributeSpec], bool]):
    """(noun phrase, facts incl. the attribute fact, attribute spec, end id)."""
    types = [t for t in schema.ENTITY_TYPES if t in self.reachable(n_rel)
             and any(attribute_filter(a) for a in schema.attributes_of(t))]
    start, rels, facts, end = self.chain(n_rel, types)
    spec = self.choice([a for a in schema.attributes_of(self.world.type_of(end))
                        if attribute_filter(a)])
    value = self.world.attribute(end, spec.name)
    facts = [*facts, Fact(self.world.names[end], spec.name, value)]
    return self.noun_phrase(start, rels), facts, spec, end


def _capitalize(text: str) -> str:
  return text[0].upper() + text[1:]


def _chain_question(s: _Sampler, hops: int):
  attribute_end = hops == 1 and s.rng.random() < 0.6 or hops > 1 and s.rng.random() < 0.7
  if attribute_end:
    phrase, facts, spec, _ = s.operand(hops - 1, lambda a: True)
    text = s.choice(spec.questions).format(phrase)
    return text, facts[-1].object, facts, {"op": "chain"}
  start, rels, facts, end = s.chain(hops)
  noun = schema.TYPE_NOUNS[s.world.type_of(end)]
  text = s.choice(ENTITY_QUESTIONS).replace("{noun}", noun).format(s.noun_phrase(start, rels))
  return text, s.world.names[end], facts, {"op": "chain"}


def _split_hops(s: _Sampler, mix: Mixture) -> tuple[int, int]:
  """Relation counts of two operands with total facts (rels + 2) in the hop range."""
  total = int(s.rng.integers(max(2, mix.min_hops), max(2, mix.max_hops) + 1)) - 2
  first = int(s.rng.integers(0, total + 1))
  return first, total - first


def _difference_question(s: _Sampler, mix: Mixture):
  is_year = lambda a: a.kind == "year"  # noqa: E731
  n1, n2 = _split_hops(s, mix)
  for _ in range(100):
    p1, f1, a1, _ = s.operand(n1, is_year)
    p2, f2, a2, _ = s.operand(n2, is_year)
    y1, y2 = int(f1[-1].object), int(f2[-1].object)
    if y1 != y2:
      break
  if y1 > y2:
    (p1, f1, a1, y1), (p2, f2, a2, y2) = (p2, f2, a2, y2), (p1, f1, a1, y1)
  text = DIFFERENCE_QUESTION.format(a1.event_phrase.format(p1), a2.event_phrase.format(p2))
  return text, str(y2 - y1), [*f1, *f2], {"op": "difference", "split": len(f1)}


def _comparison_question(s: _Sampler, mix: Mixture):
  n1, n2 = _split_hops(s, mix)
  reachable = s.reachable(n2)

  def comparable(a: schema.AttributeSpec) -> bool:  # the second operand must be reachable
    return a.comparison is not None and bool(reachable & set(a.subject_types))

  for _ in range(200):
    p1, f1, spec, e1 = s.operand(n1, comparable)
    if s.world.type_of(e1) not in reachable:
      continue
    start, rels, facts, e2 = s.chain(n2, [s.world.type_of(e1)])
    v1, v2 = int(f1[-1].object), int(s.world.attribute(e2, spec.name))
    if e1 != e2 and v1 != v2:
      break
  f2 = [*facts, Fact(s.world.names[e2], spec.name, str(v2))]
  template, direction = spec.comparison
  first_wins = v1 > v2 if direction == "max" else v1 < v2
  text = template.format(p1, s.noun_phrase(start, rels))
  answer = s.world.names[e1 if first_wins else e2]
  return text, answer, [*f1, *f2], {"op": direction, "split": len(f1)}


def _count_question(s: _Sampler, mix: Mixture):
  if s.rng.random() < 0.5:
    n_rel = int(s.rng.integers(0, 2)) if mix.max_hops > 2 else 0
    start, rels, facts, river = s.chain(n_rel, ["river"])
    cities = [s.world.names[c] for c in s.world.related(river, "flows_through")]
    facts = [*facts, *(Fact(s.world.names[river], "flows_through", c) for c in cities)]
    text = s.choice(COUNT_LIST_QUESTIONS).format(s.noun_phrase(start, rels))
    return text, str(len(cities)), facts, {"op": "count"}
  spec = s.choice([a for a in schema.ATTRIBUTES if a.kind == "year"])
  etype = spec.subject_types[0]
  k = int(s.rng.integers(2, 5))
  pool = s.world.ids_by_type[etype]
  members = [int(m) for m in s.rng.choice(pool, size=min(k, len(pool)), replace=False)]
  years = [int(s.world.attribute(m, spec.name)) for m in members]
  threshold = int(s.rng.integers(min(years), max(years) + 2))
  names = [s.world.names[m] for m in members]
  text = COUNT_BEFORE_QUESTION.format(
    ", ".join(names[:-1]) + " and " + names[-1], spec.before_phrase, threshold)
  facts = [Fact(n, spec.name, str(y)) for n, y in zip(names, years, strict=False)]
  answer = str(sum(y < threshold for y in years))
  return text, answer, facts, {"op": "count_before", "threshold": threshold}


def _puzzle_question(s: _Sampler):
  template, expression = s.choice(PUZZLES)
  rng = s.rng
  day0 = datetime.date(1900, 1, 1) + datetime.timedelta(days=int(rng.integers(0, 40000)))
  day1 = day0 + datetime.timedelta(days=int(rng.integers(1, 3000)))
  given = [n.split()[0] for n in (s.world.names[s.entity("person")] for _ in range(2))]
  values = {
    "a": int(rng.integers(2, 60)), "b": int(rng.integers(2, 60)),
    "c": int(rng.integers(2, 30)), "e1": int(rng.integers(2, 9)),
    "e2": int(rng.integers(2, 9)), "d1": day0.isoformat(), "d2": day1.isoformat(),
    "p": given[0], "q": given[1] if given[1] != given[0] else given[1] + "a",
  }
  if "remainder" in template:
    values["a"] = int(rng.integers(50, 1000))
  expr = expression.format(**values)
  return template.format(**values), str(_puzzle_answer(expr)), [], {
    "op": "expression", "expression": expr}


def _puzzle_answer(expression: str) -> int:
  """The puzzle's answer, computed with the bounded evaluator (puzzles are integral)."""
  result = reason.evaluate(expression)
  if result.error is not None:
    raise ValueError(f"puzzle expression {expression!r}: {result.error}")
  return int(result.value)


def synthesize(world: World, n: int, *, stage: int | Mixture = 1, seed: int = 0,
               id_prefix: str = "q") -> list[Question]:
  """`n` distinct questions about `world` drawn from a stage mixture."""
  mix = STAGES[stage] if isinstance(stage, int) else stage
  rng = np.random.default_rng([world.seed, seed, 0xC0E5])
  s = _Sampler(world, rng)
  types = sorted(mix.weights)
  probs = np.array([mix.weights[t] for t in types], dtype=np.float64)
  probs /= probs.sum()
  out: list[Question] = []
  seen: set[str] = set()
  attempts = 0
  while len(out) < n:
    attempts += 1
    if attempts > 50 * n + 100:
      raise RuntimeError(f"could only draw {len(out)} distinct questions of {n}")
    qtype = types[int(rng.choice(len(types), p=probs))]
    if qtype == "lookup":
      text, answer, facts, meta = _chain_question(s, 1)
    elif qtype == "multihop":
      hops = int(rng.integers(max(2, mix.min_hops), max(2, mix.max_hops) + 1))
      text, answer, facts, meta = _chain_question(s, hops)
    elif qtype == "difference":
      text, answer, facts, meta = _difference_question(s, mix)
    elif qtype == "comparison":
      text, answer, facts, meta = _comparison_question(s, mix)
    elif qtype == "count":
      text, answer, facts, meta = _count_question(s, mix)
    elif qtype == "puzzle":
      text, answer, facts, meta = _puzzle_question(s)
    else:
      raise ValueError(f"unknown question type {qtype!r}; expected one of {QUESTION_TYPES}")
    text = _capitalize(text)
    if text in seen:
      continue
    seen.add(text)
    out.append(Question(f"{id_prefix}-{len(out):06d}", text, answer, tuple(facts), qtype,
                        count_hops(facts), meta))
  return out


def low_success_filter(questions: Sequence[Question], scorer: Callable[[Question], float],
                       threshold: float) -> list[Question]:
  """Keeps the questions whose success rate under `scorer` is at most `threshold`.

  The paper's stage-2 filter: `scorer(q)` is the untrained system's success rate on q
  (e.g. the mean correctness of K rollouts); questions it already solves are dropped.
  """
  if not 0.0 <= threshold <= 1.0:
    raise ValueError(f"threshold must be in [0, 1], got {threshold}")
  kept = []
  for q in questions:
    rate = float(scorer(q))
    if not 0.0 <= rate <= 1.0:
      raise ValueError(f"scorer returned {rate} for question {q.id}; expected [0, 1]")
    if rate <= threshold:
      kept.append(q)
  return kept
