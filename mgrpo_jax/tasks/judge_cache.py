"""The on-disk cache of a model judge's replies: a rerun asks the model nothing twice.

An entry is keyed by `cache_key(parts)`, the SHA-256 of the canonical JSON of what
decides the reply and how it is read: the judge model's identity, the prompt file's
contents, the sampling settings, the verdict grammar and the item's fields
(`model_judge`). It is the file
`<folder>/<key[:2]>/<key>.json` holding {"key", "prompt", "output"}: the raw reply (its
verdict is parsed on every read, so a judge failure is cached too) and the prompt it
answered, for reading a judge's decisions. Entries are written atomically
(`utils.atomic_files`): processes sharing the folder see a whole entry or none, and two
writers of one key write the same reply. An entry that is not such an object, or holds
another key, is an error naming its file (`JudgeCacheError`), never a miss.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Mapping
from typing import Any

from mgrpo_jax.utils.atomic_files import atomic_write


class JudgeCacheError(ValueError):
  """A cache entry cannot be read as one (the message names its file)."""


def cache_key(parts: Mapping[str, Any]) -> str:
  """64 hex digits naming `parts` (JSON values; key order does not matter)."""
  text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
  return hashlib.sha256(text.encode("utf-8")).hexdigest()


class JudgeCache:
  """Replies by key in a local folder (module docstring)."""

  def __init__(self, folder: str | pathlib.Path):
    self.folder = pathlib.Path(folder)

  def path(self, key: str) -> pathlib.Path:
    return self.folder / key[:2] / f"{key}.json"

  def get(self, key: str) -> str | None:
    """The reply stored under `key`, or None when there is none.

    Raises:
      JudgeCacheError: the entry's file is corrupt (naming it).
    """
    path = self.path(key)
    try:
      raw = path.read_bytes()
    except FileNotFoundError:
      return None
    try:
      entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
      raise JudgeCacheError(_corrupt(path, f"not JSON ({e})")) from None
    if not isinstance(entry, dict) or not isinstance(entry.get("output"), str):
      raise JudgeCacheError(_corrupt(path, "not an object with a string 'output'"))
    if entry.get("key") != key:
      raise JudgeCacheError(_corrupt(path, f"it holds key {entry.get('key')!r}"))
    return entry["output"]

  def put(self, key: str, prompt: str, output: str) -> None:
    """Stores `output`, the reply to `prompt`, under `key` (atomically)."""
    entry = {"key": key, "prompt": prompt, "output": output}
    atomic_write(self.path(key), json.dumps(entry, ensure_ascii=False).encode("utf-8"))


def _corrupt(path: pathlib.Path, problem: str) -> str:
  return (f"{path}: corrupt judge cache entry: {problem}; delete the file to ask the judge "
          "again")
