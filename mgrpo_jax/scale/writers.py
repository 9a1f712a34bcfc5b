"""What process 0 alone writes: console lines (`log`) and a slice's metrics.

The other processes of a multi-host slice stay silent and write no metrics; with one
process, process 0 is the only one. A process's console is short by default (a training
step's line names the few numbers a reader follows); `set_verbose(True)` (the
launcher's `--verbose`, passed on to its children) asks for the full lines.
"""

from __future__ import annotations

import json
import sys
import threading

from mgrpo_jax.metrics import MetricsWriter, WandbRun
from mgrpo_jax.scale import distributed
from mgrpo_jax.training.paths import RunPaths


class NoMetrics:
  """The metrics writer of processes other than 0: writes nothing."""

  def write(self, step: int, scalars: dict[str, float], *, provisional: bool = False) -> None:
    del step, scalars, provisional

  def close(self) -> None:
    pass


def metrics_writer(paths: RunPaths, slice_name: str, config) -> MetricsWriter | NoMetrics:
  """The slice's metrics.jsonl / TensorBoard (/ W&B) writer on process 0; a no-op elsewhere."""
  if not distributed.is_writer():
    return NoMetrics()
  wandb = config.logging.wandb
  wandb_run = WandbRun(
      paths.logs(slice_name), project=str(wandb.project), entity=str(wandb.entity),
      mode=str(wandb.mode), group=str(config.experiment.run_id), slice_name=slice_name,
      config=json.loads(config.to_json())) if wandb.enabled else None
  return MetricsWriter(paths.logs(slice_name), tensorboard=bool(config.logging.tensorboard),
                       wandb_run=wandb_run)


_LINE = threading.local()
_CONSOLE = {"verbose": False}


def set_verbose(verbose: bool) -> None:
  """Whether this process's console lines are the full ones (module docstring)."""
  _CONSOLE["verbose"] = bool(verbose)


def is_verbose() -> bool:
  """Whether `set_verbose(True)` was called in this process."""
  return _CONSOLE["verbose"]


def set_line_prefix(prefix: str) -> None:
  """Starts this thread's `log` lines with `prefix` (both slices in one process)."""
  _LINE.prefix = prefix


def log(message: str) -> None:
  """One line on stdout, flushed (the `--slice=all` parent prefixes and relays it).

  Process 0 only: the other processes of a multi-host slice stay silent.
  """
  if not distributed.is_writer():
    return
  sys.stdout.write(f"{getattr(_LINE, 'prefix', '')}{message}\n")
  sys.stdout.flush()
