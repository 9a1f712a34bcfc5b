"""Validation of store keys, list prefixes and folder file names, shared by every backend.

A key is one or more `/`-separated segments; each segment starts with a letter, digit or
`_` and continues with letters, digits, `_`, `-` or `.`. This rules out empty keys, `..`,
leading or trailing `/`, empty segments and hidden names (backends use names starting
with `.` for their own temporary files), and keeps keys portable between a local folder
and GCS object names.

A folder's file name (`store.folder`) is looser: `/`-separated segments, none empty or
starting with `.`.
"""

from __future__ import annotations

import re

from mgrpo_jax.store.errors import InvalidKeyError

MAX_KEY_LENGTH = 512
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_ALLOWED = "letters, digits, '_', '-', '.' (not first), '/' between segments"


def is_valid_segment(segment: str) -> bool:
  """Whether `segment` may be one `/`-separated part of a key."""
  return _SEGMENT.fullmatch(segment) is not None


def is_valid_key(key: object) -> bool:
  """Whether `key` is a valid store key (see the module docstring)."""
  return (isinstance(key, str) and 0 < len(key) <= MAX_KEY_LENGTH
          and all(is_valid_segment(s) for s in key.split("/")))


def validate_key(key: object) -> str:
  """Returns `key` unchanged, or raises `InvalidKeyError` naming it and the problem."""
  if not isinstance(key, str):
    raise InvalidKeyError(f"store key must be a str, got {type(key).__name__}: {key!r}")
  if not key:
    raise InvalidKeyError("store key is empty")
  if len(key) > MAX_KEY_LENGTH:
    raise InvalidKeyError(f"store key {key[:40]!r}... is longer than {MAX_KEY_LENGTH} chars")
  for segment in key.split("/"):
    if not is_valid_segment(segment):
      raise InvalidKeyError(
          f"store key {key!r} has an invalid segment {segment!r}; allowed: {_ALLOWED}")
  return key


def validate_prefix(prefix: object) -> str:
  """Validates a `list` prefix: empty, or a key, or a key's leading part (may end in `/`)."""
  if not isinstance(prefix, str):
    raise InvalidKeyError(
        f"store prefix must be a str, got {type(prefix).__name__}: {prefix!r}")
  if not prefix:
    return prefix
  segments = prefix.split("/")
  if segments[-1] == "":
    segments = segments[:-1]
  for segment in segments:
    if not is_valid_segment(segment):
      raise InvalidKeyError(
          f"store prefix {prefix!r} has an invalid segment {segment!r}; allowed: {_ALLOWED}")
  return prefix


def validate_file_name(name: str) -> str:
  """Returns the folder file name `name` unchanged, or raises `InvalidKeyError` naming the
  bad segment."""
  if not isinstance(name, str) or not name:
    raise InvalidKeyError(f"file name must be a non-empty str, got {name!r}")
  for segment in name.split("/"):
    if not segment or segment.startswith("."):
      raise InvalidKeyError(f"file name {name!r} has an empty or hidden segment {segment!r}")
  return name


def as_record_bytes(key: str, data: object) -> bytes:
  """Returns `data` as bytes; rejects str and other non-bytes values, naming the key."""
  if isinstance(data, bytes):
    return data
  if isinstance(data, bytearray | memoryview):
    return bytes(data)
  raise TypeError(
      f"store value for key {key!r} must be bytes, got {type(data).__name__}")
