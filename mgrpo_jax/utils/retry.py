"""Deadline-bounded retries with exponential backoff and jitter (store, RPC clients)."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


class RetryDeadlineError(RuntimeError):
  """A transient failure outlasted the retry deadline."""


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


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
  """How long a remote operation keeps retrying transient failures.

  Attributes:
    deadline: seconds from the first attempt after which the operation gives up.
    request_timeout: seconds one HTTP attempt may take (capped by the time left).
    backoff: the delays between attempts.
  """

  deadline: float = 120.0
  request_timeout: float = 30.0
  backoff: Backoff = Backoff(initial=0.1, multiplier=2.0, maximum=10.0)

  def __post_init__(self):
    if self.deadline <= 0 or self.request_timeout <= 0:
      raise ValueError(f"invalid retry policy {self}: deadline and request_timeout must be > 0")


def call_with_retry(attempt: Callable[[float], T], *, policy: RetryPolicy,
                    is_transient: Callable[[BaseException], bool], operation: str,
                    error_type: Callable[[str], Exception] = RetryDeadlineError,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> T:
  """Calls `attempt(timeout_s)` until it returns, retrying transient errors.

  Non-transient errors propagate at once. When the deadline passes, raises
  `StoreUnavailableError` naming `operation` (e.g. "put 'runs/x/...' to gs://b/p"),
  the number of attempts and the last error's type and message.
  """
  start = clock()
  delays = policy.backoff.delays()
  attempts = 0
  while True:
    remaining = policy.deadline - (clock() - start)
    attempts += 1
    try:
      return attempt(max(min(policy.request_timeout, remaining), 0.1))
    except Exception as e:  # noqa: BLE001 (classified just below)
      if not is_transient(e):
        raise
      remaining = policy.deadline - (clock() - start)
      if remaining <= 0:
        message = str(e).splitlines()[0][:300] if str(e) else ""
        raise error_type(
            f"{operation} failed after {attempts} attempt(s) over {clock() - start:.1f}s "
            f"(deadline {policy.deadline:g}s); last error: {type(e).__name__}: {message}"
        ) from e
      sleep(min(next(delays), remaining))
