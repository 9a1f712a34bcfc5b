"""The `Store` protocol: a write-once key -> bytes map shared by the two training slices.

The main slice publishes per-step outcomes and acknowledgements; the sub slice waits for
them (docs/ALGORITHM.md, "The step protocol"). Every backend guarantees:
  * `put` is write-once: identical bytes again is a no-op, different bytes raise
    `StoreConflictError`; a record is visible only once complete.
  * `get` raises `StoreNotFoundError` for a missing key.
  * `list(prefix)` returns the keys starting with `prefix` (plain string prefix), sorted.
  * `wait_for(keys, timeout)` polls with backoff; raises `StoreTimeoutError` naming the
    keys still missing.
Keys follow `mgrpo_jax.store.keys`. A key must not also be a folder of other keys
(`a/b` and `a/b/c`): GCS allows it, a local folder cannot hold it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable


@runtime_checkable
class Store(Protocol):
  """A write-once key -> bytes store (see the module docstring for the contract)."""

  @property
  def uri(self) -> str:
    """Where the store lives: a folder path or `gs://bucket/prefix`."""
    ...

  def put(self, key: str, data: bytes) -> None:
    ...

  def get(self, key: str) -> bytes:
    ...

  def exists(self, key: str) -> bool:
    ...

  def list(self, prefix: str = "") -> list[str]:
    ...

  def wait_for(self, keys: Iterable[str], timeout: float) -> None:
    ...
