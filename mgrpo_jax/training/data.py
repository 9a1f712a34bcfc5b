"""The run's data: the world built once per run folder, the query stream, question lookup.

`ensure_world(root, config, log)` builds the TFDS ArrayRecord datasets and the search
indexes (`tasks.build.build`) into `<root>/data/world` once, saying so through `log` as
the build starts and ends; both slices call it, a file lock makes one of them build while
the other waits, and a finished build is marked by its `manifest.json` (written last).

A user's own questions (`world.source` jsonl, csv or gaia, `user_questions`) replace
the generated ones; the world is still built, for the tools' search index.

`QueryStream` reads B questions per step from the train split of
`deep_research_tasks` (`builder.as_data_source()`), restricted to the configured stage
mixture, through `grain.MapDataset.source(...).shuffle(seed).repeat()`; its iterator
state (`get_state` / `set_state`) goes into M's checkpoint, so a restarted main slice
reads exactly the queries it would have read.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import time
from collections.abc import Callable
from typing import Any

import grain

from mgrpo_jax.tasks import build as build_lib
from mgrpo_jax.tasks import loaders, tfds_builder
from mgrpo_jax.tasks.oracle.noise import parse_mistake_rates
from mgrpo_jax.tasks.questions import Mixture, Question
from mgrpo_jax.tasks.renderings import Rendering, get_rendering
from mgrpo_jax.tasks.world import Fact
from mgrpo_jax.utils.file_lock import file_lock

STAGES = {"stage1": 1, "stage2": 2}
# Field names of a user's JSONL or CSV questions file when `world.source_fields` is empty.
DEFAULT_FIELDS = {"id": "id", "question": "question", "answer": "answer"}


def world_rendering(config) -> Rendering:
  """The rendering of the run's world (`world.render`)."""
  return get_rendering(str(config.world.render))


def noisy_oracles(config, seed: int) -> tuple[Any, Any]:
  """(M, S): the scripted agents with the systematic mistakes of `warm_start.*`.

  `main_noise_rate` and `sub_noise_rate` are each agent's rate of every mistake;
  `mistake_rates` ("wrong_relation=0.5,...") overrides single mistakes by name, checked
  against the rendering's mistakes. `seed` keys which tasks get each mistake.
  """
  ws = config.warm_start
  rendering = world_rendering(config)
  rates = parse_mistake_rates(str(ws.mistake_rates),
                              rendering.main_mistakes + rendering.sub_mistakes)

  def own(names):
    return tuple((name, rate) for name, rate in rates.items() if name in names)

  return (rendering.main_oracle(float(ws.main_noise_rate), seed, own(rendering.main_mistakes)),
          rendering.sub_oracle(float(ws.sub_noise_rate), seed, own(rendering.sub_mistakes)))


def question_types(world) -> frozenset[str]:
  """`world.question_types` as a set of type names (empty: every type of the stage)."""
  return frozenset(t.strip() for t in str(world["question_types"]).split(",") if t.strip())


def question_mixture(world) -> Mixture:
  """The `world` section's stage mixture, restricted to `world.question_types` if set.

  Raises:
    ValueError: naming `world.question_types` when a type is not in the stage's mixture.
  """
  mix = get_rendering(str(world["render"])).stages[STAGES[str(world["stage"])]]
  types = question_types(world)
  if not types:
    return mix
  try:
    return mix.restricted(sorted(types))
  except ValueError as e:
    raise ValueError(f"world.question_types={str(world['question_types'])!r}: {e} "
                     f"({world['render']} world, {world['stage']})") from None


def world_dir(root: str | os.PathLike[str]) -> pathlib.Path:
  return pathlib.Path(root) / "data" / "world"


def _world_config(world) -> tfds_builder.WorldConfig:
  return tfds_builder.world_config(world["size"], int(world["seed"]), int(world["test_seed"]),
                                   render=str(world["render"]))


def ensure_world(root: str | os.PathLike[str], world,
                 log: Callable[[str], None] | None = None) -> pathlib.Path:
  """Builds the `world` config section's data under `<root>/data/world` once; its path.

  `log` (e.g. `scale.writers.log`), when given, gets a line as a build starts and one
  with its seconds as it ends; a world built before is used without a word.
  """
  out = world_dir(root)
  with file_lock(out.parent / ".world.lock"):
    if not (out / "manifest.json").exists():
      shutil.rmtree(out, ignore_errors=True)  # an interrupted build
      _build_world(world, out, log or _quiet)
  return out


def _quiet(line: str) -> None:
  del line


