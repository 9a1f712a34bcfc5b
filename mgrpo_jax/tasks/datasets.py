"""World generation for one build: train/validation world, test world, pages, questions.

`WorldSpec` fixes everything a build depends on, the rendering included
(`renderings`); `make_split_worlds` generates the two worlds (the test world from
`test_seed`: in the natural rendering it excludes every train-world name, so the splits
share no entity; in the symbolic one both draw from the shared name pool and differ in
their graphs), and `split_questions` draws the questions of each split.
Train and validation come from the train world (stage 1 and stage 2 mixtures, disjoint
texts); test comes from the test world.
"""

from __future__ import annotations

import dataclasses

from mgrpo_jax.tasks import questions as questions_lib
from mgrpo_jax.tasks.renderings import get_rendering

SPLITS = ("train", "validation", "test")


@dataclasses.dataclass(frozen=True)
class WorldSpec:
  """world: size name or page count; counts are per stage (stage 1 and stage 2);
  render: "natural" or "symbolic" (`renderings`)."""
  world: str = "tiny"
  seed: int = 0
  test_seed: int = 1
  num_train: int = 400
  num_validation: int = 50
  num_test: int = 100
  render: str = "natural"

  def __post_init__(self):
    if self.seed == self.test_seed:
      raise ValueError(f"test_seed must differ from seed (both {self.seed})")
    get_rendering(self.render)


def make_split_worlds(world: str, seed: int, test_seed: int, render: str = "natural"):
  """(train world, test world) of the rendering (module docstring)."""
  return get_rendering(render).split_worlds(world, seed, test_seed)


def split_questions(spec: WorldSpec, split: str) -> list[tuple[int, questions_lib.Question]]:
  """[(stage, question)] of one split, deterministic in `spec`."""
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
  train_world, test_world = make_split_worlds(spec.world, spec.seed, spec.test_seed,
                                              spec.render)
  synthesize = get_rendering(spec.render).synthesize
  out = []
  for stage in (1, 2):
    if split == "test":
      qs = synthesize(test_world, spec.num_test, stage=stage, seed=stage,
                                    id_prefix=f"test-s{stage}")
    else:
      # One draw for train+validation so their texts are disjoint.
      qs = synthesize(train_world, spec.num_train + spec.num_validation,
                                    stage=stage, seed=stage, id_prefix=f"trainval-s{stage}")
      qs = qs[:spec.num_train] if split == "train" else qs[spec.num_train:]
    out.extend((stage, q) for q in qs)
  return out
