"""Scalar metrics to `metrics.jsonl` and TensorBoard event files in a run folder, and
optionally to a Weights & Biases run (`wandb_run.py`).

One JSON object per line: `{"step": int, "time": float, "<name>": float, ...}`. Names are
namespaced by agent and phase, e.g. `main/reward_mean`, `sub/advantage_std`,
`time/rollout_s`. A step's provisional line (written before the step is committed)
also holds `"provisional": true`; its full line follows, and readers keep the last line
written for each step (`read_metrics`). A step whose full line the file already holds is
not written again: a slice that falls back to an older checkpoint and redoes steps
leaves their lines (and TensorBoard and W&B points) as they were.
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from collections.abc import Mapping

from mgrpo_jax.metrics.wandb_run import WandbRun

PROVISIONAL = "provisional"  # the key that marks a step's provisional line


class MetricsWriter:
  """Appends scalar metrics of each step to `<logdir>/metrics.jsonl` and TensorBoard.

  Args:
    logdir: the folder of metrics.jsonl and `tensorboard/`.
    tensorboard: also write TensorBoard event files (finite values only).
    filename: the JSON-lines file's name.
    wandb_run: also log every record, non-finite values included, to this W&B run
      (closed with the writer).
  """

  def __init__(self, logdir: str | pathlib.Path, *, tensorboard: bool = True,
               filename: str = "metrics.jsonl", wandb_run: WandbRun | None = None) -> None:
    self.logdir = pathlib.Path(logdir)
    self.logdir.mkdir(parents=True, exist_ok=True)
    self.path = self.logdir / filename
    self._written = _fully_written_steps(self.path)
    self._file = self.path.open("a", encoding="utf-8")
    self._tb = _summary_writer(self.logdir / "tensorboard") if tensorboard else None
    self._wandb = wandb_run

  def write(self, step: int, scalars: Mapping[str, float], *, provisional: bool = False
            ) -> None:
    """Records `scalars` for `step`. Values must be finite-or-nan real numbers.

    `provisional`: the line goes to metrics.jsonl only, not to TensorBoard or W&B. A slice
    writes one before it commits a step (checkpoint, ack), then the step's full line, which
    readers take instead (`read_metrics`); a process killed between the two still leaves
    the step a line. A step with a full line already (from an earlier run of the slice)
    is not written again.
    """
    if int(step) in self._written:
      return
    record: dict[str, float | int] = {"step": int(step), "time": time.time()}
    if provisional:
      record[PROVISIONAL] = True
    for name, value in scalars.items():
      if name in record or name == PROVISIONAL:
        raise ValueError(f"metric name {name!r} is reserved")
      try:
        record[name] = float(value)
      except (TypeError, ValueError) as e:
        raise ValueError(f"metric {name!r} at step {step} is not a number: {value!r}") from e
    self._file.write(json.dumps(record, sort_keys=True, allow_nan=True) + "\n")
    self._file.flush()
    if provisional:
      return
    self._written.add(int(step))
    if self._tb is not None:
      for name, value in record.items():
        if name not in ("step", "time") and math.isfinite(value):
          self._tb.add_scalar(name, value, global_step=int(step))
      self._tb.flush()
    if self._wandb is not None:
      self._wandb.log(step, {k: v for k, v in record.items() if k not in ("step", "time")})

  def close(self) -> None:
    self._file.close()
    if self._tb is not None:
      self._tb.close()
    if self._wandb is not None:
      self._wandb.close()

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def _fully_written_steps(path: pathlib.Path) -> set[int]:
  """The steps with a full (not provisional) line in the metrics file at `path`, after
  cutting a torn last line (a process killed mid-write), which appending would join."""
  if not path.exists():
    return set()
  data = path.read_bytes()
  if data and not data.endswith(b"\n"):
    with path.open("r+b") as f:
      f.truncate(data.rfind(b"\n") + 1)
  return {r["step"] for r in _records(path) if not r.get(PROVISIONAL)}


def _records(path: pathlib.Path) -> list[dict[str, float]]:
  """Every line of a metrics file, in order (see `read_metrics` for malformed ones)."""
  records = []
  lines = path.read_text(encoding="utf-8").splitlines()
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
      record["step"] = int(record["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
      if number == len(lines):
        break
      raise ValueError(f"{path}:{number}: not a metrics record ({e})") from e
    records.append(record)
  return records


def read_metrics(path: str | pathlib.Path) -> list[dict[str, float]]:
  """Reads a metrics.jsonl file: one dict per step, the last line written for each step wins.

  A truncated last line (a process killed mid-write) is skipped; any other malformed line
  raises ValueError naming the path and line number.
  """
  by_step = {record["step"]: record for record in _records(pathlib.Path(path))}
  return [by_step[s] for s in sorted(by_step)]


def _summary_writer(logdir: pathlib.Path):
  """A TensorBoard event writer in `logdir`, imported only by the processes that write
  events (tensorboardX imports google-cloud-storage: 0.3 s of every process's start)."""
  from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
  return SummaryWriter(str(logdir))
