"""Schema of the synthetic deep-research world: entity types, relations, attributes.

The world is the offline stand-in for the paper's knowledge-graph training data
(arXiv 2511.13288, Sec. 4.1: multi-hop questions synthesised from KG subgraphs). This
module holds only the *language* of the world (types, relation names, the phrases used
in questions, sub-tasks, reports and pages); it holds no world instance. The scripted
oracle may read this module (it knows the language, not the facts).

Relations are functional (one object per subject) except those marked `multi`; the
noun-phrase templates are all of the form "prefix {}" so a chain of hops composes into
one phrase ("the founder of the employer of Kamo Bereti").
"""

from __future__ import annotations

import dataclasses

ENTITY_TYPES: tuple[str, ...] = (
  "person", "organization", "city", "country", "river", "species", "artwork", "event",
)

# Fraction of the pages given to each type (sums to 1).
TYPE_SHARES: dict[str, float] = {
  "person": 0.28, "organization": 0.14, "city": 0.14, "country": 0.03,
  "river": 0.07, "species": 0.12, "artwork": 0.12, "event": 0.10,
}

# The article that introduces a page ("Velora Trust is an organization.").
TYPE_NOUNS: dict[str, str] = {
  "person": "person", "organization": "organization", "city": "city",
  "country": "country", "river": "river", "species": "species", "artwork": "artwork",
  "event": "event",
}


@dataclasses.dataclass(frozen=True)
class RelationSpec:
  """A typed relation `subject -> object` between two entities.

  Attributes:
    name: relation id used in facts, e.g. "founded_by".
    subject_type / object_type: entity types.
    label: the noun used in sub-tasks and reports ("the founder of X is Y").
    noun_phrases: "prefix {}" templates naming the object of a subject in a question.
    page_templates: sentences stating the fact on the subject's page; `{s}` is the
      subject name, `{o}` the object's link `[[Name]]`.
    inverse_templates: sentences mentioning the fact on the object's page.
    multi: True when a subject has several objects (a list on the page).
  """
  name: str
  subject_type: str
  object_type: str
  label: str
  noun_phrases: tuple[str, ...]
  page_templates: tuple[str, ...]
  inverse_templates: tuple[str, ...]
  multi: bool = False


@dataclasses.dataclass(frozen=True)
class AttributeSpec:
  """A literal attribute of an entity (a year, a count, a category).

  Attributes:
    name: attribute id used in facts, e.g. "birth_year".
    subject_types: entity types carrying it.
    kind: "year" | "int" | "category".
    label: noun used in sub-tasks and reports ("the birth year of X is 1854").
    questions: question templates with one `{}` for the entity noun phrase.
    page_templates: sentences stating it on the page (`{s}` subject, `{o}` value).
    event_phrase: for years, "the birth of {}" (used by difference questions).
    before_phrase: for years, "were born" (used by "how many ... before" counts).
    comparison: (question template with two `{}`, "max" | "min") or None.
    categories: vocabulary for kind "category".
    low / high: value range for numeric kinds (inclusive / exclusive).
  """
  name: str
  subject_types: tuple[str, ...]
  kind: str
  label: str
  questions: tuple[str, ...]
  page_templates: tuple[str, ...]
  event_phrase: str | None = None
  before_phrase: str | None = None
  comparison: tuple[str, str] | None = None
  categories: tuple[str, ...] = ()
  low: int = 0
  high: int = 0


