"""The training worlds the warm start's demonstrations come from, with their search tools.

A model trained from scratch on demonstrations about one 400-page world can lower its
loss on entity names by memorizing the few hundred names it keeps seeing, and then
invents training-world names on the test world instead of copying the unseen ones
from its context (docs/RESULTS.md). Demonstrations spread over many worlds make almost
every name new, so copying is the only way to predict it.

World 0 is the run's own training world (its built index, the world RL trains on);
worlds 1..W-1 are generated from seeds derived from `world.seed` with none of the test
world's names, so the held-out split stays unseen, and each gets its own SQLite FTS5
index under `<folder>/worlds/`. `warm_start.num_questions` questions of the configured
stage are split evenly over the W = `warm_start.num_worlds` worlds. Their tools search
the worlds' indexes whatever `tools.backend` says: the scripted oracles read these pages.
"""

from __future__ import annotations

import dataclasses
import pathlib

from mgrpo_jax.tasks import questions as questions_lib
from mgrpo_jax.tasks.train_worlds import derived_world_seed, ensure_world_index, question_counts
from mgrpo_jax.tasks.world_setup import WorldSetup, question_mixture
from mgrpo_jax.tools import ToolRegistry
from mgrpo_jax.training import agent_setup


@dataclasses.dataclass(frozen=True)
class DemonstrationWorld:
  """One world's share of the demonstrated questions and the tools that answer them."""
  questions: list[questions_lib.Question]
  registry: ToolRegistry


def demonstration_worlds(config, world_path: pathlib.Path, folder: pathlib.Path, *,
                         num_questions: int | None = None) -> list[DemonstrationWorld]:
  """The W worlds of the module docstring, their questions drawn with their own seeds.

  Args:
    config: the run's config (`world.*`, `warm_start.*`, `tools.*`, `experiment.seed`).
    world_path: the run's built world (`tasks.world_data.ensure_world`): world 0 and its
      index.
    folder: where the other worlds' indexes are written (`<folder>/worlds/`).
    num_questions: questions over all worlds (default `warm_start.num_questions`). Each
      world's questions are one seeded draw, so a larger count keeps the smaller
      count's questions of every world and adds to them.
  """
  world, ws = WorldSetup.from_config(config), config.warm_start
  rendering = world.rendering
  train_world, test_world = world.split_worlds()
  mixture = question_mixture(world)
  total = int(ws.num_questions) if num_questions is None else num_questions
  counts = question_counts(total, int(ws.num_worlds),
                           total_key="warm_start.num_questions",
                           worlds_key="warm_start.num_worlds")
  run_seed = int(config.experiment.seed)
  out = []
  for index, count in enumerate(counts):
    if index == 0:
      source, registry = train_world, agent_setup.tool_registry(world_path, config, offline=True)
    else:
      source = rendering.generate(world.size,
                                  derived_world_seed(world, "demonstration_world", index),
                                  frozenset(test_world.names))
      index_path = folder / "worlds" / f"world_{index}.sqlite"
      ensure_world_index(rendering, source, index_path)
      registry = agent_setup.index_tool_registry(index_path, config, offline=True)
    names = ("demonstration_questions",) + ((index,) if index else ())
    seed = agent_setup.derive_seed(run_seed, *names) % 2**16
    prefix = f"demo-w{index}" if index else "demo"
    questions = rendering.synthesize(source, count, stage=mixture,
                                     seed=seed, id_prefix=prefix)
    out.append(DemonstrationWorld(questions, registry))
  return out
