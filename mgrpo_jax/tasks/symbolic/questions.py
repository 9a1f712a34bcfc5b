"""Questions about a symbolic world, written in `language`'s grammar.

Types (`Question.type`, with the gold path of facts in answer order):
  lookup      1 hop: "E017 boss" or "E017 year"
  two_hop     2 hops, the last property possibly the year: "E017 boss home"
  three_hop   3 hops: "E017 boss rival year"
  list        one property of 2-6 entities: "E017 E044 E101 boss" -> "E090 E007 E231"
              (one delegation per entity: the number of S calls varies most per rollout)
  difference  "E017 year - E044 year": two look-ups, then the reason tool
  puzzle      "37 + 45", "91 - 23", "7 * 8": the reason tool, no look-up

The stage mixtures differ in weights and in lists: stage 2 asks more multi-hop and
difference questions, and lists. The types are named by hop count so that the per-type accuracy says whose
mistakes were fixed (`oracle`: M's fall on three-hop chains and puzzles, S's on look-ups
of two relations anywhere in a chain; differences carry no targeted mistake). Answers are symbols (a name, a year) or integers the reason tool computes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mgrpo_jax.tasks.questions import Mixture, Question, count_hops
from mgrpo_jax.tasks.symbolic import language
from mgrpo_jax.tasks.symbolic import vocabulary as vocab
from mgrpo_jax.tasks.symbolic.world import SymbolicWorld
from mgrpo_jax.tasks.world import Fact
from mgrpo_jax.tools import reason

STAGE1 = Mixture({"lookup": 0.3, "two_hop": 0.2, "three_hop": 0.2, "difference": 0.1,
                  "puzzle": 0.2}, 1, 3)
STAGE2 = Mixture({"lookup": 0.1, "two_hop": 0.2, "three_hop": 0.2, "difference": 0.15,
                  "puzzle": 0.15, "list": 0.2}, 2, 3)
HOPS = {"lookup": 1, "two_hop": 2, "three_hop": 3}
STAGES = {1: STAGE1, 2: STAGE2}
YEAR_END_SHARE = 0.3


def _chain(world: SymbolicWorld, rng: np.random.Generator, hops: int):
  """(text, answer, facts): a walk of `hops` properties from a random entity."""
  entity = int(rng.integers(len(world)))
  text = [world.names[entity]]
  facts = []
  for hop in range(hops):
    last = hop == hops - 1
    if last and rng.random() < YEAR_END_SHARE:
      prop = vocab.YEAR
    else:
      prop = vocab.RELATIONS[int(rng.integers(len(vocab.RELATIONS)))]
    value = world.value(entity, prop)
    facts.append(Fact(world.names[entity], prop, value))
    text.append(prop)
    if prop != vocab.YEAR:
      entity = int(world.relations[prop][entity])
  return " ".join(text), facts[-1].object, facts


def _property(rng: np.random.Generator) -> str:
  """A relation, or the year with probability YEAR_END_SHARE."""
  if rng.random() < YEAR_END_SHARE:
    return vocab.YEAR
  return vocab.RELATIONS[int(rng.integers(len(vocab.RELATIONS)))]


def _list(world: SymbolicWorld, rng: np.random.Generator):
  """(text, answer, facts): one property of 2-6 distinct entities, values in order."""
  size = int(rng.integers(language.MIN_LIST, language.MAX_LIST + 1))
  entities = rng.choice(len(world), size=size, replace=False).tolist()
  prop = _property(rng)
  facts = [Fact(world.names[e], prop, world.value(e, prop)) for e in entities]
  text = " ".join([*(world.names[e] for e in entities), prop])
  return text, " ".join(f.object for f in facts), facts


def _difference(world: SymbolicWorld, rng: np.random.Generator):
  first, second = rng.choice(len(world), size=2, replace=False).tolist()
  facts = [Fact(world.names[e], vocab.YEAR, world.value(e, vocab.YEAR)) for e in (first, second)]
  text = f"{world.names[first]} {vocab.YEAR} - {world.names[second]} {vocab.YEAR}"
  answer = str(int(world.years[first]) - int(world.years[second]))
  return text, answer, facts


def _puzzle(rng: np.random.Generator):
  op = vocab.OPERATORS[int(rng.integers(len(vocab.OPERATORS)))]
  if op == "+":
    a, b = rng.integers(2, 100, size=2).tolist()
  elif op == "-":
    a = int(rng.integers(10, 100))
    b = int(rng.integers(1, a))
  else:
    a, b = rng.integers(2, 13, size=2).tolist()
  expression = f"{a} {op} {b}"
  result = reason.evaluate(expression)
  if result.error is not None:
    raise ValueError(f"puzzle {expression!r}: {result.error}")
  return expression, str(int(result.value)), {"op": "expression", "expression": expression}


def synthesize(world: SymbolicWorld, n: int, *, stage: int | Mixture = 1, seed: int = 0,
               id_prefix: str = "q") -> list[Question]:
  """`n` distinct questions about `world` drawn from a stage mixture."""
  mix = STAGES[stage] if isinstance(stage, int) else stage
  rng = np.random.default_rng([world.seed, seed, 0x5C0E])
  types: Sequence[str] = sorted(mix.weights)
  probs = np.array([mix.weights[t] for t in types], dtype=np.float64)
  probs /= probs.sum()
  out: list[Question] = []
  seen: set[str] = set()
  for _ in range(50 * n + 100):
    if len(out) == n:
      return out
    qtype = types[int(rng.choice(len(types), p=probs))]
    meta = {"op": "chain"}
    if qtype in HOPS:
      text, answer, facts = _chain(world, rng, HOPS[qtype])
    elif qtype == "list":
      text, answer, facts = _list(world, rng)
      meta = {"op": "list"}
    elif qtype == "difference":
      text, answer, facts = _difference(world, rng)
      meta = {"op": "difference", "split": 1}
    elif qtype == "puzzle":
      (text, answer, meta), facts = _puzzle(rng), []
    else:
      raise ValueError(f"question type {qtype!r} has no symbolic form; expected one of "
                       f"{sorted(HOPS)}, list, difference, puzzle")
    if text in seen:
      continue
    seen.add(text)
    out.append(Question(f"{id_prefix}-{len(out):06d}", text, answer, tuple(facts), qtype,
                        count_hops(facts), meta))
  raise RuntimeError(f"could only draw {len(out)} distinct symbolic questions of {n}")
