"""One encyclopedia page per entity of a `World`.

A page is the title, an introduction, one sentence per forward fact (templates from
`schema`, chosen per page), up to `MAX_INVERSE` sentences about facts pointing at the
entity, and a "not to be confused with" line naming up to two entities that share a
name word (distractors for search). Links are written `[[Page Title]]`.

Numbers of kind "int" are written with thousands separators ("1,204,330"); years are
plain. All template choices come from one seeded draw `[N, slots]`, so rendering is
deterministic and linear in N.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from mgrpo_jax.tasks import schema
from mgrpo_jax.tasks.world import World

MAX_INVERSE = 3
MAX_CONFUSABLE = 2
_INTROS = ("{s} is {a} {noun}.", "This article is about the {noun} {s}.",
           "{s} is {a} {noun} described in this encyclopedia.")
_CONFUSABLE = ("Not to be confused with {links}.", "See also the similarly named {links}.")
_SLOTS = 32


@dataclasses.dataclass(frozen=True)
class Page:
  page_id: int
  title: str
  text: str


def link(name: str) -> str:
  return f"[[{name}]]"


def join_links(names: list[str]) -> str:
  """"[[A]]", "[[A]] and [[B]]", "[[A]], [[B]] and [[C]]"."""
  links = [link(n) for n in names]
  return links[0] if len(links) == 1 else ", ".join(links[:-1]) + " and " + links[-1]


def format_value(attribute: str, value: str) -> str:
  """Page text of an attribute value (thousands separators for counts)."""
  if schema.ATTRIBUTE_BY_NAME[attribute].kind == "int":
    return f"{int(value):,}"
  return value


def _name_key(name: str, etype: str) -> str:
  words = name.split()
  return words[-1] if etype in ("person", "city") else words[0]


def _confusables(world: World) -> dict[int, list[int]]:
  groups: dict[tuple[int, str], list[int]] = collections.defaultdict(list)
  for entity, name in enumerate(world.names):
    key = _name_key(name, world.type_of(entity))
    groups[(int(world.types[entity]), key)].append(entity)
  out: dict[int, list[int]] = {}
  for members in groups.values():
    if len(members) > 1:
      for i, entity in enumerate(members):
        out[entity] = [members[(i + j) % len(members)] for j in range(1, MAX_CONFUSABLE + 1)
                       if j < len(members)]
  return out


def _inverse_mentions(world: World) -> dict[int, list[tuple[str, int]]]:
  """object id -> [(relation, subject id)], at most MAX_INVERSE, in schema order."""
  out: dict[int, list[tuple[str, int]]] = collections.defaultdict(list)
  for spec in schema.RELATIONS:
    if spec.multi:
      offsets, targets = world.multi[spec.name]
      subjects = np.repeat(np.arange(len(world)), np.diff(offsets))
      pairs = zip(targets.tolist(), subjects.tolist(), strict=False)
    else:
      column = world.relations[spec.name]
      subjects = np.flatnonzero(column >= 0)
      pairs = zip(column[subjects].tolist(), subjects.tolist(), strict=False)
    for obj, subject in pairs:
      if len(out[obj]) < MAX_INVERSE:
        out[obj].append((spec.name, subject))
  return out


def _fact_sentences(world: World, entity: int, choice: np.ndarray) -> list[str]:
  etype = world.type_of(entity)
  name = world.names[entity]
  sentences = []
  slot = 1
  for spec in schema.relations_of(etype):
    objects = [world.names[o] for o in world.related(entity, spec.name)]
    template = spec.page_templates[choice[slot] % len(spec.page_templates)]
    sentences.append(template.format(s=name, o=join_links(objects)))
    slot += 1
  for spec in schema.attributes_of(etype):
    value = world.attribute(entity, spec.name)
    template = spec.page_templates[choice[slot] % len(spec.page_templates)]
    sentences.append(template.format(s=name, o=format_value(spec.name, value)))
    slot += 1
  shift = int(choice[0]) % len(sentences)
  return sentences[shift:] + sentences[:shift]


def render_pages(world: World) -> list[Page]:
  """All pages of `world`, page id = entity id."""
  rng = np.random.default_rng([world.seed, 0xA6E])
  choices = rng.integers(0, 1 << 30, size=(len(world), _SLOTS))
  inverse = _inverse_mentions(world)
  confusable = _confusables(world)
  pages = []
  for entity, name in enumerate(world.names):
    choice = choices[entity]
    etype = world.type_of(entity)
    noun = schema.TYPE_NOUNS[etype]
    intro = _INTROS[choice[-1] % len(_INTROS)].format(
      s=name, noun=noun, a="an" if noun[0] in "aeiou" else "a")
    body = [intro, *_fact_sentences(world, entity, choice)]
    for k, (relation, subject) in enumerate(inverse.get(entity, [])):
      templates = schema.RELATION_BY_NAME[relation].inverse_templates
      body.append(templates[choice[-2 - k] % len(templates)].format(
        s=link(world.names[subject]), o=name))
    if entity in confusable:
      template = _CONFUSABLE[choice[-6] % len(_CONFUSABLE)]
      body.append(template.format(links=join_links([world.names[c] for c in confusable[entity]])))
    pages.append(Page(entity, name, name + "\n\n" + " ".join(body)))
  return pages
