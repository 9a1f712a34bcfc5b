"""Local files shared by the slices: file locks and plain JSON.

`file_lock` serializes one-time work shared by the two slices (building the world,
training the tokenizer) with `fcntl.flock`, which the kernel releases when a holder
dies. (Atomic writes: `mgrpo_jax.utils.atomic_files`.) `dump_json` writes records holding numpy arrays as
canonical JSON (`serving.wire.to_plain`: float32 values round-trip exactly).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from mgrpo_jax.serving.wire import to_plain


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


def parse_json(data: bytes, source: str) -> Any:
  """Parses JSON bytes (e.g. `dump_json`'s); errors name `source`, where they came from."""
  try:
    return json.loads(data)
  except json.JSONDecodeError as e:
    raise ValueError(f"{source}: not valid JSON: {e}") from e
