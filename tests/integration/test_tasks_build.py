"""The build command: byte-identical outputs across processes, readable without TF."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mgrpo_jax.tasks import judges
from mgrpo_jax.tasks.build import file_digests
from mgrpo_jax.tasks.oracle import OracleMainAgent, OracleSubAgent, run_episode
from mgrpo_jax.tools import SearchIndex, default_registry


def _build(out, seed=0, scratch=None):
  cmd = [sys.executable, "-m", "mgrpo_jax.tasks.build", "--world=tiny", f"--seed={seed}",
         f"--out={out}", "--num_train=60", "--num_validation=10", "--num_test=20"]
  env = dict(os.environ, TMPDIR=str(scratch)) if scratch else None
  result = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300, env=env)
  manifest = json.loads((out / "manifest.json").read_text())
  # Its output is the files' digests alone: none of TFDS's download lines or warnings.
  assert json.loads(result.stdout) == manifest["files"]
  assert "custom data configuration" not in result.stderr
  return manifest


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
  """The first build's temporary directory (TMPDIR)."""
  return tmp_path_factory.mktemp("scratch")


@pytest.fixture(scope="module")
def built(tmp_path_factory, scratch):
  a = tmp_path_factory.mktemp("a")
  b = tmp_path_factory.mktemp("b")
  return a, _build(a, scratch=scratch), b, _build(b)


def test_the_build_leaves_nothing_in_the_temporary_directory(built, scratch):
  # tensorflow-datasets makes an empty `tmp*tfds` folder per builder and keeps it.
  assert list(scratch.iterdir()) == []


def test_same_seed_byte_identical_in_separate_processes(built):
  a, manifest_a, b, manifest_b = built
  assert len(manifest_a["files"]) == 7
  assert manifest_a == manifest_b
  assert file_digests(a) == file_digests(b) == manifest_a["files"]
  for rel in ("tfds/deep_research_tasks", "tfds/deep_research_corpus"):
    for path in (a / rel).rglob("*.json"):
      assert path.read_bytes() == (b / path.relative_to(a)).read_bytes(), path


def test_read_with_data_source_and_grain_without_tensorflow(built):
  import grain.python as grain
  import tensorflow_datasets as tfds

  from mgrpo_jax.tasks import tfds_builder

  a = built[0]
  config = "deep_research_tasks/" + built[1]["config"]
  train = tfds.data_source(config, split="train", data_dir=str(a / "tfds"))
  assert len(train) == 120
  first = train[0]
  assert isinstance(first["question"], bytes)
  assert tfds_builder.decode_text(first["id"]) == "trainval-s1-000000"
  assert [int(train[i]["stage"]) for i in (0, 59, 60, 119)] == [1, 1, 2, 2]
  loader = grain.MapDataset.source(train).map(
    lambda r: tfds_builder.decode_text(r["answer"])).batch(8)
  assert len(list(loader)) == 15
  corpus = tfds.data_source("deep_research_corpus/" + built[1]["config"],
                            split=["train_world", "test_world"], data_dir=str(a / "tfds"))
  train_titles = {tfds_builder.decode_text(corpus[0][i]["title"]) for i in range(len(corpus[0]))}
  test_titles = {tfds_builder.decode_text(corpus[1][i]["title"]) for i in range(len(corpus[1]))}
  assert len(train_titles) == len(test_titles) == 400
  assert not train_titles & test_titles
  assert "tensorflow" not in sys.modules


def test_oracle_on_built_test_split(built):
  import tensorflow_datasets as tfds

  from mgrpo_jax.tasks import tfds_builder

  a = built[0]
  test = tfds.data_source("deep_research_tasks/" + built[1]["config"], split="test",
                          data_dir=str(a / "tfds"))
  index = SearchIndex.open(a / "index" / "test_world.sqlite")
  registry = default_registry(index)
  main, sub = OracleMainAgent(), OracleSubAgent()
  correct = 0
  for i in range(len(test)):
    record = test[i]
    text = tfds_builder.decode_text(record["question"])
    answer = tfds_builder.decode_text(record["answer"])
    correct += judges.answers_match(run_episode(text, main, sub, registry).answer or "", answer)
  assert correct / len(test) >= 0.99


def test_bad_world_size_fails_clearly(tmp_path):
  result = subprocess.run([sys.executable, "-m", "mgrpo_jax.tasks.build", "--world=huge",
                           f"--out={tmp_path}"], capture_output=True, text=True, timeout=120)
  assert result.returncode == 2 and "world size 'huge'" in result.stderr


def test_world_packages_import_no_jax_models_or_training():
  code = ("import sys, mgrpo_jax.tasks.build, mgrpo_jax.tasks.oracle, mgrpo_jax.tasks.loaders, "
          "mgrpo_jax.tasks.judges, mgrpo_jax.tools; "
          "bad = [m for m in sys.modules if m in ('jax', 'tensorflow') or m.startswith(("
          "'mgrpo_jax.models', 'mgrpo_jax.training', 'mgrpo_jax.slices', 'mgrpo_jax.scale', "
          "'mgrpo_jax.warm_start', 'mgrpo_jax.evaluation', 'tensorflow.'))]; "
          "print(bad); sys.exit(1 if bad else 0)")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 0, result.stdout + result.stderr
