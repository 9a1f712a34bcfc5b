"""The service's wire format: length-prefixed frames, the request's token before its body.

  request   [u32 token length][token: UTF-8, empty = none][u32 body length][body]
  response  [u32 body length][body]

Lengths are 4-byte big-endian; a body is one UTF-8 JSON object. The token comes first
so a server can refuse a caller without reading (or buffering) its body, and compares
it as bytes (`hmac.compare_digest`: constant time, any bytes). Reads run against a
deadline (`recv_exact`), so a peer that stalls mid-frame cannot hold a connection.
Every way a body can fail to decode (bad UTF-8, bad JSON, nesting deep enough for a
RecursionError, not an object) is one `FrameError`, which the server answers.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any

MAX_FRAME_BYTES = 256 << 20
MAX_TOKEN_BYTES = 1024
_LENGTH = struct.Struct(">I")


class FrameError(ValueError):
  """A frame that is too large or whose body does not decode to a JSON object."""


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
  """`n` bytes from `sock`; TimeoutError once `deadline` (time.monotonic) has passed,
  ConnectionError if the peer closes first."""
  chunks, got = [], 0
  while got < n:
    if deadline is not None:
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        raise TimeoutError(f"frame incomplete at the deadline: {got} of {n} bytes")
      sock.settimeout(remaining)
    chunk = sock.recv(min(n - got, 1 << 20))
    if not chunk:
      raise ConnectionError(f"connection closed after {got} of {n} bytes")
    chunks.append(chunk)
    got += len(chunk)
  return b"".join(chunks)


def recv_length(sock: socket.socket, limit: int, what: str,
                deadline: float | None = None) -> int:
  """A u32 length prefix; FrameError naming `what` if it exceeds `limit`."""
  (length,) = _LENGTH.unpack(recv_exact(sock, _LENGTH.size, deadline))
  if length > limit:
    raise FrameError(f"{what} of {length} bytes exceeds the {limit}-byte limit")
  return length


def encode_body(message: Mapping[str, Any]) -> bytes:
  """The JSON body of `message`; ValueError if it exceeds MAX_FRAME_BYTES."""
  data = json.dumps(message, separators=(",", ":")).encode("utf-8")
  if len(data) > MAX_FRAME_BYTES:
    raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
  return data


def decode_body(data: bytes) -> dict[str, Any]:
  """The JSON object in `data`; FrameError for anything else."""
  try:
    message = json.loads(data.decode("utf-8"))
  except UnicodeDecodeError as e:
    raise FrameError(f"body is not UTF-8: {e}") from None
  except RecursionError:
    raise FrameError("body is nested too deeply") from None
  except ValueError as e:
    raise FrameError(f"body is not JSON: {e}") from None
  if not isinstance(message, dict):
    raise FrameError(f"frame holds a {type(message).__name__}, expected an object")
  return message


def request_bytes(token: bytes, message: Mapping[str, Any]) -> bytes:
  """A whole request frame."""
  if len(token) > MAX_TOKEN_BYTES:
    raise ValueError(f"token of {len(token)} bytes exceeds the {MAX_TOKEN_BYTES}-byte limit")
  body = encode_body(message)
  return _LENGTH.pack(len(token)) + token + _LENGTH.pack(len(body)) + body


def response_bytes(message: Mapping[str, Any]) -> bytes:
  """A whole response frame."""
  body = encode_body(message)
  return _LENGTH.pack(len(body)) + body


def recv_response(sock: socket.socket, deadline: float | None = None) -> dict[str, Any]:
  """One response frame (the client side)."""
  length = recv_length(sock, MAX_FRAME_BYTES, "response", deadline)
  return decode_body(recv_exact(sock, length, deadline))
