"""Where the sub-agent service listens: a fixed `serving.host:port`, or a published file.

With `serving.port = 0` the service binds a free port and publishes `{"host", "port"}`
atomically (`encode_address`) in the run's `<local>/sub/service.json`
(`training.paths.RunPaths.service_address`); the main slice reads it (again after every
connection failure, so a restarted sub slice on a new port is found).
"""

from __future__ import annotations

import json
import os
import pathlib

Address = tuple[str, int]


def encode_address(address: Address) -> bytes:
  """The address file's content (the sub slice writes it atomically)."""
  host, port = address
  return json.dumps({"host": host, "port": int(port)}).encode()


def read_address(path: str | os.PathLike[str]) -> Address | None:
  """The published address, or None when the file does not exist (yet)."""
  path = pathlib.Path(path)
  try:
    data = json.loads(path.read_bytes())
  except FileNotFoundError:
    return None
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not a service address file: {e}") from e
  try:
    return str(data["host"]), int(data["port"])
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"{path}: needs fields host and port, got {data!r}") from e


def service_token(token_env: str) -> str | None:
  """The shared token from environment variable `token_env` (None when it is empty)."""
  if not token_env:
    return None
  token = os.environ.get(token_env)
  if not token:
    raise ValueError(f"serving.token_env={token_env!r}, but that environment variable is "
                     "unset or empty")
  return token
