"""`LocalStore`: the default store, a folder on a local or shared POSIX file system.

Publishing is atomic and write-once across processes: the bytes go to a hidden temporary
file in the key's folder, which is fsynced and then hard-linked to the final name
(`os.link` fails if the name exists, so exactly one writer wins); the folder is fsynced
after the link. A reader therefore sees either no record or the complete record, also
after a crash (a killed writer leaves only a hidden `.tmp-*` file, never listed). A
write the file system refuses (full, read-only, no permission) raises `StoreError`
naming the path, and leaves nothing behind.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from mgrpo_jax.store import keys as keys_lib
from mgrpo_jax.store.backoff import wait_for_keys
from mgrpo_jax.store.errors import (
    InvalidKeyError,
    StoreConflictError,
    StoreError,
    StoreNotFoundError,
)
from mgrpo_jax.utils.atomic_files import fsync_folder

_TEMP_PREFIX = ".tmp-"


class LocalStore:
  """Write-once records under a folder; key `a/b/c` is the file `<root>/a/b/c`."""

  def __init__(self, root: str | os.PathLike[str]):
    self._root = Path(root).absolute()
    try:
      self._root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
      raise InvalidKeyError(f"store root {str(self._root)!r} is not a folder") from e
    except OSError as e:
      raise StoreError(f"store root {self._root}: cannot create it ({e.strerror or e})") from e

  @property
  def uri(self) -> str:
    return str(self._root)

  def put(self, key: str, data: bytes) -> None:
    key = keys_lib.validate_key(key)
    data = keys_lib.as_record_bytes(key, data)
    path = self._root / key
    if self._matches_existing(key, path, data):
      return
    try:
      self._make_folders(key, path.parent)
      fd, temp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=path.parent)
    except OSError as e:  # a read-only or full file system, no permission
      raise StoreError(f"store key {key!r}: cannot write in {path.parent} "
                       f"({e.strerror or e})") from e
    try:
      try:
        with os.fdopen(fd, "wb") as f:
          f.write(data)
          f.flush()
          os.fchmod(f.fileno(), 0o444)
          os.fsync(f.fileno())
      except OSError as e:  # a full disk or quota
        raise StoreError(f"store key {key!r}: cannot write {temp_name} "
                         f"({e.strerror or e}); nothing was stored") from e
      try:
        os.link(temp_name, path)
      except FileExistsError:
        if not self._matches_existing(key, path, data):
          raise StoreError(f"store key {key!r} vanished from {self.uri} during put") from None
        return
      except OSError as e:  # no hard links here (some FUSE and SMB mounts), or no permission
        raise StoreError(
            f"store key {key!r}: cannot hard-link {temp_name} to {path} ({e.strerror or e}); "
            "the local store needs a file system with hard links (or use a gs:// store)"
        ) from e
      fsync_folder(path.parent)
    finally:
      os.unlink(temp_name)

  def get(self, key: str) -> bytes:
    key = keys_lib.validate_key(key)
    try:
      return (self._root / key).read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
      raise StoreNotFoundError(key, self.uri) from None

  def exists(self, key: str) -> bool:
    return (self._root / keys_lib.validate_key(key)).is_file()

  def list(self, prefix: str = "") -> list[str]:
    prefix = keys_lib.validate_prefix(prefix)
    base = self._root / prefix.rpartition("/")[0]
    found = []
    for folder, subfolders, files in os.walk(base):
      subfolders[:] = [d for d in subfolders if keys_lib.is_valid_segment(d)]
      rel = Path(folder).relative_to(self._root).as_posix()
      for name in files:
        key = name if rel == "." else f"{rel}/{name}"
        if keys_lib.is_valid_segment(name) and key.startswith(prefix):
          found.append(key)
    return sorted(found)

  def wait_for(self, keys: Iterable[str], timeout: float) -> None:
    keys = [keys_lib.validate_key(k) for k in keys]
    wait_for_keys(self.exists, keys, timeout, where=self.uri)

  def _matches_existing(self, key: str, path: Path, data: bytes) -> bool:
    """True if the record exists with `data`; raises on different bytes; False if absent."""
    try:
      existing = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
      return False
    except IsADirectoryError:
      raise InvalidKeyError(
          f"store key {key!r} in {self.uri} is a folder of other keys; a key cannot be "
          "both a record and a folder") from None
    if existing != data:
      raise StoreConflictError(key, self.uri)
    return True

  def _make_folders(self, key: str, folder: Path) -> None:
    """Creates the missing folders on the way to `folder`, fsyncing each parent."""
    missing = []
    while not folder.is_dir() and folder != self._root:
      missing.append(folder)
      folder = folder.parent
    for path in reversed(missing):
      try:
        path.mkdir()
      except FileExistsError:
        if not path.is_dir():
          raise InvalidKeyError(
              f"store key {key!r} in {self.uri}: {path.relative_to(self._root).as_posix()!r}"
              " is a record, so it cannot be a folder") from None
        continue
      except OSError as e:
        if e.errno == errno.ENOTDIR:
          raise InvalidKeyError(
              f"store key {key!r} in {self.uri}: a leading part of it is a record, so it "
              "cannot be a folder") from None
        raise
      fsync_folder(path.parent)
