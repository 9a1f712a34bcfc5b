"""The statistics store: write-once records shared by the main and sub training slices.

`open_store(uri)` gives a `LocalStore` for a folder path (the default) or a `GCSStore`
for `gs://bucket/prefix`; `mgrpo_jax.store.schema` defines the M-GRPO records and keys.
"""

from mgrpo_jax.store.errors import (
    InvalidKeyError,
    RecordError,
    StoreConflictError,
    StoreError,
    StoreNotFoundError,
    StoreTimeoutError,
    StoreUnavailableError,
)
from mgrpo_jax.store.factory import open_store
from mgrpo_jax.store.local import LocalStore
from mgrpo_jax.store.protocol import Store

__all__ = [
    "InvalidKeyError",
    "LocalStore",
    "RecordError",
    "Store",
    "StoreConflictError",
    "StoreError",
    "StoreNotFoundError",
    "StoreTimeoutError",
    "StoreUnavailableError",
    "open_store",
]
