"""The run's compilation cache (`training/compilation_cache.py`): its folder, and what
`enable_compilation_cache` sets."""

from __future__ import annotations

import pathlib

import jax
import pytest

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.training.compilation_cache import (
  MIN_COMPILE_TIME_S,
  compilation_cache_dir,
  enable_compilation_cache,
)


def _config(folder=None, run_id="r1"):
  config = base_config()
  overrides = {"experiment.run_id": run_id}
  if folder is not None:
    overrides["experiment.compilation_cache_dir"] = folder
  apply_overrides(config, overrides)
  return config


def test_the_default_lies_beside_the_run_for_every_run_of_its_folder(tmp_path):
  assert compilation_cache_dir(_config(), str(tmp_path / "run")) == str(tmp_path / "jax_cache")
  assert compilation_cache_dir(_config(run_id="r2"), str(tmp_path / "other")) == str(
      tmp_path / "jax_cache")
  assert compilation_cache_dir(_config("jax_cache"), str(tmp_path / "run")) == str(
      tmp_path / "run" / "jax_cache")


@pytest.mark.parametrize("folder", ["/shared/jax_cache", "gs://bucket/jax_cache"])
def test_absolute_and_remote_folders_are_kept(tmp_path, folder):
  assert compilation_cache_dir(_config(folder), str(tmp_path)) == folder


def test_a_remote_workdir_keeps_the_cache_in_its_local_folder(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert compilation_cache_dir(_config(run_id="r7"), "gs://bucket/runs/r7") == str(
      pathlib.Path(tmp_path, "runs_local", "jax_cache").resolve())


def test_empty_leaves_jax_alone(tmp_path):
  assert compilation_cache_dir(_config(""), str(tmp_path)) is None


@pytest.fixture
def restored_jax_cache_config():
  """Restores the two JAX settings `enable_compilation_cache` changes."""
  names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
  before = {name: getattr(jax.config, name) for name in names}
  yield
  for name, value in before.items():
    jax.config.update(name, value)


def test_enabling_keeps_every_program(tmp_path, monkeypatch, restored_jax_cache_config):
  monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  folder = enable_compilation_cache(_config(), str(tmp_path / "run"))
  assert folder == jax.config.jax_compilation_cache_dir == str(tmp_path / "jax_cache")
  assert jax.config.jax_persistent_cache_min_compile_time_secs == MIN_COMPILE_TIME_S == 0.0


def test_enabling_keeps_the_environment_s_threshold(tmp_path, monkeypatch,
                                                    restored_jax_cache_config):
  monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "2")
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.0)
  enable_compilation_cache(_config(), str(tmp_path))
  assert jax.config.jax_persistent_cache_min_compile_time_secs == 2.0


def test_an_empty_folder_changes_nothing(tmp_path, monkeypatch, restored_jax_cache_config):
  monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  assert enable_compilation_cache(_config(""), str(tmp_path)) is None
  assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0
