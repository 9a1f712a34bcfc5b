"""A clock for code that takes `clock` and `sleep` callables (rate limits, backoff).

Time moves only when the code under test sleeps (or a test moves `now`); every sleep is
recorded, rounded to nanoseconds so that sums of float intervals compare exactly.
"""

from __future__ import annotations


class FakeClock:
  """`clock()` reads `now`; `clock.sleep(s)` records s and advances `now` by it."""

  def __init__(self, now: float = 0.0):
    self.now = now
    self.sleeps: list[float] = []

  def __call__(self) -> float:
    return self.now

  def sleep(self, seconds: float) -> None:
    self.sleeps.append(round(seconds, 9))
    self.now += seconds
