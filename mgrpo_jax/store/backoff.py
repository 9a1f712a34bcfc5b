"""Exponential backoff with jitter, and `wait_for` polling built on it (any backend)."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Iterable, Iterator

from mgrpo_jax.store.errors import StoreTimeoutError


@dataclasses.dataclass(frozen=True)
class Backoff:
  """Delays `initial * multiplier**n`, capped at `maximum`, each drawn in [d/2, d]."""

  initial: float = 0.01
  multiplier: float = 2.0
  maximum: float = 1.0

  def __post_init__(self):
    if not 0 < self.initial <= self.maximum or self.multiplier < 1:
      raise ValueError(f"invalid backoff {self}: need 0 < initial <= maximum, multiplier >= 1")

  def delays(self, rng: random.Random | None = None) -> Iterator[float]:
    """Yields an endless sequence of jittered delays in seconds."""
    rng = rng or random.Random()
    delay = self.initial
    while True:
      yield rng.uniform(delay / 2, delay)
      delay = min(delay * self.multiplier, self.maximum)


def wait_for_keys(exists: Callable[[str], bool], keys: Iterable[str], timeout: float, *,
                  where: str, backoff: Backoff = Backoff(),
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> None:
  """Polls `exists` until every key is present; raises `StoreTimeoutError` naming the rest.

  Keys found once are not polled again (the store is write-once). Every key is checked at
  least once, even with `timeout=0`.
  """
  if timeout < 0:
    raise ValueError(f"wait_for timeout must be >= 0, got {timeout}")
  missing = list(dict.fromkeys(keys))
  deadline = clock() + timeout
  delays = backoff.delays()
  while True:
    missing = [k for k in missing if not exists(k)]
    if not missing:
      return
    remaining = deadline - clock()
    if remaining <= 0:
      raise StoreTimeoutError(missing, timeout, where)
    sleep(min(next(delays), remaining))
