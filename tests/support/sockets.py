"""Raw sockets against a server under test."""

from __future__ import annotations

import socket


def closed_by_peer(sock: socket.socket, seconds: float) -> bool:
  """Whether the server closes `sock` within `seconds`, reading past what it sends."""
  sock.settimeout(seconds)
  try:
    while sock.recv(1 << 16):
      pass
  except TimeoutError:
    return False
  except OSError:
    pass
  return True
