"""Where the sub-agent service listens: a fixed `serving.host:port`, or a published file.

With `serving.port = 0` the service binds a free port and publishes `{"host", "port"}`
(`encode_address`) in the run's `<workdir>/sub/service.json`, a replaceable file of the
workdir (`training.paths.RunPaths.service_address_name`, local or `gs://`); the main
slice reads it (again after every connection failure, so a restarted sub slice on a new
port is found).
"""

from __future__ import annotations

import json
import os

Address = tuple[str, int]


def encode_address(address: Address) -> bytes:
  """The address file's content."""
  host, port = address
  return json.dumps({"host": host, "port": int(port)}).encode()


def decode_address(data: bytes | None, source: str) -> Address | None:
  """The address in an address file's content `data` (None: no file yet); errors name
  `source`."""
  if data is None:
    return None
  try:
    fields = json.loads(data)
  except json.JSONDecodeError as e:
    raise ValueError(f"{source}: not a service address file: {e}") from e
  try:
    return str(fields["host"]), int(fields["port"])
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"{source}: needs fields host and port, got {fields!r}") from e


def service_token(token_env: str) -> str | None:
  """The shared token from environment variable `token_env` (None when it is empty)."""
  if not token_env:
    return None
  token = os.environ.get(token_env)
  if not token:
    raise ValueError(f"serving.token_env={token_env!r}, but that environment variable is "
                     "unset or empty")
  return token
