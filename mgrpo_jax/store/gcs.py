"""`GCSStore`: write-once records as objects under `gs://bucket/prefix`.

Write-once comes from the upload precondition `if_generation_match=0` (create only). On
412 the existing object is downloaded and compared: identical bytes are a no-op (this is
also what a retry sees when an earlier attempt's upload landed but its response was
lost), different bytes raise `StoreConflictError`. 429, 408, 5xx and connection errors
are retried with exponential backoff and jitter until `RetryPolicy.deadline`, then
`StoreUnavailableError` names the operation and key. Credentials come from
`google.auth.default()`; when `STORAGE_EMULATOR_HOST` is set (tests, benchmarks) the
client is anonymous. Credentials are never printed or logged.
"""

from __future__ import annotations

import http.client
import os
import re
from collections.abc import Callable, Iterable
from typing import Any, Self, TypeVar

import requests
import urllib3
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud import storage

from mgrpo_jax.store import keys as keys_lib
from mgrpo_jax.store.backoff import wait_for_keys
from mgrpo_jax.store.errors import (
    InvalidKeyError,
    StoreConflictError,
    StoreError,
    StoreNotFoundError,
)
from mgrpo_jax.store.retry import RetryPolicy, call_with_retry

T = TypeVar("T")

_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
_TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})
_TRANSIENT_TYPES = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.PoolError,
    http.client.HTTPException,
    auth_exc.TransportError,
    ConnectionError,
    TimeoutError,
)


def is_transient(error: BaseException) -> bool:
  """Whether a GCS call that raised `error` may succeed when retried (408/429/5xx, I/O)."""
  if isinstance(error, gexc.GoogleAPICallError):
    return error.code in _TRANSIENT_CODES
  return isinstance(error, _TRANSIENT_TYPES)


def parse_gcs_uri(uri: str) -> tuple[str, str]:
  """Splits `gs://bucket/a/b` into (`bucket`, `a/b`); the prefix may be empty."""
  if not uri.startswith("gs://"):
    raise InvalidKeyError(f"GCS store URI {uri!r} must start with gs://")
  bucket, _, prefix = uri[len("gs://"):].partition("/")
  prefix = prefix.rstrip("/")
  if not _BUCKET.fullmatch(bucket):
    raise InvalidKeyError(f"GCS store URI {uri!r} has an invalid bucket name {bucket!r}")
  if prefix and not keys_lib.is_valid_key(prefix):
    raise InvalidKeyError(
        f"GCS store URI {uri!r} has an invalid prefix {prefix!r} (same rules as keys)")
  return bucket, prefix


def default_client() -> storage.Client:
  """An anonymous client for `STORAGE_EMULATOR_HOST`, else one with default credentials."""
  if os.environ.get("STORAGE_EMULATOR_HOST"):
    from google.auth.credentials import AnonymousCredentials
    return storage.Client(project="emulator", credentials=AnonymousCredentials())
  import google.auth
  try:
    credentials, project = google.auth.default(scopes=_SCOPES)
  except auth_exc.DefaultCredentialsError as e:
    raise StoreError(
        "GCS store: no default Google credentials found (run `gcloud auth "
        "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS)") from e
  return storage.Client(project=project, credentials=credentials)


class GCSLocation:
  """A bucket and an object prefix in it, with the client and the retry policy of the
  calls made there (the base of `GCSStore` and `store.gcs_folder.GCSFolder`)."""

  def __init__(self, bucket: str, prefix: str = "", *, client: storage.Client | None = None,
               retry_policy: RetryPolicy | None = None):
    self._uri = f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"
    parse_gcs_uri(self._uri)
    self._bucket_name = bucket
    self._object_prefix = f"{prefix}/" if prefix else ""
    self._client = client or default_client()
    self._bucket = self._client.bucket(bucket)
    self._policy = retry_policy or RetryPolicy()

  @classmethod
  def from_uri(cls, uri: str, **kwargs: Any) -> Self:
    bucket, prefix = parse_gcs_uri(uri)
    return cls(bucket, prefix, **kwargs)

  @property
  def uri(self) -> str:
    return self._uri

  def _call(self, operation: str, name: str, attempt: Callable[[float], T]) -> T:
    """Runs `attempt(timeout)`, retrying transient errors (`is_transient`) until the
    policy's deadline; another GCS error becomes a `StoreError` naming `name`."""
    described = f"GCS {operation} of {name!r} in {self.uri}"
    try:
      return call_with_retry(attempt, policy=self._policy, is_transient=is_transient,
                             operation=described)
    except gexc.GoogleAPICallError as e:
      hint = " (does the bucket exist?)" if e.code == 404 else ""
      raise StoreError(f"{described} failed: {e.code} {e.message}{hint}") from e


class GCSStore(GCSLocation):
  """Write-once records as GCS objects named `<prefix>/<key>` in one bucket."""

  def put(self, key: str, data: bytes) -> None:
    key = keys_lib.validate_key(key)
    data = keys_lib.as_record_bytes(key, data)

    def attempt(timeout: float) -> bool:
      try:
        self._blob(key).upload_from_string(
            data, content_type="application/octet-stream", if_generation_match=0,
            retry=None, timeout=timeout)
      except gexc.PreconditionFailed:
        return False
      return True

    if not self._call("put", key, attempt) and self._download(key) != data:
      raise StoreConflictError(key, self.uri)

  def get(self, key: str) -> bytes:
    return self._download(keys_lib.validate_key(key))

  def exists(self, key: str) -> bool:
    key = keys_lib.validate_key(key)
    return self._call(
        "exists", key, lambda timeout: self._blob(key).exists(retry=None, timeout=timeout))

  def list(self, prefix: str = "") -> list[str]:
    prefix = keys_lib.validate_prefix(prefix)

    def attempt(timeout: float) -> list[str]:
      blobs = self._client.list_blobs(
          self._bucket, prefix=self._object_prefix + prefix, retry=None, timeout=timeout)
      return [b.name for b in blobs]

    start = len(self._object_prefix)
    names = self._call("list", prefix, attempt)
    return sorted(n[start:] for n in names if keys_lib.is_valid_key(n[start:]))

  def wait_for(self, keys: Iterable[str], timeout: float) -> None:
    keys = [keys_lib.validate_key(k) for k in keys]
    wait_for_keys(self.exists, keys, timeout, where=self.uri)

  def _blob(self, key: str) -> storage.Blob:
    return self._bucket.blob(self._object_prefix + key)

  def _download(self, key: str) -> bytes:

    def attempt(timeout: float) -> bytes:
      try:
        return self._blob(key).download_as_bytes(retry=None, timeout=timeout)
      except gexc.NotFound:
        raise StoreNotFoundError(key, self.uri) from None

    return self._call("get", key, attempt)
