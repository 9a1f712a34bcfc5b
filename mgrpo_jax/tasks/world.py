"""Seeded knowledge-graph generator for the offline deep-research world.

A `World` holds N fictional entities (ids 0..N-1) with typed relations and attributes
(see `schema`). Generation is vectorized per type (numpy draws over whole arrays), so
it stays linear in N: a few hundred entities for CI up to hundreds of thousands.

Storage (N entities):
  names        list[str] [N]
  types        int8 [N], index into `schema.ENTITY_TYPES`
  relations    {name: int64 [N]}, object id or -1 where the subject type lacks it
  multi        {name: (offsets int64 [N+1], targets int64 [E])}, CSR lists
  attributes   {name: int64 [N]}, value (category index for categories) or -1

Years are drawn so that they are plausible along relations (an organization is founded
20-60 years after its founder's birth, an artwork completed 18-70 years after its
creator's birth, ...).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import numpy as np

from mgrpo_jax.tasks import names as names_lib
from mgrpo_jax.tasks import schema

WORLD_SIZES: dict[str, int] = {
  "tiny": 400, "small": 2_000, "medium": 10_000, "large": 200_000,
}
MIN_PER_TYPE = 6


class Fact(NamedTuple):
  """One statement (subject name, relation or attribute id, object name or value)."""
  subject: str
  relation: str
  object: str


def resolve_size(world: str | int) -> int:
  """Page count of a named size ("tiny", ...) or a positive integer (also as text)."""
  if isinstance(world, str) and world in WORLD_SIZES:
    return WORLD_SIZES[world]
  try:
    n = int(world)
  except (TypeError, ValueError):
    raise ValueError(
      f"world size {world!r}: expected one of {sorted(WORLD_SIZES)} or an integer") from None
  if n < MIN_PER_TYPE * len(schema.ENTITY_TYPES):
    raise ValueError(f"world size {n} is below {MIN_PER_TYPE * len(schema.ENTITY_TYPES)}")
  return n


@dataclasses.dataclass
class World:
  """A generated knowledge graph (see the module docstring for array layouts)."""
  seed: int
  names: list[str]
  types: np.ndarray
  relations: dict[str, np.ndarray]
  multi: dict[str, tuple[np.ndarray, np.ndarray]]
  attributes: dict[str, np.ndarray]

  def __len__(self) -> int:
    return len(self.names)

  @functools.cached_property
  def name_to_id(self) -> dict[str, int]:
    return {n: i for i, n in enumerate(self.names)}

  @functools.cached_property
  def ids_by_type(self) -> dict[str, np.ndarray]:
    return {t: np.flatnonzero(self.types == k) for k, t in enumerate(schema.ENTITY_TYPES)}

  def type_of(self, entity: int) -> str:
    return schema.ENTITY_TYPES[int(self.types[entity])]

  def related(self, entity: int, relation: str) -> list[int]:
    """Object ids of `relation` for `entity` (empty if the type lacks the relation)."""
    if relation in self.multi:
      offsets, targets = self.multi[relation]
      return targets[offsets[entity]:offsets[entity + 1]].tolist()
    obj = int(self.relations[relation][entity])
    return [] if obj < 0 else [obj]

  def attribute(self, entity: int, attribute: str) -> str | None:
    """The attribute's value as page text ("1854", "teal"); None if absent."""
    value = int(self.attributes[attribute][entity])
    if value < 0:
      return None
    spec = schema.ATTRIBUTE_BY_NAME[attribute]
    return spec.categories[value] if spec.kind == "category" else str(value)

  def values(self, entity: int, prop: str) -> list[str]:
    """All object names / attribute values of a relation or attribute."""
    if prop in schema.RELATION_BY_NAME:
      return [self.names[o] for o in self.related(entity, prop)]
    value = self.attribute(entity, prop)
    return [] if value is None else [value]

  def facts_of(self, entity: int) -> list[Fact]:
    """Every forward fact whose subject is `entity`, in schema order."""
    etype = self.type_of(entity)
    name = self.names[entity]
    out = [Fact(name, r.name, o) for r in schema.relations_of(etype)
           for o in self.values(entity, r.name)]
    out += [Fact(name, a.name, v) for a in schema.attributes_of(etype)
            for v in self.values(entity, a.name)]
    return out

  def holds(self, fact: Fact) -> bool:
    """True iff `fact` is in the graph (exact names and value text)."""
    entity = self.name_to_id.get(fact.subject)
    if entity is None or fact.relation not in (
        *schema.RELATION_BY_NAME, *schema.ATTRIBUTE_BY_NAME):
      return False
    return fact.object in self.values(entity, fact.relation)


def _type_counts(n: int) -> dict[str, int]:
  counts = {t: max(MIN_PER_TYPE, int(n * s)) for t, s in schema.TYPE_SHARES.items()}
  counts["person"] += n - sum(counts.values())
  return counts


