"""Seeded symbolic worlds: a random graph over a draw from the shared name pool, and pages.

A world of N entities (`SIZES`) draws N names from `vocabulary.NAME_POOL` (a seeded
subset, in seeded order), gives each entity one object per relation (another entity,
uniformly at random) and a year. Page id = entity id. A page is compact (about 40
tokens): the title, the seven `property value` lines in a seeded order per page, up to
`MAX_INVERSE` inverse lines and one distractor line (see `language`).

Storage (N entities):
  names      list[str] [N]
  relations  {relation: int64 [N]} object ids
  years      int64 [N]
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from mgrpo_jax.tasks.pages import Page
from mgrpo_jax.tasks.symbolic import vocabulary as vocab
from mgrpo_jax.tasks.world import Fact

SIZES: dict[str, int] = {"tiny": 128, "small": 256}
MAX_INVERSE = 2
YEAR_RANGE = (1900, 2000)


def resolve_size(size: str) -> int:
  """Entity count of a symbolic world size; other sizes name the pool's limit."""
  if size not in SIZES:
    raise ValueError(f"world.size {size!r} has no symbolic rendering: expected one of "
                     f"{sorted(SIZES)} (the name pool holds {len(vocab.NAME_POOL)} symbols)")
  return SIZES[size]


@dataclasses.dataclass
class SymbolicWorld:
  """A generated symbolic graph (module docstring for the layout)."""
  seed: int
  names: list[str]
  relations: dict[str, np.ndarray]
  years: np.ndarray

  def __len__(self) -> int:
    return len(self.names)

  @functools.cached_property
  def name_to_id(self) -> dict[str, int]:
    return {n: i for i, n in enumerate(self.names)}

  def value(self, entity: int, prop: str) -> str:
    """The object name or year symbol of `prop` for `entity`."""
    if prop == vocab.YEAR:
      return str(int(self.years[entity]))
    return self.names[int(self.relations[prop][entity])]

  def values(self, entity: int, prop: str) -> list[str]:
    return [self.value(entity, prop)] if prop in vocab.PROPERTIES else []

  def facts_of(self, entity: int) -> list[Fact]:
    name = self.names[entity]
    return [Fact(name, p, self.value(entity, p)) for p in vocab.PROPERTIES]

  def holds(self, fact: Fact) -> bool:
    entity = self.name_to_id.get(fact.subject)
    return entity is not None and fact.object in self.values(entity, fact.relation)


def generate_world(size: str, seed: int) -> SymbolicWorld:
  """The symbolic world of `size` ("tiny" | "small") from `seed` (same seed, same world)."""
  n = resolve_size(size)
  rng = np.random.default_rng([seed, 0x5B0])
  chosen = rng.permutation(len(vocab.NAME_POOL))[:n]
  names = [vocab.NAME_POOL[i] for i in chosen.tolist()]
  relations = {}
  for relation in vocab.RELATIONS:
    offsets = rng.integers(1, n, size=n)  # never the entity itself
    relations[relation] = (np.arange(n) + offsets) % n
  years = rng.integers(*YEAR_RANGE, size=n)
  return SymbolicWorld(seed=seed, names=names, relations=relations, years=years)


def render_pages(world: SymbolicWorld) -> list[Page]:
  """Every page of `world` (page id = entity id); deterministic in the world's seed."""
  rng = np.random.default_rng([world.seed, 0xA6E5])
  n = len(world)
  orders = np.argsort(rng.random((n, len(vocab.PROPERTIES))), axis=1)
  distractors = (np.arange(n) + rng.integers(1, n, size=n)) % n
  inverse: dict[int, list[str]] = {}
  for relation in vocab.RELATIONS:
    for subject, obj in enumerate(world.relations[relation].tolist()):
      if len(inverse.setdefault(obj, [])) < MAX_INVERSE:
        inverse[obj].append(f"{world.names[subject]} {relation}")
  pages = []
  for entity, name in enumerate(world.names):
    lines = [name]
    for k in orders[entity].tolist():
      prop = vocab.PROPERTIES[k]
      lines.append(f"{prop} {world.value(entity, prop)}")
    lines += inverse.get(entity, [])
    lines.append(f"{vocab.SEE} {world.names[int(distractors[entity])]}")
    pages.append(Page(entity, name, "\n".join(lines)))
  return pages
