"""`GCSFolder`: the replaceable files of `store.folder` as objects under `gs://bucket/prefix`.

One upload replaces an object as a whole (a reader gets the old or the new generation,
never a part). Transient errors are retried until the `RetryPolicy` deadline, as the
store's (`gcs.GCSLocation`); a retried delete that finds the object gone is done.
"""

from __future__ import annotations

from google.api_core import exceptions as gexc

from mgrpo_jax.store.gcs import GCSLocation
from mgrpo_jax.store.keys import validate_file_name


class GCSFolder(GCSLocation):
  """Files as GCS objects named `<prefix>/<name>` in one bucket."""

  def child(self, name: str) -> GCSFolder:
    return GCSFolder(self._bucket_name, self._object_name(name), client=self._client,
                     retry_policy=self._policy)

  def write(self, name: str, data: bytes) -> None:
    blob = self._bucket.blob(self._object_name(name))
    self._call("write", name, lambda timeout: blob.upload_from_string(
        data, content_type="application/octet-stream", retry=None, timeout=timeout))

  def read(self, name: str) -> bytes | None:
    blob = self._bucket.blob(self._object_name(name))

    def attempt(timeout: float) -> bytes | None:
      try:
        return blob.download_as_bytes(retry=None, timeout=timeout)
      except gexc.NotFound:
        return None

    return self._call("read", name, attempt)

  def list(self, prefix: str = "") -> list[str]:
    start = len(self._object_prefix)

    def attempt(timeout: float) -> list[str]:
      blobs = self._client.list_blobs(self._bucket, prefix=self._object_prefix + prefix,
                                      retry=None, timeout=timeout)
      return [b.name[start:] for b in blobs]

    return sorted(self._call("list", prefix, attempt))

  def delete(self, name: str) -> None:
    blob = self._bucket.blob(self._object_name(name))

    def attempt(timeout: float) -> None:
      try:
        blob.delete(retry=None, timeout=timeout)
      except gexc.NotFound:
        pass

    self._call("delete", name, attempt)

  def _object_name(self, name: str) -> str:
    return self._object_prefix + validate_file_name(name)
