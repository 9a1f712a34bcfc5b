"""Crash-safe local files shared by the slices: atomic writes, file locks, plain JSON.

A killed process never leaves a half-written file behind: `atomic_write` writes a
temporary file in the same folder, fsyncs it, renames it over the target (readers
see the old file or the new one) and fsyncs the folder, so the rename itself survives
a power loss. `file_lock` serializes one-time work shared by the
two slices (building the world, training the tokenizer) with `fcntl.flock`, which the
kernel releases when a holder dies. `dump_json` writes records holding numpy arrays as
canonical JSON (`serving.wire.to_plain`: float32 values round-trip exactly).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import tempfile
from collections.abc import Iterator
from typing import Any

from mgrpo_jax.serving.wire import to_plain


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


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
  """Holds an exclusive `flock` on `path` (created if needed) for the block."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(path, "a+b") as f:
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def dump_json(value: Any) -> bytes:
  """Canonical JSON bytes of `value` (sorted keys, NaN allowed: unscored record fields)."""
  return json.dumps(to_plain(value), sort_keys=True, separators=(",", ":")).encode("utf-8")


def load_json(path: str | os.PathLike[str]) -> Any:
  """Parses a JSON file; errors name the file."""
  path = pathlib.Path(path)
  try:
    return json.loads(path.read_bytes())
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON: {e}") from e
