"""A minimum interval between the requests to one host, shared by the threads of a run.

Each request reserves the host's next free slot under a lock and sleeps outside it until
then, so concurrent callers (the sub-agent service's threads) queue one interval apart
instead of all waking at once. The clock and the sleep are injectable: tests record the
requested sleeps instead of waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class HostRateLimiter:
  """At least `min_interval_s` seconds between the starts of two requests to one host.

  Args:
    min_interval_s: the interval (0: no limit).
    clock: monotonic seconds.
    sleep: waits the given seconds.
  """

  def __init__(self, min_interval_s: float, *, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep):
    if min_interval_s < 0:
      raise ValueError(f"min_interval_s must be >= 0, got {min_interval_s}")
    self._interval = min_interval_s
    self._clock = clock
    self._sleep = sleep
    self._lock = threading.Lock()
    self._next: dict[str, float] = {}  # host -> when its next request may start

  def wait(self, host: str) -> float:
    """Blocks until a request to `host` may start; returns the seconds it waited."""
    if self._interval <= 0:
      return 0.0
    with self._lock:
      now = self._clock()
      start = max(now, self._next.get(host, now))
      self._next[host] = start + self._interval
    delay = start - now
    if delay > 0:
      self._sleep(delay)
    return delay
