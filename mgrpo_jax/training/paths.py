"""Where one run keeps its files: `RunPaths`.

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
  <local>/warm_start/{main,sub}      the warm start's parameter checkpoints (or
                                     `warm_start.dir`)
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

  def checkpoints(self, role: str) -> str:
    return f"{self.workdir}/checkpoints/{role}"

  def logs(self, slice_name: str) -> pathlib.Path:
    return self.local / "logs" / slice_name

  def cache(self, slice_name: str) -> pathlib.Path:
    return self.local / slice_name / "cache"

  def service_address(self) -> pathlib.Path:
    """The file the sub slice publishes its service's host:port in."""
    return self.local / "sub" / "service.json"


def warm_start_folder(config, paths: RunPaths) -> pathlib.Path:
  """`warm_start.dir` resolved against the run's folder (default `<local>/warm_start`)."""
  return (paths.local / (str(config.warm_start.dir) or "warm_start")).resolve()