RELATIONS: tuple[RelationSpec, ...] = (
  RelationSpec(
    "born_in", "person", "city", "birthplace",
    ("the birthplace of {}", "the home town of {}"),
    ("{s} was born in {o}.", "{s} is a native of {o}.", "The birthplace of {s} is {o}."),
    ("{o} is the birthplace of {s}.",)),
  RelationSpec(
    "works_for", "person", "organization", "employer",
    ("the employer of {}", "the organization that employs {}"),
    ("{s} works for {o}.", "{s} is employed by {o}.", "The employer of {s} is {o}."),
    ("{o} employs {s}.",)),
  RelationSpec(
    "founded_by", "organization", "person", "founder",
    ("the founder of {}", "the person who founded {}"),
    ("{s} was founded by {o}.", "The founder of {s} was {o}.", "{o} founded {s}."),
    ("{o} is remembered as a founder of {s}.",)),
  RelationSpec(
    "headquartered_in", "organization", "city", "headquarters",
    ("the headquarters city of {}", "the city that hosts the head office of {}"),
    ("{s} is headquartered in {o}.", "The head office of {s} stands in {o}.",
     "{s} has its headquarters in {o}."),
    ("{o} hosts the head office of {s}.",)),
  RelationSpec(
    "located_in", "city", "country", "country",
    ("the country of {}", "the country that contains {}"),
    ("{s} lies in {o}.", "{s} is a city in {o}.", "{s} belongs to the country of {o}."),
    ("{o} contains the city of {s}.",)),
  RelationSpec(
    "rises_in", "river", "city", "source city",
    ("the source city of {}", "the city at the source of {}"),
    ("{s} rises in {o}.", "The source of {s} lies in {o}.", "{s} has its source in {o}."),
    ("{o} is the source city of {s}.",)),
  RelationSpec(
    "flows_through", "river", "city", "cities along",
    (),
    ("{s} flows through {o}.", "Along its course {s} passes {o}."),
    ("{o} lies on the banks of {s}.",), multi=True),
  RelationSpec(
    "discovered_by", "species", "person", "discoverer",
    ("the discoverer of {}", "the person who discovered {}"),
    ("{s} was discovered by {o}.", "The first description of {s} was made by {o}.",
     "{o} discovered {s}."),
    ("{o} is credited with describing {s}.",)),
  RelationSpec(
    "habitat", "species", "river", "habitat river",
    ("the habitat river of {}", "the river that is home to {}"),
    ("{s} lives in {o}.", "The habitat of {s} is {o}.", "{s} is found only in {o}."),
    ("{o} is home to {s}.",)),
  RelationSpec(
    "created_by", "artwork", "person", "creator",
    ("the creator of {}", "the artist who made {}"),
    ("{s} was created by {o}.", "{o} made {s}.", "The creator of {s} is {o}."),
    ("{o} is known for the work {s}.",)),
  RelationSpec(
    "held_by", "artwork", "organization", "keeper",
    ("the keeper of {}", "the organization that keeps {}"),
    ("{s} is kept by {o}.", "{s} is held in the collection of {o}.",
     "The keeper of {s} is {o}."),
    ("{o} keeps {s} in its collection.",)),
  RelationSpec(
    "held_in", "event", "city", "host city",
    ("the host city of {}", "the city that hosted {}"),
    ("{s} was held in {o}.", "{o} hosted {s}.", "The host city of {s} was {o}."),
    ("{o} was the venue of {s}.",)),
  RelationSpec(
    "organized_by", "event", "organization", "organizer",
    ("the organizer of {}", "the organization that organized {}"),
    ("{s} was organized by {o}.", "{o} organized {s}.", "The organizer of {s} was {o}."),
    ("{o} staged {s}.",)),
)

