"""Where one run keeps its files: `RunPaths`.

Run folder layout. Everything a restarted slice needs is under `workdir`, which may be
`gs://...` (a slice restarted on another machine then finds it); the local root holds
only what can be rebuilt or is this machine's own (`runs_local/<run_id>` in the current
directory for a `gs://` workdir, else the workdir itself):
  <workdir>/checkpoints/{main,sub}    orbax checkpoints (one manager per agent)
  <workdir>/store                     the statistics store (unless `store.uri` is set)
  <workdir>/main/cache/step_<t>.json  M's write-ahead rollout cache
  <workdir>/sub/cache/step_<t>/       S records of step t, written by the service
  <workdir>/sub/queue/step_<t>.json   the unsynchronized arm's FIFO at the start of step t
  <workdir>/sub/service.json          the sub-agent service's address
  <workdir>/logs/{main,sub}/          metrics.jsonl and TensorBoard events per slice; with
                                      a `gs://` workdir written under <local>/logs and
                                      copied here after every written step
  <local>/data/{world,tokenizer}      built once, shared by the slices (file locks)
  <local>/logs/{main,sub}/wandb/      W&B's own files (`logging.wandb.enabled`)
  <local>/launch/                     `--slice=all`'s config, gin bindings and child pids
  <local>/warm_start/{main,sub}       the warm start's parameter checkpoints (or
                                      `warm_start.dir`)
The files under `<workdir>` other than checkpoints and store records are replaceable
files (`mgrpo_jax.store.folder`), named relative to the workdir by `RunPaths`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib


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

  @property
  def remote(self) -> bool:
    """Whether the workdir is not a local folder (then `local` is another folder)."""
    return "://" in self.workdir

  def checkpoints(self, role: str) -> str:
    return f"{self.workdir}/checkpoints/{role}"

  def logs(self, slice_name: str) -> pathlib.Path:
    """The local folder the slice's metrics are written in."""
    return self.local / "logs" / slice_name

  @staticmethod
  def logs_name(slice_name: str) -> str:
    """The slice's logs folder, relative to the workdir."""
    return f"logs/{slice_name}"

  @staticmethod
  def cache_name(slice_name: str) -> str:
    """The slice's write-ahead cache folder, relative to the workdir."""
    return f"{slice_name}/cache"

  @staticmethod
  def queue_name() -> str:
    """The unsynchronized arm's FIFO of S calls, one file per step, relative to the
    workdir."""
    return "sub/queue"

  @staticmethod
  def service_address_name() -> str:
    """The file the sub slice publishes its service's host:port in, relative to the
    workdir."""
    return "sub/service.json"


def warm_start_folder(config, paths: RunPaths) -> pathlib.Path:
  """`warm_start.dir` resolved against the run's folder (default `<local>/warm_start`)."""
  return (paths.local / (str(config.warm_start.dir) or "warm_start")).resolve()
