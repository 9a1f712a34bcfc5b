"""Weights & Biases logging (`logging.wandb.*`) in offline mode, read back from the run files.

A slice's metrics writer (`scale.writers.metrics_writer`) with W&B on logs the scalars of
every step to metrics.jsonl, TensorBoard and an offline W&B run; the W&B run's history,
read from its `.wandb` transaction log with W&B's own reader (`wandb leet inspect
--json`), holds the same values, and its run record the group, job type, name and config.
Needs the `wandb` extra (installed by `make test` through the dev extra); skipped without it.
"""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.metrics import read_metrics
from mgrpo_jax.scale.writers import metrics_writer
from mgrpo_jax.training.paths import RunPaths

pytest.importorskip("wandb")

# Three steps of a slice's scalars: exact and inexact binary fractions, a NaN (which
# TensorBoard skips and metrics.jsonl and W&B keep), a metric missing at one step.
STEPS = {
    0: {"main/reward_mean": 0.25, "main/update/loss": 1.0 / 3.0, "time/rollout_s": 2.5},
    1: {"main/reward_mean": 0.5, "main/update/loss": float("nan"), "time/rollout_s": 2.0},
    2: {"main/reward_mean": 0.875, "time/rollout_s": 1.75},
}


@pytest.fixture(autouse=True)
def wandb_env(tmp_path, monkeypatch):
  """W&B's own settings and caches in the test's folder, never the network or $HOME."""
  for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
    monkeypatch.setenv(name, str(tmp_path / name.lower()))
  monkeypatch.setenv("WANDB_SILENT", "true")
  for name in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP",
               "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_API_KEY"):
    monkeypatch.delenv(name, raising=False)


def offline_config(run_id: str = "exp7"):
  config = base_config()
  apply_overrides(config, {
      "experiment.run_id": run_id, "logging.tensorboard": True,
      "logging.wandb.enabled": True, "logging.wandb.mode": "offline",
      "logging.wandb.project": "mgrpo-tests"})
  return config


def log_steps(paths: RunPaths, config, steps: dict[int, dict[str, float]]) -> None:
  writer = metrics_writer(paths, "main", config)
  for step, scalars in steps.items():
    writer.write(step, scalars)
  writer.close()


def inspect(run_dir: pathlib.Path) -> list[dict]:
  """The records of an offline run's `.wandb` file, as W&B's inspector prints them."""
  out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json",
                        str(run_dir)], capture_output=True, text=True, timeout=120, check=True)
  return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def history(records: list[dict]) -> dict[int, dict[str, float]]:
  """{step: {metric: value}} of the history records, W&B's own `_` keys left out."""
  rows = {}
  for record in records:
    if record["type"] == "history":
      item = record["history"]["item"]
      rows[int(item["_step"])] = {k: float(v) for k, v in item.items() if not k.startswith("_")}
  return rows


def tensorboard_scalars(folder: pathlib.Path) -> dict[int, dict[str, float]]:
  """{step: {tag: value}} of the TensorBoard event files in `folder` (TFRecord framing)."""
  from tensorboardX.proto import event_pb2  # the same protobufs TensorBoard reads

  rows: dict[int, dict[str, float]] = {}
  for path in folder.glob("events.out.tfevents.*"):
    data, offset = path.read_bytes(), 0
    while offset < len(data):
      length = int.from_bytes(data[offset:offset + 8], "little")
      event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
      offset += 16 + length
      for value in event.summary.value:
        rows.setdefault(event.step, {})[value.tag] = value.simple_value
  return rows


def same(a: float, b: float) -> bool:
  return (math.isnan(a) and math.isnan(b)) or a == b


def offline_runs(logdir: pathlib.Path) -> list[pathlib.Path]:
  return sorted((logdir / "wandb").glob("offline-run-*"))


def test_offline_run_holds_what_metrics_jsonl_and_tensorboard_got(tmp_path):
  paths = RunPaths(workdir=str(tmp_path), local=tmp_path, store_uri=str(tmp_path / "store"))
  log_steps(paths, offline_config(), STEPS)
  logdir = paths.logs("main")
  (run_dir,) = offline_runs(logdir)
  logged = history(inspect(run_dir))

  jsonl = {int(r["step"]): {k: v for k, v in r.items() if k not in ("step", "time")}
           for r in read_metrics(logdir / "metrics.jsonl")}
  assert sorted(logged) == sorted(jsonl) == sorted(STEPS)
  for step, row in jsonl.items():
    assert logged[step].keys() == row.keys() == STEPS[step].keys(), step
    assert all(same(logged[step][k], v) for k, v in row.items()), (step, logged[step], row)
  assert math.isnan(logged[1]["main/update/loss"])
  assert logged[0]["main/update/loss"] == 1.0 / 3.0  # float64, as in metrics.jsonl

  board = tensorboard_scalars(logdir / "tensorboard")  # float32, finite values only
  expected = {step: {k: float(np.float32(v)) for k, v in row.items() if math.isfinite(v)}
              for step, row in logged.items()}
  assert board == expected


def test_offline_run_is_the_slices_run_grouped_by_run_id_with_the_config(tmp_path):
  paths = RunPaths(workdir=str(tmp_path), local=tmp_path, store_uri=str(tmp_path / "store"))
  config = offline_config("exp7")
  log_steps(paths, config, {0: STEPS[0]})
  (run_dir,) = offline_runs(paths.logs("main"))
  (run,) = [r["run"] for r in inspect(run_dir) if r["type"] == "run"]
  assert (run["run_group"], run["job_type"], run["display_name"], run["project"]) == (
      "exp7", "main", "exp7/main", "mgrpo-tests")
  logged_config = run["config"]["update"]
  assert logged_config["experiment"]["run_id"] == "exp7"
  assert logged_config["logging"]["wandb"]["mode"] == "offline"
  assert logged_config["mgrpo"]["queries_per_step"] == config.mgrpo.queries_per_step


def test_a_restarted_slice_resumes_its_wandb_run(tmp_path):
  paths = RunPaths(workdir=str(tmp_path), local=tmp_path, store_uri=str(tmp_path / "store"))
  config = offline_config()
  log_steps(paths, config, {0: STEPS[0]})
  log_steps(paths, config, {1: STEPS[1], 2: STEPS[2]})  # the same slice, restarted
  logdir = paths.logs("main")
  first, second = offline_runs(logdir)
  kept = (logdir / "wandb_id").read_text()
  ids = [[r["run"]["run_id"] for r in inspect(d) if r["type"] == "run"] for d in (first, second)]
  assert ids == [[kept], [kept]]
  assert sorted(history(inspect(second))) == [1, 2]
