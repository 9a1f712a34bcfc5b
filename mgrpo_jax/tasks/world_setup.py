"""The run's world resolved once from its config: `WorldSetup.from_config(config)`.

What builds and reads the world's datasets (`world_data`), the generated training worlds
(`train_worlds`), the world tokenizer, the warm start and the evaluation read this typed
object, never the `world` ConfigDict section or the whole config for its keys. Two
settings matter only to some uses and are checked where they are used, each error naming
its key: the question types (`question_mixture`, `world.question_types`) and a user
file's field names (`source_fields`, `world.source_fields`).

`NoiseSettings` (`warm_start.*`) are the systematic mistakes of the world's scripted
agents, which `noisy_oracles` builds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mgrpo_jax.tasks import loaders
from mgrpo_jax.tasks.oracle.noise import parse_mistake_rates
from mgrpo_jax.tasks.questions import Mixture
from mgrpo_jax.tasks.renderings import Rendering, get_rendering

STAGES = {"stage1": 1, "stage2": 2}
# Field names of a user's JSONL or CSV questions file when `world.source_fields` is empty.
DEFAULT_FIELDS = {"id": "id", "question": "question", "answer": "answer"}


@dataclasses.dataclass(frozen=True)
class WorldSetup:
  """The run's world, resolved once (module docstring).

  Attributes:
    size: the generated world's size ("tiny", ...; `world.size`).
    seed: the training world's seed (train and validation splits).
    test_seed: the held-out test world's seed.
    rendering: how the world is written (`world.render`; its `name` is the setting).
    stage: the question mixture, "stage1" or "stage2".
    question_types: the types of the stage to keep as set, comma-separated ("": every
      type; parsed by `question_types`, checked by `question_mixture`).
    question_ids: a JSON file of the training questions RL keeps ("": all of them).
    source: where the questions come from: "generated", or a user's "jsonl", "csv",
      "gaia" or "webwalker" file.
    source_path: the user's questions file (training questions).
    test_source_path: the user's held-out questions file ("": `source_path`'s).
    source_fields: the user's file's field names as set, "id=...,question=...,..."
      ("": the defaults; parsed and checked by `source_fields`).
    tokenizer_vocab_size: ids of the SentencePiece tokenizer trained on the world.
    train_worlds: worlds RL's training questions are spread over (`train_worlds`).
  """

  size: str
  seed: int
  test_seed: int
  rendering: Rendering
  stage: str
  question_types: str
  question_ids: str
  source: str
  source_path: str
  test_source_path: str
  source_fields: str
  tokenizer_vocab_size: int
  train_worlds: int

  @classmethod
  def from_config(cls, config: Any) -> WorldSetup:
    """The world of the run's `config` (its `world` section)."""
    world = config.world
    return cls(size=str(world.size), seed=int(world.seed), test_seed=int(world.test_seed),
               rendering=get_rendering(str(world.render)), stage=str(world.stage),
               question_types=str(world.question_types),
               question_ids=str(world.question_ids), source=str(world.source),
               source_path=str(world.source_path),
               test_source_path=str(world.test_source_path),
               source_fields=str(world.source_fields),
               tokenizer_vocab_size=int(world.tokenizer_vocab_size),
               train_worlds=int(world.train_worlds))

  def split_worlds(self) -> tuple[Any, Any]:
    """(training world, test world) of the generated world (`Rendering.split_worlds`)."""
    return self.rendering.split_worlds(self.size, self.seed, self.test_seed)


def question_types(world: WorldSetup) -> frozenset[str]:
  """`world.question_types` as a set of type names (empty: every type of the stage)."""
  return frozenset(t.strip() for t in world.question_types.split(",") if t.strip())


def question_mixture(world: WorldSetup) -> Mixture:
  """The world's stage mixture, restricted to `world.question_types` if set.

  Raises:
    ValueError: naming `world.question_types` when a type is not in the stage's mixture.
  """
  mix = world.rendering.stages[STAGES[world.stage]]
  types = question_types(world)
  if not types:
    return mix
  try:
    return mix.restricted(sorted(types))
  except ValueError as e:
    raise ValueError(f"world.question_types={world.question_types!r}: {e} "
                     f"({world.rendering.name} world, {world.stage})") from None


def source_fields(world: WorldSetup) -> dict[str, str]:
  """The field map of `world.source_fields` ('id=...,question=...,answer=...')."""
  text = world.source_fields.strip()
  if not text:
    return dict(loaders.GAIA_FIELDS if world.source == "gaia" else DEFAULT_FIELDS)
  fields = {}
  for item in text.split(","):
    key, sep, name = (part.strip() for part in item.partition("="))
    if not sep or not key or not name:
      raise ValueError(f"world.source_fields: {item.strip()!r} is not of the form key=name "
                       f"(keys: {loaders.REQUIRED + loaders.OPTIONAL})")
    fields[key] = name
  try:
    loaders.check_field_map(fields)
  except ValueError as e:
    raise ValueError(f"world.source_fields: {e}") from None
  return fields


@dataclasses.dataclass(frozen=True)
class NoiseSettings:
  """The scripted agents' systematic mistakes, resolved once (`warm_start.*`).

  Attributes:
    main_rate: M's rate of every one of its mistakes (`warm_start.main_noise_rate`).
    sub_rate: S's rate of every one of its mistakes (`warm_start.sub_noise_rate`).
    mistake_rates: single mistakes' rates by name as set, "wrong_relation=0.5,..."
      (`warm_start.mistake_rates`; checked against the rendering by `noisy_oracles`).
  """

  main_rate: float
  sub_rate: float
  mistake_rates: str

  @classmethod
  def from_config(cls, config: Any) -> NoiseSettings:
    """The noise of the run's `config` (its `warm_start` section)."""
    ws = config.warm_start
    return cls(main_rate=float(ws.main_noise_rate), sub_rate=float(ws.sub_noise_rate),
               mistake_rates=str(ws.mistake_rates))


def noisy_oracles(world: WorldSetup, noise: NoiseSettings, seed: int) -> tuple[Any, Any]:
  """(M, S): the world's scripted agents with the systematic mistakes of `noise`.

  `noise.main_rate` and `noise.sub_rate` are each agent's rate of every mistake;
  `noise.mistake_rates` overrides single mistakes by name, checked against the
  rendering's mistakes (a ValueError naming `warm_start.mistake_rates`). `seed` keys
  which tasks get each mistake.
  """
  rendering = world.rendering
  rates = parse_mistake_rates(noise.mistake_rates,
                              rendering.main_mistakes + rendering.sub_mistakes)

  def own(names):
    return tuple((name, rate) for name, rate in rates.items() if name in names)

  return (rendering.main_oracle(noise.main_rate, seed, own(rendering.main_mistakes)),
          rendering.sub_oracle(noise.sub_rate, seed, own(rendering.sub_mistakes)))
