"""RL's training questions and their tools, over one world or many (`world.train_worlds`).

On one training world a small model can raise its training reward by remembering that
world's facts instead of reading the pages, which does not carry to the unseen test
world: the demo's agents after RL answered 0.89 of the training world's questions
greedily and 0.76 of the test world's, the gap in look-ups and three-hop chains
(docs/RESULTS.md). With W = `world.train_worlds` > 1 the training questions are spread
over W worlds, so each world's facts come up a few times at most and reading is what
pays. (On the demo, 400 worlds gave the same held-out accuracy after 40 steps and a
little more after 80: memorizing was not what held it back there.)

World 0 is the run's built training world (its train split and index, as with W = 1);
worlds 1..W-1 are generated from seeds derived from `world.seed` (never the test
world's seed, and for renderings with their own names none of the test world's names),
each with its own SQLite FTS5 index under `<world_path>/train_worlds/`, built once under
a file lock (both slices build the same set). The built split's question count N is
split evenly over the W worlds: world 0 keeps the first share of its questions, world w
draws its share from the stage mixture with its own seed, ids `train-w<w>-...`. Tool
calls and S's r_expert go to the world of the question they serve
(`TaskRoutedRegistry`, `TaskRoutedJudge`). `world.question_ids` keeps some of the
training questions (the two-stage curriculum's selection).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from mgrpo_jax.tasks.questions import Question
from mgrpo_jax.tasks.world_data import load_questions
from mgrpo_jax.tasks.world_setup import WorldSetup, question_mixture
from mgrpo_jax.tools import TaskRoutedRegistry, ToolRegistry, world_index
from mgrpo_jax.tools.search import build_index
from mgrpo_jax.utils.file_lock import file_lock
from mgrpo_jax.utils.seeds import derive_seed


def derived_world_seed(world: WorldSetup, purpose: str, index: int) -> int:
  """The seed of generated world `index` >= 1 for `purpose` (never the test world's)."""
  seed = derive_seed(world.seed, purpose, index)
  return seed + 1 if seed == world.test_seed else seed


def question_counts(total: int, num_worlds: int, *, total_key: str,
                    worlds_key: str) -> list[int]:
  """`total` split over `num_worlds` as evenly as possible (earlier worlds get the rest);
  a ValueError naming both config keys when some world would get none."""
  if num_worlds < 1 or total < num_worlds:
    raise ValueError(f"{total_key} ({total}) must be at least {worlds_key} ({num_worlds}) "
                     ">= 1")
  share, rest = divmod(total, num_worlds)
  return [share + (i < rest) for i in range(num_worlds)]


class TaskRoutedJudge:
  """r_expert of each task by its own world's expert judge (`tasks.judges.ExpertJudge`)."""

  def __init__(self, judge_of: Mapping[str, Callable[..., float]]):
    self._judge_of = dict(judge_of)

  def __call__(self, task, subtask: str, report: str) -> float:
    return self._judge_of[task.id](task, subtask, report)


@dataclasses.dataclass(frozen=True)
class TrainingTasks:
  """What RL trains on.

  Attributes:
    questions: every world's training questions, world 0's first.
    registry: the tools; with several worlds a `TaskRoutedRegistry`.
    expert_judge: r_expert of S's reports (`judge(question, subtask, report)`).
  """
  questions: list[Question]
  registry: ToolRegistry | TaskRoutedRegistry
  expert_judge: Callable[..., float]


def training_tasks(world: WorldSetup, world_path: pathlib.Path,
                   open_tools: Callable[[pathlib.Path], ToolRegistry]) -> TrainingTasks:
  """The module docstring's questions, tools and judge for `world`.

  Args:
    world: the run's world.
    world_path: the run's built world (`world_data.ensure_world`).
    open_tools: the agents' tools over the search index file it is given
      (`training.agent_setup.index_tool_registry` with the run's `tools.*`).
  """
  stage = world.stage
  built = load_questions(world_path, world, stage)
  registry = open_tools(world_index(world_path, "train_world"))
  rendering = world.rendering
  train_world, test_world = world.split_worlds()
  judge = rendering.expert_judge(train_world)
  num_worlds = world.train_worlds  # > 1 only with generated questions (validate)
  if num_worlds == 1:
    return _kept(TrainingTasks(built, registry, judge), world.question_ids)
  counts = question_counts(len(built), num_worlds, total_key=f"the {stage} training split",
                           worlds_key="world.train_worlds")
  folder = pathlib.Path(world_path) / "train_worlds"
  questions = built[:counts[0]]
  world_of: dict[str, Any] = {q.id: 0 for q in questions}
  judges = {0: judge}
  mixture = question_mixture(world)
  for index in range(1, num_worlds):
    source = rendering.generate(world.size, derived_world_seed(world, "train_world", index),
                                frozenset(test_world.names))
    own = rendering.synthesize(source, counts[index], stage=mixture,
                               seed=derive_seed(world.seed, "train_questions", index) % 2**16,
                               id_prefix=f"train-w{index}")
    ensure_world_index(rendering, source, folder / f"world_{index}.sqlite")
    judges[index] = rendering.expert_judge(source)
    world_of.update({q.id: index for q in own})
    questions += own

  def open_world(index: int) -> ToolRegistry:
    return registry if index == 0 else open_tools(folder / f"world_{index}.sqlite")

  return _kept(TrainingTasks(
      questions, TaskRoutedRegistry(world_of, open_world),
      TaskRoutedJudge({qid: judges[index] for qid, index in world_of.items()})),
      world.question_ids)


def read_question_ids(path: str) -> list[str]:
  """The ids of a `world.question_ids` file: a JSON list of ids, or an object whose
  "kept" is one (the two-stage curriculum's selection); errors name the file."""
  try:
    data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
  except (OSError, ValueError) as e:
    raise ValueError(f"world.question_ids: cannot read {path!r}: {e}") from None
  ids = data.get("kept") if isinstance(data, dict) else data
  if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
    raise ValueError(f"world.question_ids: {path!r} holds no list of string ids "
                     "(a JSON list, or an object with a list 'kept')")
  return ids


def _kept(tasks: TrainingTasks, ids_file: str) -> TrainingTasks:
  """`tasks` with only the questions `ids_file` lists (all with no file); an id that is
  not a training question, or an empty list, is an error naming the file."""
  if not ids_file:
    return tasks
  ids = read_question_ids(ids_file)
  known = {q.id for q in tasks.questions}
  unknown = sorted(set(ids) - known)
  if unknown or not ids:
    raise ValueError(f"world.question_ids: {ids_file!r} "
                     + (f"names {len(unknown)} ids that are not training questions of this "
                        f"world and stage, e.g. {unknown[0]!r}" if unknown else "is empty"))
  wanted = set(ids)
  return dataclasses.replace(tasks, questions=[q for q in tasks.questions if q.id in wanted])


def ensure_world_index(rendering, source, path: pathlib.Path) -> None:
  """Builds generated world `source`'s search index at `path` once, under a file lock and
  through a temporary file (the two slices, or an interrupted build, share the folder)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with file_lock(path.with_suffix(".lock")):
    if not path.exists():
      partial = path.with_suffix(".partial")
      partial.unlink(missing_ok=True)
      build_index(rendering.render_pages(source), partial)
      partial.replace(path)
