"""Deadline-bounded retries of remote store calls, failing with `StoreUnavailableError`."""

from __future__ import annotations

import functools

from mgrpo_jax.store.errors import StoreUnavailableError
from mgrpo_jax.utils import retry as _retry

RetryPolicy = _retry.RetryPolicy
call_with_retry = functools.partial(_retry.call_with_retry, error_type=StoreUnavailableError)

__all__ = ["RetryPolicy", "call_with_retry"]
