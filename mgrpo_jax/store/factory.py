"""`open_store(uri)`: a folder path gives `LocalStore`, `gs://bucket/prefix` gives `GCSStore`."""

from __future__ import annotations

import os

from mgrpo_jax.store.errors import InvalidKeyError
from mgrpo_jax.store.local import LocalStore
from mgrpo_jax.store.protocol import Store


def open_store(uri: str | os.PathLike[str]) -> Store:
  """Opens the store at `uri`: a local folder (created if missing) or `gs://bucket/prefix`.

  Raises:
    InvalidKeyError: the URI is empty or has another scheme (e.g. `s3://`).
  """
  text = os.fspath(uri)
  if not isinstance(text, str) or not text:
    raise InvalidKeyError(f"store URI must be a non-empty path or gs:// URI, got {uri!r}")
  if text.startswith("gs://"):
    from mgrpo_jax.store.gcs import GCSStore  # google-cloud-storage is imported on demand
    return GCSStore.from_uri(text)
  if "://" in text:
    scheme = text.split("://", 1)[0]
    raise InvalidKeyError(
        f"store URI {text!r} has unsupported scheme {scheme!r}://; use a local folder "
        "path or gs://bucket/prefix")
  return LocalStore(text)
