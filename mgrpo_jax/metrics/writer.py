"""Scalar metrics to `metrics.jsonl` and TensorBoard event files in a run folder, and
optionally to a Weights & Biases run (`wandb_run.py`).

One JSON object per line: `{"step": int, "time": float, "<name>": float, ...}`. Names are
namespaced by agent and phase, e.g. `main/reward_mean`, `sub/advantage_std`,
`time/rollout_s`. A slice that restarts from a checkpoint writes its steps again; readers
keep the last line written for each step (`read_metrics`).
"""

from __future__ import annotations

import json
import math
import pathlib
import time
from collections.abc import Mapping

from tensorboardX import SummaryWriter

from mgrpo_jax.metrics.wandb_run import WandbRun


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
    self._file = self.path.open("a", encoding="utf-8")
    self._tb = SummaryWriter(str(self.logdir / "tensorboard")) if tensorboard else None
    self._wandb = wandb_run

  def write(self, step: int, scalars: Mapping[str, float], *, provisional: bool = False
            ) -> None:
    """Records `scalars` for `step`. Values must be finite-or-nan real numbers.

    `provisional`: the line goes to metrics.jsonl only, not to TensorBoard or W&B. A slice
    writes one before it commits a step (checkpoint, ack), then the step's full line, which
    readers take instead (`read_metrics`); a process killed between the two still leaves
    the step a line.
    """
    record: dict[str, float | int] = {"step": int(step), "time": time.time()}
    for name, value in scalars.items():
      if name in record:
        raise ValueError(f"metric name {name!r} is reserved")
      try:
        record[name] = float(value)
      except (TypeError, ValueError) as e:
        raise ValueError(f"metric {name!r} at step {step} is not a number: {value!r}") from e
    self._file.write(json.dumps(record, sort_keys=True, allow_nan=True) + "\n")
    self._file.flush()
    if provisional:
      return
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


def read_metrics(path: str | pathlib.Path) -> list[dict[str, float]]:
  """Reads a metrics.jsonl file: one dict per step, the last line written for each step wins.

  A truncated last line (a process killed mid-write) is skipped; any other malformed line
  raises ValueError naming the path and line number.
  """
  path = pathlib.Path(path)
  by_step: dict[int, dict[str, float]] = {}
  lines = path.read_text(encoding="utf-8").splitlines()
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
      step = int(record["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
      if number == len(lines):
        break
      raise ValueError(f"{path}:{number}: not a metrics record ({e})") from e
    by_step[step] = record
  return [by_step[s] for s in sorted(by_step)]
