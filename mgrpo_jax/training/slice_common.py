"""What both slices share: run folders, the store, the search tools, metrics, waiting.

Run folder layout (`workdir` may be `gs://...`; local-only files then go to the
local root `runs_local/<run_id>` in the current directory):
  <workdir>/checkpoints/{main,sub}   orbax checkpoints (one manager per agent)
  <workdir>/store                    the statistics store (unless `store.uri` is set)
  <local>/data/{world,tokenizer}     built once, shared by the slices (file locks)
  <local>/main/cache/step_<t>.json   M's write-ahead rollout cache
  <local>/sub/cache/step_<t>/        S records of step t, written by the service
  <local>/sub/service.json           the sub-agent service's address
  <local>/logs/{main,sub}/           metrics.jsonl and TensorBoard events per slice (and
                                     W&B's `wandb/` with `logging.wandb.enabled`)

Multi-host slices (`distributed.py`): only process 0 logs, writes metrics and the other
local files; a slice's samplers read a copy of the parameters on their own process's
devices (`rollout_model`), and its updates read global batches fed by rows
(`device_batch`). With one process every helper here is what it was without them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mgrpo_jax.agents.tools import SearchIndex, ToolRegistry, default_registry
from mgrpo_jax.metrics import MetricsWriter, WandbRun
from mgrpo_jax.models.sharding import param_shardings
from mgrpo_jax.store import open_store
from mgrpo_jax.store.protocol import Store
from mgrpo_jax.training import distributed
from mgrpo_jax.training.batching import TrainBatch
from mgrpo_jax.training.mesh import MeshConfig, create_mesh
from mgrpo_jax.training.train_state import StateLayout, TrainState
from mgrpo_jax.training.update import batch_shardings

DECOUPLED_MODES = ("mgrpo", "frozen_sub", "no_alignment")


@dataclasses.dataclass(frozen=True)
class RunPaths:
  """Where one run keeps its files (module docstring)."""

  workdir: str
  local: pathlib.Path
  store_uri: str

  @classmethod
  def from_config(cls, config, workdir: str) -> RunPaths:
    workdir = workdir if "://" in workdir else os.path.abspath(workdir)
    local = (pathlib.Path(workdir) if "://" not in workdir
             else pathlib.Path("runs_local", str(config.experiment.run_id)).resolve())
    store_uri = str(config.store.uri) or f"{workdir}/store"
    return cls(workdir, local, store_uri)

  def checkpoints(self, role: str) -> str:
    return f"{self.workdir}/checkpoints/{role}"

  def logs(self, slice_name: str) -> pathlib.Path:
    return self.local / "logs" / slice_name

  def cache(self, slice_name: str) -> pathlib.Path:
    return self.local / slice_name / "cache"


def check_config(config) -> None:
  """Settings the step protocol relies on; raises ValueError naming the key."""
  if int(config.checkpoint.every) != 1:
    raise ValueError("checkpoint.every must be 1 for RL training: each step's acknowledgement "
                     "promises a durable checkpoint of that step (exact resume)")
  staleness = int(config.mgrpo.staleness)
  if int(config.checkpoint.keep) < staleness + 1:
    raise ValueError(f"checkpoint.keep={config.checkpoint.keep} must be >= mgrpo.staleness + 1 "
                     f"= {staleness + 1}: a restarted sub slice serves the older versions")


def open_run_store(paths: RunPaths) -> Store:
  return open_store(paths.store_uri)


def make_registry(world_path: pathlib.Path, *, world: str = "train_world", top_n: int = 5,
                  visit_budget: int = 1500) -> ToolRegistry:
  """search / visit / reason over the built index of `world` ("train_world", "test_world")."""
  if world not in ("train_world", "test_world"):
    raise ValueError(f"world must be 'train_world' or 'test_world', got {world!r}")
  return index_registry(world_path / "index" / f"{world}.sqlite", top_n=top_n,
                        visit_budget=visit_budget)


def index_registry(index_path: pathlib.Path, *, top_n: int = 5, visit_budget: int = 1500
                   ) -> ToolRegistry:
  """search / visit / reason over the SQLite FTS5 index at `index_path`."""
  return default_registry(SearchIndex.open(index_path), top_n=top_n, visit_budget=visit_budget)


class _NoMetrics:
  """The metrics writer of processes other than 0: writes nothing."""

  def write(self, step: int, scalars: dict[str, float]) -> None:
    del step, scalars

  def close(self) -> None:
    pass


def metrics_writer(paths: RunPaths, slice_name: str, config) -> MetricsWriter | _NoMetrics:
  """The slice's metrics.jsonl / TensorBoard (/ W&B) writer on process 0; a no-op elsewhere."""
  if not distributed.is_writer():
    return _NoMetrics()
  wandb = config.logging.wandb
  wandb_run = WandbRun(
      paths.logs(slice_name), project=str(wandb.project), entity=str(wandb.entity),
      mode=str(wandb.mode), group=str(config.experiment.run_id), slice_name=slice_name,
      config=json.loads(config.to_json())) if wandb.enabled else None
  return MetricsWriter(paths.logs(slice_name), tensorboard=bool(config.logging.tensorboard),
                       wandb_run=wandb_run)