def _draw_names(gen: names_lib.NameGenerator, counts: dict[str, int]) -> dict[str, list[str]]:
  return {
    "person": gen.people(counts["person"]),
    "organization": gen.with_words(counts["organization"], names_lib.ORG_WORDS),
    "city": gen.cities(counts["city"]),
    "country": gen.countries(counts["country"]),
    "river": gen.rivers(counts["river"]),
    "species": gen.species(counts["species"]),
    "artwork": gen.with_words(counts["artwork"], names_lib.ARTWORK_WORDS),
    "event": gen.with_words(counts["event"], names_lib.EVENT_WORDS),
  }


def _draw_multi(rng: np.random.Generator, subjects: np.ndarray, pool: np.ndarray,
                n: int, max_len: int) -> tuple[np.ndarray, np.ndarray]:
  """CSR lists of 1..max_len distinct objects from `pool` for each subject."""
  lengths = np.zeros(n, dtype=np.int64)
  lengths[subjects] = rng.integers(1, min(max_len, len(pool)) + 1, size=len(subjects))
  draws = pool[rng.integers(0, len(pool), size=(len(subjects), max_len * 2))]
  offsets = np.concatenate([[0], np.cumsum(lengths)])
  targets = np.empty(offsets[-1], dtype=np.int64)
  for row, subject in enumerate(subjects.tolist()):
    want = int(lengths[subject])
    chosen = list(dict.fromkeys(draws[row].tolist()))[:want]
    if len(chosen) < want:  # too few distinct draws: pad deterministically
      chosen += [p for p in pool.tolist() if p not in chosen][: want - len(chosen)]
    targets[offsets[subject]:offsets[subject + 1]] = chosen
  return offsets, targets


def generate_world(world: str | int, seed: int, *, exclude_names=frozenset()) -> World:
  """Generates a world of `world` pages from `seed`.

  Args:
    world: a size name in `WORLD_SIZES` or a page count.
    seed: the world seed; the same seed (and exclude set) gives the same world.
    exclude_names: names this world must not use (pass the train world's names when
      generating the test world so the two share no entity name).
  """
  n = resolve_size(world)
  rng = np.random.default_rng([seed, 0x5EED])
  counts = _type_counts(n)
  gen = names_lib.NameGenerator(rng, exclude=exclude_names)
  by_type_names = _draw_names(gen, counts)

  # Entities are laid out in a seeded random order so ids carry no type information.
  order = rng.permutation(n)
  types = np.empty(n, dtype=np.int8)
  names: list[str] = [""] * n
  ids: dict[str, np.ndarray] = {}
  start = 0
  for k, etype in enumerate(schema.ENTITY_TYPES):
    slots = np.sort(order[start:start + counts[etype]])
    start += counts[etype]
    types[slots] = k
    ids[etype] = slots
    for slot, name in zip(slots.tolist(), by_type_names[etype], strict=False):
      names[slot] = name

  relations: dict[str, np.ndarray] = {}
  multi: dict[str, tuple[np.ndarray, np.ndarray]] = {}
  for spec in schema.RELATIONS:
    subjects, pool = ids[spec.subject_type], ids[spec.object_type]
    if spec.multi:
      multi[spec.name] = _draw_multi(rng, subjects, pool, n, max_len=4)
    else:
      column = np.full(n, -1, dtype=np.int64)
      column[subjects] = pool[rng.integers(0, len(pool), size=len(subjects))]
      relations[spec.name] = column

  attributes = _draw_attributes(rng, n, ids, relations)
  return World(seed=seed, names=names, types=types, relations=relations, multi=multi,
               attributes=attributes)


def _draw_attributes(rng, n, ids, relations) -> dict[str, np.ndarray]:
  """Attribute columns; years follow the relations (see the module docstring)."""
  attributes: dict[str, np.ndarray] = {}

  def column(name: str, subjects: np.ndarray, values: np.ndarray) -> None:
    col = attributes.setdefault(name, np.full(n, -1, dtype=np.int64))
    col[subjects] = values

  for spec in schema.ATTRIBUTES:
    for etype in spec.subject_types:
      subjects = ids[etype]
      if spec.kind == "category":
        column(spec.name, subjects, rng.integers(0, len(spec.categories), size=len(subjects)))
      elif spec.high > spec.low:
        # Log-uniform counts, uniform years.
        if spec.kind == "int":
          logs = rng.uniform(np.log(spec.low), np.log(spec.high), size=len(subjects))
          column(spec.name, subjects, np.exp(logs).astype(np.int64))
        else:
          column(spec.name, subjects, rng.integers(spec.low, spec.high, size=len(subjects)))

  births = attributes["birth_year"]
  derived = (  # attribute, subject type, relation to a person or organization, offsets
    ("founding_year", "organization", "founded_by", births, (20, 60)),
    ("completion_year", "artwork", "created_by", births, (18, 70)),
    ("discovery_year", "species", "discovered_by", births, (20, 60)),
  )
  for name, etype, relation, base, (lo, hi) in derived:
    subjects = ids[etype]
    offsets = rng.integers(lo, hi, len(subjects))
    column(name, subjects, base[relations[relation][subjects]] + offsets)
  events = ids["event"]
  organizer_years = attributes["founding_year"][relations["organized_by"][events]]
  column("event_year", events, organizer_years + rng.integers(1, 120, size=len(events)))
  return attributes
