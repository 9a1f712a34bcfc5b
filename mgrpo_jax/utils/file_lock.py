"""`file_lock`: one-time work shared by several processes (the two slices building the
world, training the tokenizer, building a warm start) done by one of them while the
others wait.

The lock is an `fcntl.flock` on a lock file, which the kernel releases when a holder
dies, so a killed builder never leaves the others waiting. (Atomic writes:
`mgrpo_jax.utils.atomic_files`.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
from collections.abc import Iterator


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
