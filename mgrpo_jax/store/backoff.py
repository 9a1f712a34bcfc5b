"""Exponential backoff with jitter, and `wait_for` polling built on it (any backend)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from mgrpo_jax.store.errors import StoreTimeoutError
from mgrpo_jax.utils.retry import Backoff


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
