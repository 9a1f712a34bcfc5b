"""The run's compilation-cache folder (`training/compilation_cache.py`)."""

from __future__ import annotations

import pathlib

import pytest

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.training.compilation_cache import (
  LOCKED_CACHE_MAX_SIZE,
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


def test_the_default_is_a_folder_of_the_run(tmp_path):
  assert compilation_cache_dir(_config(), str(tmp_path / "run")) == str(
      tmp_path / "run" / "jax_cache")


@pytest.mark.parametrize("folder", ["/shared/jax_cache", "gs://bucket/jax_cache"])
def test_absolute_and_remote_folders_are_kept(tmp_path, folder):
  assert compilation_cache_dir(_config(folder), str(tmp_path)) == folder


def test_a_remote_workdir_keeps_the_cache_in_its_local_folder(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert compilation_cache_dir(_config(run_id="r7"), "gs://bucket/runs/r7") == str(
      pathlib.Path(tmp_path, "runs_local", "r7", "jax_cache").resolve())


def test_empty_leaves_jax_alone(tmp_path):
  assert compilation_cache_dir(_config(""), str(tmp_path)) is None


@pytest.fixture
def jax_cache_settings():
  """JAX's cache folder and size cap, restored after the test (process-wide settings)."""
  import jax

  names = ("jax_compilation_cache_dir", "jax_compilation_cache_max_size")
  saved = {name: getattr(jax.config, name) for name in names}
  yield jax
  for name, value in saved.items():
    jax.config.update(name, value)


def test_a_local_folder_is_capped_so_that_jax_locks_it(tmp_path, jax_cache_settings):
  jax = jax_cache_settings
  jax.config.update("jax_compilation_cache_max_size", -1)  # JAX's default: no lock
  folder = enable_compilation_cache(_config(), str(tmp_path / "run"))
  assert jax.config.jax_compilation_cache_dir == folder == str(tmp_path / "run" / "jax_cache")
  assert jax.config.jax_compilation_cache_max_size == LOCKED_CACHE_MAX_SIZE


def test_a_cap_already_set_and_remote_folders_are_left_alone(tmp_path, jax_cache_settings):
  jax = jax_cache_settings
  jax.config.update("jax_compilation_cache_max_size", 12345)
  enable_compilation_cache(_config(), str(tmp_path))
  assert jax.config.jax_compilation_cache_max_size == 12345
  jax.config.update("jax_compilation_cache_max_size", -1)
  enable_compilation_cache(_config("gs://bucket/jax_cache"), str(tmp_path))
  assert jax.config.jax_compilation_cache_dir == "gs://bucket/jax_cache"
  assert jax.config.jax_compilation_cache_max_size == -1
  assert enable_compilation_cache(_config(""), str(tmp_path)) is None
