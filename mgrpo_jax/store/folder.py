"""`open_folder(uri)`: replaceable files of a run under a local folder or `gs://bucket/prefix`.

The store's records are write-once; a slice's write-ahead caches, its service address
and its logs are not (a cache is deleted once its step is acknowledged, an address file
replaced when the service restarts, a log grows). A `Folder` holds such files under the
run's workdir, so a slice restarted on another machine finds them:
  * `write(name, data)` replaces the file as a whole: readers see the old or the new
    bytes, never a part (a local temporary file renamed over it; one GCS upload);
  * `read(name)` is None for a missing file; `delete(name)` of a missing file is a no-op;
  * `list(prefix)` returns the names below the folder that start with `prefix`, sorted.
Names are `/`-separated relative paths; no segment is empty, `.`, `..` or starts with
`.` (hidden names are the local backend's temporary files).
"""

from __future__ import annotations

import os
import pathlib
from typing import Protocol, runtime_checkable

from mgrpo_jax.store.errors import InvalidKeyError
from mgrpo_jax.store.keys import validate_file_name
from mgrpo_jax.utils.atomic_files import atomic_write


@runtime_checkable
class Folder(Protocol):
  """Replaceable files under one root (see the module docstring)."""

  @property
  def uri(self) -> str:
    ...

  def child(self, name: str) -> Folder:
    """The folder `name` below this one."""
    ...

  def write(self, name: str, data: bytes) -> None:
    ...

  def read(self, name: str) -> bytes | None:
    ...

  def list(self, prefix: str = "") -> list[str]:
    ...

  def delete(self, name: str) -> None:
    ...


class LocalFolder:
  """Files under a local folder; `write` is `atomic_write` (fsynced)."""

  def __init__(self, root: str | os.PathLike[str]):
    self._root = pathlib.Path(root).absolute()

  @property
  def uri(self) -> str:
    return str(self._root)

  def path(self, name: str) -> pathlib.Path:
    return self._root / validate_file_name(name)

  def child(self, name: str) -> LocalFolder:
    return LocalFolder(self.path(name))

  def write(self, name: str, data: bytes) -> None:
    atomic_write(self.path(name), data)

  def read(self, name: str) -> bytes | None:
    try:
      return self.path(name).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
      return None

  def list(self, prefix: str = "") -> list[str]:
    base = self._root / prefix.rpartition("/")[0]
    found = []
    for folder, subfolders, files in os.walk(base):
      subfolders[:] = [d for d in subfolders if not d.startswith(".")]
      rel = pathlib.Path(folder).relative_to(self._root).as_posix()
      names = (n if rel == "." else f"{rel}/{n}" for n in files if not n.startswith("."))
      found.extend(n for n in names if n.startswith(prefix))
    return sorted(found)

  def delete(self, name: str) -> None:
    """Removes the file, then its parent folders that it leaves empty."""
    path = self.path(name)
    path.unlink(missing_ok=True)
    for parent in path.parents:
      if parent == self._root or not parent.is_relative_to(self._root):
        break
      try:
        parent.rmdir()
      except OSError:  # not empty (or gone)
        break


def open_folder(uri: str | os.PathLike[str]) -> Folder:
  """The folder at `uri`: a local path (created on the first write) or `gs://bucket/prefix`."""
  text = os.fspath(uri)
  if text.startswith("gs://"):
    from mgrpo_jax.store.gcs_folder import GCSFolder  # google-cloud-storage on demand
    return GCSFolder.from_uri(text)
  if "://" in text:
    raise InvalidKeyError(f"folder URI {text!r}: use a local path or gs://bucket/prefix")
  return LocalFolder(text)
