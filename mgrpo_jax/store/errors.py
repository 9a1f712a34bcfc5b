"""Errors raised by the statistics store; every message names the key or URI involved."""

from __future__ import annotations

from collections.abc import Sequence


class StoreError(Exception):
  """Base class of all store errors."""


class InvalidKeyError(StoreError, ValueError):
  """A key, prefix or store URI is malformed or cannot be stored."""


class StoreConflictError(StoreError):
  """A write-once key already holds different bytes."""

  def __init__(self, key: str, where: str):
    super().__init__(
        f"store key {key!r} in {where} already holds different bytes; records are "
        "write-once (re-putting identical bytes is allowed)")
    self.key = key


class StoreNotFoundError(StoreError, LookupError):
  """A key that was read does not exist."""

  def __init__(self, key: str, where: str):
    super().__init__(f"store key {key!r} not found in {where}")
    self.key = key


class StoreTimeoutError(StoreError, TimeoutError):
  """`wait_for` ran out of time before every key appeared."""

  def __init__(self, missing: Sequence[str], timeout: float, where: str):
    shown = ", ".join(repr(k) for k in missing[:20])
    more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
    super().__init__(
        f"timed out after {timeout:g}s waiting for {len(missing)} key(s) in {where}: "
        f"{shown}{more}")
    self.missing = tuple(missing)


class StoreUnavailableError(StoreError):
  """A remote operation kept failing with transient errors until its deadline."""


class RecordError(StoreError, ValueError):
  """A stored record does not match its schema."""

  def __init__(self, key: str, field: str, problem: str):
    super().__init__(f"record {key!r}: field {field!r}: {problem}")
    self.key = key
    self.field = field
