"""The run's compilation-cache folder (`training/compilation_cache.py`)."""

from __future__ import annotations

import pathlib

import pytest

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.training.compilation_cache import compilation_cache_dir


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
