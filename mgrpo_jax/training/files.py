"""Records as canonical JSON, for the slices' caches and queues.

`dump_json` writes records holding numpy arrays as canonical JSON
(`serving.wire.to_plain`: float32 values round-trip exactly); `parse_json` reads it back,
naming where the bytes came from. (File locks: `mgrpo_jax.utils.file_lock`; atomic
writes: `mgrpo_jax.utils.atomic_files`.)
"""

from __future__ import annotations

import json
from typing import Any

from mgrpo_jax.serving.wire import to_plain


def dump_json(value: Any) -> bytes:
  """Canonical JSON bytes of `value` (sorted keys, NaN allowed: unscored record fields)."""
  return json.dumps(to_plain(value), sort_keys=True, separators=(",", ":")).encode("utf-8")


def parse_json(data: bytes, source: str) -> Any:
  """Parses JSON bytes (e.g. `dump_json`'s); errors name `source`, where they came from."""
  try:
    return json.loads(data)
  except json.JSONDecodeError as e:
    raise ValueError(f"{source}: not valid JSON: {e}") from e
