"""The world's datasets: built once per run folder, read as questions.

`ensure_world(root, world, log)` builds the TFDS ArrayRecord datasets and the search
indexes (`build.build`) of a `WorldSetup` into `<root>/data/world` once, saying so
through `log` as the build starts and ends; both slices call it, a file lock makes one
of them build while the other waits, and a finished build is marked by its
`manifest.json` (written last).

`load_questions` reads one split and stage of the built tasks dataset (`task_source`,
`builder.as_data_source()`), restricted to `world.question_types`. A user's own
questions (`world.source` jsonl, csv, gaia or webwalker, `user_questions`) replace the generated
ones; the world is still built, for the tools' search index. GAIA questions that need
an attached file are left out, with a warning that counts them; WebWalkerQA's
(`webwalker`) are asked with their root URL.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import time
from collections.abc import Callable
from typing import Any

from mgrpo_jax.tasks import build as build_lib
from mgrpo_jax.tasks import loaders, tfds_builder
from mgrpo_jax.tasks.questions import Question
from mgrpo_jax.tasks.world import Fact
from mgrpo_jax.tasks.world_setup import (
  STAGES,
  WorldSetup,
  question_mixture,
  question_types,
  source_fields,
)
from mgrpo_jax.utils.file_lock import file_lock

_LOG = logging.getLogger(__name__)


def world_dir(root: str | os.PathLike[str]) -> pathlib.Path:
  """`<root>/data/world`: where `ensure_world` builds a run's world."""
  return pathlib.Path(root) / "data" / "world"


def _world_config(world: WorldSetup) -> tfds_builder.WorldConfig:
  return tfds_builder.world_config(world.size, world.seed, world.test_seed,
                                   render=world.rendering.name)


def ensure_world(root: str | os.PathLike[str], world: WorldSetup,
                 log: Callable[[str], None] | None = None) -> pathlib.Path:
  """Builds `world`'s data under `<root>/data/world` once; its path.

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


def _build_world(world: WorldSetup, out: pathlib.Path, log: Callable[[str], None]) -> None:
  """Builds `world`'s data into `out`, saying so as it starts and ends."""
  log(f"world: building the {world.size} {world.rendering.name} world (seed {world.seed}, "
      f"test world seed {world.test_seed})")
  started = time.perf_counter()
  build_lib.build(world.size, world.seed, out, test_seed=world.test_seed,
                  render=world.rendering.name)
  log(f"world: built in {time.perf_counter() - started:.0f} s")


def _decode(example: dict[str, Any]) -> Question:
  text = tfds_builder.decode_text
  return Question(id=text(example["id"]), text=text(example["question"]),
                  answer=text(example["answer"]),
                  path=tuple(Fact(*f) for f in json.loads(text(example["path_json"]))),
                  type=text(example["type"]), hops=int(example["hops"]),
                  meta=json.loads(text(example["meta_json"])))


def task_source(world_path: str | os.PathLike[str], world: WorldSetup, split: str = "train"):
  """The random-access data source of one split of the built tasks dataset."""
  import tensorflow_datasets as tfds

  tfds.disable_progress_bar()
  builder = tfds_builder.make_builder(tfds_builder.DeepResearchTasks, _world_config(world),
                                      str(pathlib.Path(world_path) / "tfds"))
  return builder.as_data_source()[split]


def user_questions(world: WorldSetup, split: str = "train") -> list[Question]:
  """The questions of the user's file (`world.source`, `world.source_path`; for the test
  split `world.test_source_path` when set), in file order.

  Raises:
    ValueError: no path is set, or `world.source_fields` is malformed (naming the key).
    loaders.BenchmarkFileError: a missing file, a malformed line or field, a repeated
      id (naming the file and line), or no question left (GAIA: none without a file).
  """
  path = (world.test_source_path if split == "test" and world.test_source_path
          else world.source_path)
  if not path:
    raise ValueError(f"world.source={world.source} needs world.source_path: the questions "
                     "file")
  tasks, skipped = _read(world, path)
  if skipped:
    _LOG.warning("%s: %d of %d GAIA questions skipped: they need an attached file (%s)",
                 path, len(skipped), len(tasks) + len(skipped),
                 ", ".join(t.id for t in skipped[:5]) + (", ..." if len(skipped) > 5 else ""))
  if not tasks:
    raise loaders.BenchmarkFileError(
        f"{path}: no questions" + (f" without an attached file ({len(skipped)} have one)"
                                   if skipped else ""))
  seen: dict[str, int] = {}
  for i, task in enumerate(tasks, start=1):
    if task.id in seen:
      raise loaders.BenchmarkFileError(f"{path}: question {i} repeats the id {task.id!r} of "
                                       f"question {seen[task.id]}")
    seen[task.id] = i
  return [Question(id=t.id, text=t.text, answer=t.answer, path=(), type="user", hops=0,
                   meta={"level": t.level, "file_name": t.file_name, **dict(t.extra)})
          for t in tasks]


def _read(world: WorldSetup, path: str) -> tuple[list[loaders.BenchmarkTask],
                                                 list[loaders.BenchmarkTask]]:
  """(the file's usable tasks, GAIA's skipped ones: those with an attached file)."""
  if world.source == "gaia":
    return loaders.split_attachments(loaders.load_gaia(path))
  if world.source == "webwalker":
    return loaders.load_webwalker(path), []
  fields = source_fields(world)
  if world.source == "csv":
    return loaders.load_csv(path, fields), []
  return loaders.load_jsonl(path, fields), []


def load_questions(world_path: str | os.PathLike[str], world: WorldSetup, stage: str,
                   split: str = "train") -> list[Question]:
  """The questions of one split and `stage` ("stage1" / "stage2"), in dataset order, of
  the types `world.question_types` names (all when empty); with `world.source` other
  than "generated", the user's file's (`user_questions`)."""
  if world.source != "generated":
    return user_questions(world, split)
  source = task_source(world_path, world, split)
  wanted = STAGES[stage]
  questions = [_decode(source[i]) for i in range(len(source))
               if int(source[i]["stage"]) == wanted]
  if not question_types(world):
    return questions
  kept = question_mixture(world).weights
  return [q for q in questions if q.type in kept]
