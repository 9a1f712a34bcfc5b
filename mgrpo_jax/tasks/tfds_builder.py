"""TFDS builders writing the world's tasks and corpus as ArrayRecord (no TensorFlow).

`DeepResearchTasks`: splits train / validation / test of questions (see `datasets`).
`DeepResearchCorpus`: splits train_world / test_world of pages.
Write with `builder.download_and_prepare()` after constructing with
`file_format="array_record"`; read with `builder.as_data_source()` or
`tfds.data_source("deep_research_tasks/tiny_seed0", data_dir=...)` and grain. Text
features come back as bytes (`decode_text`). Shuffling is disabled so records keep
generation order and builds are byte-identical for the same config.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from mgrpo_jax.tasks import datasets as datasets_lib
from mgrpo_jax.tasks.renderings import get_rendering

VERSION = tfds.core.Version("1.0.0")


@dataclasses.dataclass
class WorldConfig(tfds.core.BuilderConfig):
  """A `datasets.WorldSpec` as a TFDS builder config."""
  spec: datasets_lib.WorldSpec = dataclasses.field(default_factory=datasets_lib.WorldSpec)


def world_config(world: str | int = "tiny", seed: int = 0, test_seed: int | None = None,
                 render: str = "natural", **counts: int) -> WorldConfig:
  """Config "<world>_seed<seed>" (test seed defaults to seed + 1); other test seeds or
  question counts add "_t<test seed>_n<train>-<validation>-<test>" to the name, and a
  rendering other than the natural one adds "_<render>"."""
  test_seed = seed + 1 if test_seed is None else test_seed
  spec = datasets_lib.WorldSpec(str(world), seed, test_seed, render=render, **counts)
  name = f"{world}_seed{seed}"
  default = datasets_lib.WorldSpec(str(world), seed, seed + 1, render=render)
  if spec != default:
    name += f"_t{test_seed}_n{spec.num_train}-{spec.num_validation}-{spec.num_test}"
  if render != "natural":
    name += f"_{render}"
  return WorldConfig(name=name, version=VERSION, spec=spec)


def make_builder(cls, config: WorldConfig, data_dir: str):
  """A builder for `config`; registered configs are passed by name (TFDS requires it)."""
  registered = {c.name for c in cls.BUILDER_CONFIGS}
  chosen = config.name if config.name in registered else config
  return cls(config=chosen, data_dir=data_dir, file_format="array_record")


_DEFAULT_CONFIGS = [world_config(w, 0) for w in ("tiny", "small", "medium", "large")]


def decode_text(value) -> str:
  """Text features arrive as bytes from the data source."""
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def _deterministic_serialization():
  """tf.Example maps serialized with sorted keys while preparing (byte-identical files).

  TFDS serializes with `SerializeToString()`, whose map order varies between
  processes; this scope switches its serializer to `deterministic=True`.
  """
  cls = tfds.core.example_serializer.ExampleSerializer
  original = cls.serialize_example

  def serialize_example(self, example):
    return self.get_tf_example(example).SerializeToString(deterministic=True)

  cls.serialize_example = serialize_example
  try:
    yield
  finally:
    cls.serialize_example = original


class _WorldBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Common base: deterministic record bytes; the module file is the code path; quiet.

  TFDS 4.9.10 resolves `code_path` of a builder that lives in a package through a lazy
  `importlib_resources` import, which is not a dependency here; the file path is what
  that lookup returns anyway.

  Quiet: a world's config is one of `world_config`'s, registered or not (any size,
  seed and rendering), where TFDS warns about every unregistered one it is given
  ("Using custom data configuration"); and the data is generated here, offline, where
  TFDS prints that it is downloading a dataset of unknown size, and where it is.
  Whoever builds the world says so (`world_data.ensure_world`).
  """
  VERSION = VERSION
  BUILDER_CONFIGS = _DEFAULT_CONFIGS

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    return epath.Path(inspect.getfile(cls))

  def _download_and_prepare(self, *args, **kwargs):
    with _deterministic_serialization():
      return super()._download_and_prepare(*args, **kwargs)

  def _create_builder_config(self, builder_config, version):
    """An unregistered `WorldConfig` as it is, without TFDS's warning (class docstring);
    anything else as TFDS takes it (a registered name; the checks of a config object)."""
    if isinstance(builder_config, WorldConfig) and self.get_builder_config(
        name=builder_config.name, version=builder_config.version) is None:
      return builder_config
    return super()._create_builder_config(builder_config, version)

  def _log_download_bytes(self) -> None:
    """Nothing: there is nothing to download (class docstring)."""

  def _log_download_done(self) -> None:
    """Nothing: there was nothing to download (class docstring)."""


class DeepResearchTasks(_WorldBuilder):
  """Questions with gold answers, gold paths and types."""

  def _info(self) -> tfds.core.DatasetInfo:
    text = tfds.features.Text()
    return self.dataset_info_from_configs(
      features=tfds.features.FeaturesDict({
        "id": text, "question": text, "answer": text, "type": text,
        "hops": tfds.features.Scalar(dtype=np.int32),
        "stage": tfds.features.Scalar(dtype=np.int32),
        "world_seed": tfds.features.Scalar(dtype=np.int64),
        "path_json": text, "meta_json": text,
      }),
      disable_shuffling=True)

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(split) for split in datasets_lib.SPLITS}

  def _generate_examples(self, split: str):
    spec = self.builder_config.spec
    world_seed = spec.test_seed if split == "test" else spec.seed
    for stage, q in datasets_lib.split_questions(spec, split):
      yield q.id, {
        "id": q.id, "question": q.text, "answer": q.answer, "type": q.type,
        "hops": q.hops, "stage": stage, "world_seed": world_seed,
        "path_json": json.dumps([list(f) for f in q.path]),
        "meta_json": json.dumps(q.meta, sort_keys=True),
      }


class DeepResearchCorpus(_WorldBuilder):
  """The pages of the train world and of the test world."""

  def _info(self) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(
      features=tfds.features.FeaturesDict({
        "page_id": tfds.features.Scalar(dtype=np.int64),
        "title": tfds.features.Text(), "text": tfds.features.Text(),
      }),
      disable_shuffling=True)

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train_world": self._generate_examples(0), "test_world": self._generate_examples(1)}

  def _generate_examples(self, which: int):
    spec = self.builder_config.spec
    world = datasets_lib.make_split_worlds(spec.world, spec.seed, spec.test_seed,
                                           spec.render)[which]
    for page in get_rendering(spec.render).render_pages(world):
      yield page.page_id, {"page_id": page.page_id, "title": page.title, "text": page.text}
