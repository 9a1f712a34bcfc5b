"""The timing helper the benchmark scripts share (each script runs with this folder on
`sys.path`, as `python benchmarks/<script>.py` puts it there)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
  """The median wall time of `repeats` calls of `fn` (seconds)."""
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def timed_updates(update: Callable, state, batch, repeats: int):
  """`update(state, batch) -> (state, metrics)` once (compiling it), then `repeats` times,
  each step waited for. Returns (state, the first step's seconds, the timed steps'
  seconds, the first step's metrics as floats)."""
  import jax

  start = time.perf_counter()
  state, metrics = update(state, batch)
  jax.block_until_ready(state)
  first_s = time.perf_counter() - start
  first = {name: float(value) for name, value in metrics.items()}
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    state, _ = update(state, batch)
    jax.block_until_ready(state)
    times.append(time.perf_counter() - start)
  return state, first_s, times, first
