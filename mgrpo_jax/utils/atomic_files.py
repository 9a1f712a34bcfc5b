"""Crash-safe replacement of one local file: `atomic_write`, and `fsync_folder`.

`atomic_write` writes a temporary file in the target's folder, fsyncs it, renames it
over the target (readers see the old file or the new one, never a part) and fsyncs the
folder, so the rename itself survives a power loss. A killed writer leaves at most a
hidden `.<name>.*.tmp` file behind.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
  """Writes `data` to `path` so that readers see either the old or the new file."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.unlink(tmp)
    raise
  fsync_folder(path.parent)


def fsync_folder(path: str | os.PathLike[str]) -> None:
  """Makes the entries of folder `path` (a rename, a new file) durable."""
  fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)