def log(message: str) -> None:
  """One line on stdout, flushed (the `--slice=all` parent prefixes and relays it).

  Process 0 only: the other processes of a multi-host slice stay silent.
  """
  if not distributed.is_writer():
    return
  sys.stdout.write(f"{message}\n")
  sys.stdout.flush()


def multi_host() -> bool:
  """Whether this slice runs as several JAX processes (`distributed.initialize`)."""
  return jax.process_count() > 1


def servable_params(layout: StateLayout, state: TrainState) -> Any:
  """Parameters a sampler of this process can read, safe from the next (donating) update.

  One process: a copy of `state.params` in place. Several: a replica on this process's
  devices, tensor-parallel over them by the model's rules (collective: every process
  calls it at the same point).
  """
  if not multi_host():
    return jax.tree.map(jnp.copy, state.params)
  model = layout.model(state)
  local_mesh = create_mesh(MeshConfig(tensor=jax.local_device_count()), jax.local_devices())
  shardings = param_shardings(model, local_mesh, model.config.sharding_rules)
  return distributed.local_replica(state.params, shardings)


def rollout_model(layout: StateLayout, state: TrainState) -> nnx.Module:
  """The model this process samples rollouts with (collective with several processes).

  One process: the train state's model itself (its buffers are read in place). Several:
  the model over `servable_params`.
  """
  if not multi_host():
    return layout.model(state)
  return nnx.merge(layout.graphdef, servable_params(layout, state))


def device_batch(layout: StateLayout, batch: TrainBatch) -> Any:
  """What the update takes: the host batch itself, or (several processes, each holding
  the whole [N, T] batch) global arrays to which each process feeds only its rows."""
  if not multi_host():
    return batch
  return distributed.shard_host_batch(batch, batch_shardings(layout, batch.ids.shape[0]))


def describe_steps(start: int, num_steps: int) -> str:
  """"steps 3..9" for the steps a slice will run, or why it runs none."""
  if start >= num_steps:
    return f"all {num_steps} steps are done (a new run needs a new workdir or run_id)"
  return f"steps {start}..{num_steps - 1}"


class Timer:
  """Accumulates wall seconds per phase: `with timer("update"): ...`."""

  def __init__(self):
    self.seconds: dict[str, float] = {}

  def __call__(self, phase: str) -> _Phase:
    return _Phase(self, phase)


class _Phase:

  def __init__(self, timer: Timer, phase: str):
    self._timer, self._phase = timer, phase

  def __enter__(self) -> None:
    self._start = time.perf_counter()

  def __exit__(self, *exc) -> None:
    elapsed = time.perf_counter() - self._start
    self._timer.seconds[self._phase] = self._timer.seconds.get(self._phase, 0.0) + elapsed
