"""World generation for one build: train/validation world, test world, pages, questions.

`WorldSpec` fixes everything a build depends on; `make_split_worlds` generates the two
worlds (the test world from `test_seed`, excluding every train-world name, so the
splits share no entity), and `split_questions` draws the questions of each split.
Train and validation come from the train world (stage 1 and stage 2 mixtures, disjoint
texts); test comes from the test world.
"""

from __future__ import annotations

import dataclasses
import functools

from mgrpo_jax.tasks import questions as questions_lib
from mgrpo_jax.tasks.world import World, generate_world

SPLITS = ("train", "validation", "test")


@dataclasses.dataclass(frozen=True)
class WorldSpec:
  """world: size name or page count; counts are per stage (stage 1 and stage 2)."""
  world: str = "tiny"
  seed: int = 0
  test_seed: int = 1
  num_train: int = 400
  num_validation: int = 50
  num_test: int = 100

  def __post_init__(self):
    if self.seed == self.test_seed:
      raise ValueError(f"test_seed must differ from seed (both {self.seed})")


@functools.lru_cache(maxsize=4)
def make_split_worlds(world: str, seed: int, test_seed: int) -> tuple[World, World]:
  """(train world, test world); the test world uses none of the train world's names."""
  train = generate_world(world, seed)
  test = generate_world(world, test_seed, exclude_names=frozenset(train.names))
  return train, test


def split_questions(spec: WorldSpec, split: str) -> list[tuple[int, questions_lib.Question]]:
  """[(stage, question)] of one split, deterministic in `spec`."""
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
  train_world, test_world = make_split_worlds(spec.world, spec.seed, spec.test_seed)
  out = []
  for stage in (1, 2):
    if split == "test":
      qs = questions_lib.synthesize(test_world, spec.num_test, stage=stage, seed=stage,
                                    id_prefix=f"test-s{stage}")
    else:
      # One draw for train+validation so their texts are disjoint.
      qs = questions_lib.synthesize(train_world, spec.num_train + spec.num_validation,
                                    stage=stage, seed=stage, id_prefix=f"trainval-s{stage}")
      qs = qs[:spec.num_train] if split == "train" else qs[spec.num_train:]
    out.extend((stage, q) for q in qs)
  return out
