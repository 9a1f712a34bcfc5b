"""What both slices share: the settings the step protocol relies on, the store, timing."""

from __future__ import annotations

import time

from mgrpo_jax.store import open_store
from mgrpo_jax.store.protocol import Store
from mgrpo_jax.training.paths import RunPaths


def check_config(config) -> None:
  """Settings the step protocol relies on; raises ValueError naming the key."""
  staleness = int(config.mgrpo.staleness)
  if int(config.checkpoint.keep) < staleness + 1:
    raise ValueError(f"checkpoint.keep={config.checkpoint.keep} must be >= mgrpo.staleness + 1 "
                     f"= {staleness + 1}: a restarted sub slice serves the older versions")


def metrics_due(config, step: int) -> bool:
  """Whether step `step`'s metrics are written: every `logging.every`-th step (counted
  from 1) and the run's last one."""
  done = step + 1
  return done % int(config.logging.every) == 0 or done == int(config.experiment.num_steps)


def open_run_store(paths: RunPaths) -> Store:
  return open_store(paths.store_uri)


def describe_steps(start: int, num_steps: int) -> str:
  """"steps 3..9" for the steps a slice will run, or why it runs none."""
  if start >= num_steps:
    return f"all {num_steps} steps are done (a new run needs a new workdir or run_id)"
  return f"steps {start}..{num_steps - 1}"


class Timer:
  """Accumulates wall seconds per phase: `with timer("update"): ...`; `elapsed()`: the
  wall seconds since it was made (a step's, phases or not)."""

  def __init__(self):
    self.seconds: dict[str, float] = {}
    self._started = time.perf_counter()

  def __call__(self, phase: str) -> _Phase:
    return _Phase(self, phase)

  def elapsed(self) -> float:
    return time.perf_counter() - self._started


class _Phase:

  def __init__(self, timer: Timer, phase: str):
    self._timer, self._phase = timer, phase

  def __enter__(self) -> None:
    self._start = time.perf_counter()

  def __exit__(self, *exc) -> None:
    elapsed = time.perf_counter() - self._start
    self._timer.seconds[self._phase] = self._timer.seconds.get(self._phase, 0.0) + elapsed