ATTRIBUTES: tuple[AttributeSpec, ...] = (
  AttributeSpec(
    "birth_year", ("person",), "year", "birth year",
    ("In what year was {} born?", "When was {} born?"),
    ("{s} was born in the year {o}.", "The birth of {s} is recorded in {o}.",
     "{s} came into the world in {o}."),
    event_phrase="the birth of {}", before_phrase="were born",
    comparison=("Who was born earlier, {} or {}?", "min"),
    low=1700, high=1960),
  AttributeSpec(
    "occupation", ("person",), "category", "occupation",
    ("What is the occupation of {}?", "What did {} do for a living?"),
    ("{s} worked as a {o}.", "By profession {s} was a {o}.", "The occupation of {s} was {o}."),
    categories=("painter", "engineer", "botanist", "merchant", "sculptor", "physician",
                "cartographer", "poet", "astronomer", "architect", "weaver", "glassblower")),
  AttributeSpec(
    "founding_year", ("organization",), "year", "founding year",
    ("In what year was {} founded?", "When was {} established?"),
    ("{s} was established in {o}.", "The founding of {s} took place in {o}.",
     "{s} dates its founding to {o}."),
    event_phrase="the founding of {}", before_phrase="were founded",
    comparison=("Which was founded earlier, {} or {}?", "min")),
  AttributeSpec(
    "employees", ("organization",), "int", "staff count",
    ("How many employees does {} have?", "What is the staff count of {}?"),
    ("{s} has {o} employees.", "The staff of {s} numbers {o}.", "{s} employs {o} people."),
    comparison=("Which has more employees, {} or {}?", "max"), low=12, high=90000),
  AttributeSpec(
    "settled_year", ("city",), "year", "settlement year",
    ("In what year was {} settled?", "When was {} first settled?"),
    ("{s} was first settled in {o}.", "The settlement of {s} dates from {o}.",
     "Settlers arrived at {s} in {o}."),
    event_phrase="the settlement of {}", before_phrase="were settled",
    comparison=("Which was settled earlier, {} or {}?", "min"), low=700, high=1900),
  AttributeSpec(
    "population", ("city", "country"), "int", "population",
    ("What is the population of {}?", "How many people live in {}?"),
    ("{s} has a population of {o}.", "About {o} people live in {s}.",
     "The population of {s} is {o}."),
    comparison=("Which has the larger population, {} or {}?", "max"),
    low=900, high=9_000_000),
  AttributeSpec(
    "area_km2", ("country",), "int", "area",
    ("What is the area of {} in square kilometres?",),
    ("{s} covers {o} square kilometres.", "The area of {s} is {o} square kilometres."),
    comparison=("Which is larger in area, {} or {}?", "max"), low=800, high=900_000),
  AttributeSpec(
    "length_km", ("river",), "int", "length",
    ("How long is {} in kilometres?", "What is the length of {} in kilometres?"),
    ("{s} is {o} kilometres long.", "The length of {s} is {o} kilometres.",
     "{s} runs for {o} kilometres."),
    comparison=("Which is longer, {} or {}?", "max"), low=40, high=4800),
  AttributeSpec(
    "discovery_year", ("species",), "year", "discovery year",
    ("In what year was {} discovered?", "When was {} first described?"),
    ("{s} was first described in {o}.", "The discovery of {s} dates from {o}.",
     "Naturalists recorded {s} in {o}."),
    event_phrase="the discovery of {}", before_phrase="were discovered",
    comparison=("Which was discovered earlier, {} or {}?", "min")),
  AttributeSpec(
    "colour", ("species",), "category", "colour",
    ("What colour is {}?", "What is the colour of {}?"),
    ("{s} is {o} in colour.", "The colour of {s} is {o}.", "Most specimens of {s} are {o}."),
    categories=("amber", "crimson", "teal", "ochre", "violet", "silver", "jade", "indigo",
                "scarlet", "ivory", "copper", "slate")),
  AttributeSpec(
    "completion_year", ("artwork",), "year", "completion year",
    ("In what year was {} completed?", "When was {} finished?"),
    ("{s} was completed in {o}.", "Work on {s} was finished in {o}.",
     "The completion of {s} came in {o}."),
    event_phrase="the completion of {}", before_phrase="were completed",
    comparison=("Which was completed earlier, {} or {}?", "min")),
  AttributeSpec(
    "medium", ("artwork",), "category", "medium",
    ("What medium is {} made in?", "What is the medium of {}?"),
    ("{s} is made in {o}.", "The medium of {s} is {o}.", "{s} was executed in {o}."),
    categories=("oil", "bronze", "marble", "ink", "tapestry", "fresco", "glass",
                "watercolour", "charcoal", "enamel")),
  AttributeSpec(
    "event_year", ("event",), "year", "year",
    ("In what year did {} take place?", "When did {} happen?"),
    ("{s} took place in {o}.", "{s} happened in {o}.", "The year of {s} was {o}."),
    event_phrase="the staging of {}", before_phrase="took place",
    comparison=("Which took place earlier, {} or {}?", "min")),
)

RELATION_BY_NAME: dict[str, RelationSpec] = {r.name: r for r in RELATIONS}
ATTRIBUTE_BY_NAME: dict[str, AttributeSpec] = {a.name: a for a in ATTRIBUTES}
# Labels are unique across relations and attributes: a label names one property.
PROPERTY_BY_LABEL: dict[str, str] = {
  **{r.label: r.name for r in RELATIONS}, **{a.label: a.name for a in ATTRIBUTES},
}
assert len(PROPERTY_BY_LABEL) == len(RELATIONS) + len(ATTRIBUTES), "labels must be unique"


def relations_of(entity_type: str, *, functional_only: bool = False) -> list[RelationSpec]:
  """Relations whose subject is `entity_type`, in schema order."""
  return [r for r in RELATIONS
          if r.subject_type == entity_type and not (functional_only and r.multi)]


def attributes_of(entity_type: str) -> list[AttributeSpec]:
  """Attributes carried by `entity_type`, in schema order."""
  return [a for a in ATTRIBUTES if entity_type in a.subject_types]


def property_label(name: str) -> str:
  """The label of a relation or attribute id."""
  if name in RELATION_BY_NAME:
    return RELATION_BY_NAME[name].label
  if name in ATTRIBUTE_BY_NAME:
    return ATTRIBUTE_BY_NAME[name].label
  raise KeyError(f"unknown relation or attribute {name!r}")
