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
