"""What a slice records of its steps: `StepLog`, built by `runtime.open_runtime`.

Each step's metrics go to metrics.jsonl / TensorBoard / W&B (`scale.writers.metrics_writer`,
every `logging.every`-th step and the last), twice: a provisional line before the step's
checkpoint and ack (`record_before_commit`: a process killed after them keeps the step a
line), then the full one with the step's console line (`report`, `step_line`). With a
`gs://` workdir the logs are written locally and copied to the workdir after every
written step (`log_mirror.py`). With several processes, process 0 alone writes.
"""

from __future__ import annotations

import dataclasses

import ml_collections

from mgrpo_jax.metrics import MetricsWriter, format_progress, format_step
from mgrpo_jax.scale import distributed
from mgrpo_jax.scale.writers import NoMetrics, is_verbose, log, metrics_writer
from mgrpo_jax.slices.common import Timer, metrics_due
from mgrpo_jax.slices.log_mirror import LogMirror
from mgrpo_jax.store.folder import Folder
from mgrpo_jax.training.paths import RunPaths

# (label, metric) of the numbers a step's default console line shows, per slice, where
# the step has them; metrics.jsonl holds them all.
HEADLINE = {"main": (("R_M", "main/reward_mean"), ("correct", "main/correct_mean"),
                     ("format", "main/format_ok_mean"), ("sub-calls", "main/sub_calls_mean")),
            "sub": (("R_S", "sub/reward_mean"), ("calls", "sub/calls"))}


def step_line(role: str, step: int, num_steps: int, scalars: dict[str, float], timer: Timer,
              throughput: dict[str, float], progress: dict[str, float]) -> str:
  """The console line of the `role` slice's step `step` (0-based): its `HEADLINE`
  numbers and wall seconds (`metrics.format_step`); with `--verbose`
  (`writers.is_verbose`) the full line: `progress`, every phase's seconds and the
  throughputs (`metrics.format_progress`)."""
  if is_verbose():
    return format_progress(step + 1, num_steps, progress, timer.seconds, throughput)
  headline = {label: scalars[key] for label, key in HEADLINE[role] if key in scalars}
  return format_step(step + 1, num_steps, headline, timer.elapsed())


@dataclasses.dataclass
class StepLog:
  """The `role` slice's metrics writer, console lines and log mirror (module docstring).

  Attributes:
    role: "main" or "sub".
    config: the run's config (`logging.*`, `experiment.num_steps`).
    paths: the run's folders (the local logs folder, whether the workdir is remote).
    files: the workdir's replaceable files (the mirrored logs go under it).
    writer: the metrics writer, from `start` (a no-op on processes other than 0).
    mirror: the logs' copy in a `gs://` workdir, from `start` (None: local workdir).
  """

  role: str
  config: ml_collections.ConfigDict
  paths: RunPaths
  files: Folder
  writer: MetricsWriter | NoMetrics | None = None
  mirror: LogMirror | None = None

  def start(self) -> None:
    """Opens the slice's metrics writer (metrics.jsonl, TensorBoard, W&B), with a
    `gs://` workdir after fetching the run's logs this machine lacks."""
    if self.paths.remote and distributed.is_writer():
      self.mirror = LogMirror(self.paths.logs(self.role),
                              self.files.child(self.paths.logs_name(self.role)))
      self.mirror.restore()
    self.writer = metrics_writer(self.paths, self.role, self.config)

  def record_before_commit(self, step: int, scalars: dict[str, float], timer: Timer,
                           throughput: dict[str, float]) -> None:
    """The step's metrics so far as a provisional line (metrics.jsonl, mirrored), written
    before the step's checkpoint and ack: a process killed after those and before `report`
    resumes past the step, whose line would otherwise be lost."""
    self._write(step, dict(scalars), timer, throughput, provisional=True)

  def report(self, step: int, scalars: dict[str, float], timer: Timer,
             throughput: dict[str, float], progress: dict[str, float]) -> None:
    """The step's metrics (with its phase times and throughputs; `logging.every`) and
    its console line (`step_line`)."""
    self._write(step, scalars, timer, throughput, provisional=False)
    log(step_line(self.role, step, int(self.config.experiment.num_steps), scalars, timer,
                  throughput, progress))

  def _write(self, step: int, scalars: dict[str, float], timer: Timer,
             throughput: dict[str, float], *, provisional: bool) -> None:
    for phase, seconds in timer.seconds.items():
      scalars[f"time/{phase}_s"] = seconds
    scalars.update({f"throughput/{k}_tokens_per_s": v for k, v in throughput.items()})
    if metrics_due(self.config, step):
      self.writer.write(step, scalars, provisional=provisional)
      if self.mirror is not None:
        self.mirror.sync()

  def close(self) -> None:
    """Closes the metrics writer and copies the logs a last time."""
    if self.writer is not None:
      self.writer.close()
    if self.mirror is not None:
      self.mirror.sync()