def _build_world(world, out: pathlib.Path, log: Callable[[str], None]) -> None:
  """Builds the `world` section's data into `out`, saying so as it starts and ends."""
  log(f"world: building the {world['size']} {world['render']} world (seed {world['seed']}, "
      f"test world seed {world['test_seed']})")
  started = time.perf_counter()
  build_lib.build(world["size"], int(world["seed"]), out, test_seed=int(world["test_seed"]),
                  render=str(world["render"]))
  log(f"world: built in {time.perf_counter() - started:.0f} s")


def _decode(example: dict[str, Any]) -> Question:
  text = tfds_builder.decode_text
  return Question(id=text(example["id"]), text=text(example["question"]),
                  answer=text(example["answer"]),
                  path=tuple(Fact(*f) for f in json.loads(text(example["path_json"]))),
                  type=text(example["type"]), hops=int(example["hops"]),
                  meta=json.loads(text(example["meta_json"])))


def task_source(world_path: str | os.PathLike[str], world, split: str = "train"):
  """The random-access data source of one split of the built tasks dataset."""
  import tensorflow_datasets as tfds

  tfds.disable_progress_bar()
  builder = tfds_builder.make_builder(tfds_builder.DeepResearchTasks, _world_config(world),
                                      str(pathlib.Path(world_path) / "tfds"))
  return builder.as_data_source()[split]


def source_fields(world) -> dict[str, str]:
  """The field map of `world.source_fields` ('id=...,question=...,answer=...')."""
  text = str(world["source_fields"]).strip()
  if not text:
    return dict(loaders.GAIA_FIELDS if world["source"] == "gaia" else DEFAULT_FIELDS)
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


def user_questions(world, split: str = "train") -> list[Question]:
  """The questions of the user's file (`world.source`, `world.source_path`; for the test
  split `world.test_source_path` when set), in file order.

  Raises:
    ValueError: no path is set, or `world.source_fields` is malformed (naming the key).
    loaders.BenchmarkFileError: a missing file, a malformed line or field, a repeated
      id (naming the file and line).
  """
  key = "test_source_path" if split == "test" and world["test_source_path"] else "source_path"
  path = str(world[key])
  if not path:
    raise ValueError(f"world.source={world['source']} needs world.source_path: the questions "
                     "file")
  fields = source_fields(world)
  source = str(world["source"])
  tasks = (loaders.load_gaia(path) if source == "gaia" else
           loaders.load_csv(path, fields) if source == "csv" else loaders.load_jsonl(path, fields))
  if not tasks:
    raise loaders.BenchmarkFileError(f"{path}: no questions")
  seen: dict[str, int] = {}
  for i, task in enumerate(tasks, start=1):
    if task.id in seen:
      raise loaders.BenchmarkFileError(f"{path}: question {i} repeats the id {task.id!r} of "
                                       f"question {seen[task.id]}")
    seen[task.id] = i
  return [Question(id=t.id, text=t.text, answer=t.answer, path=(), type="user", hops=0,
                   meta={"level": t.level, "file_name": t.file_name, **dict(t.extra)})
          for t in tasks]


def load_questions(world_path: str | os.PathLike[str], world, stage: str,
                   split: str = "train") -> list[Question]:
  """The questions of one split and `stage` ("stage1" / "stage2"), in dataset order, of
  the types `world.question_types` names (all when empty); with `world.source` other
  than "generated", the user's file's (`user_questions`)."""
  if str(world["source"]) != "generated":
    return user_questions(world, split)
  source = task_source(world_path, world, split)
  wanted = STAGES[stage]
  questions = [_decode(source[i]) for i in range(len(source))
               if int(source[i]["stage"]) == wanted]
  if not question_types(world):
    return questions
  kept = question_mixture(world).weights
  return [q for q in questions if q.type in kept]


class QueryStream:
  """B shuffled training questions per step, with a checkpointable iterator."""

  def __init__(self, questions: list[Question], *, seed: int, batch_size: int):
    if len(questions) < batch_size:
      raise ValueError(f"{len(questions)} training questions, fewer than B={batch_size}")
    self.batch_size = batch_size
    dataset = grain.MapDataset.source(questions).shuffle(seed=seed).repeat()
    self._iterator = iter(dataset)

  def next_batch(self) -> list[Question]:
    """The next B distinct questions (a repeat across an epoch boundary is skipped)."""
    batch: list[Question] = []
    while len(batch) < self.batch_size:
      question = next(self._iterator)
      if all(q.id != question.id for q in batch):
        batch.append(question)
    return batch

  def get_state(self) -> dict[str, Any]:
    return dict(self._iterator.get_state())

  def set_state(self, state: dict[str, Any]) -> None:
    self._iterator.set_state(dict(state))
