"""A small request/response protocol over TCP: length-prefixed JSON, one thread per connection.

The main slice calls the sub slice through it (`--slice=all` uses loopback, a pod uses the
sub slice's host). Frame: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
Request: `{"method": str, "payload": dict, "token": str | None}`. Response:
`{"ok": true, "result": dict}` or `{"ok": false, "error": str}`.

Calls are retried on connection failures until a deadline, so handlers must be idempotent
(the sub-agent service is: a request names its step and rollout keys, and serving it again
gives the same result).
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import socket
import socketserver
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any

from mgrpo_jax.utils.retry import Backoff, RetryPolicy, call_with_retry

MAX_FRAME_BYTES = 256 << 20
_HEADER = struct.Struct(">I")

Handler = Callable[[dict[str, Any]], dict[str, Any]]


class RpcError(RuntimeError):
  """The server answered with an error (bad request, unauthorized, handler failure)."""


class ServiceUnavailableError(RuntimeError):
  """The service could not be reached before the deadline."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
  chunks, got = [], 0
  while got < n:
    chunk = sock.recv(min(n - got, 1 << 20))
    if not chunk:
      raise ConnectionError(f"connection closed after {got} of {n} bytes")
    chunks.append(chunk)
    got += len(chunk)
  return b"".join(chunks)


def send_frame(sock: socket.socket, message: Mapping[str, Any]) -> None:
  data = json.dumps(message, separators=(",", ":")).encode("utf-8")
  if len(data) > MAX_FRAME_BYTES:
    raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
  sock.sendall(_HEADER.pack(len(data)) + data)


def recv_frame(sock: socket.socket) -> dict[str, Any]:
  (length,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
  if length > MAX_FRAME_BYTES:
    raise ValueError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
  message = json.loads(_recv_exact(sock, length).decode("utf-8"))
  if not isinstance(message, dict):
    raise ValueError(f"frame holds a {type(message).__name__}, expected an object")
  return message


class _ThreadingServer(socketserver.ThreadingTCPServer):
  daemon_threads = True
  allow_reuse_address = True


class RpcServer:
  """Serves `handlers[method](payload) -> result` on (host, port); port 0 picks a free one."""

  def __init__(self, handlers: Mapping[str, Handler], *, host: str = "127.0.0.1",
               port: int = 0, token: str | None = None) -> None:
    self._handlers = dict(handlers)
    self._token = token
    self._lock = threading.Lock()
    self._connections: set[socket.socket] = set()
    outer = self

    class _Connection(socketserver.BaseRequestHandler):

      def setup(self) -> None:
        with outer._lock:
          outer._connections.add(self.request)

      def finish(self) -> None:
        with outer._lock:
          outer._connections.discard(self.request)

      def handle(self) -> None:
        while True:
          try:
            request = recv_frame(self.request)
          except (ConnectionError, OSError):
            return
          except ValueError as e:
            send_frame(self.request, {"ok": False, "error": f"bad request: {e}"})
            return
          send_frame(self.request, outer._dispatch(request))

    self._server = _ThreadingServer((host, port), _Connection)
    self._thread: threading.Thread | None = None

  @property
  def address(self) -> tuple[str, int]:
    host, port = self._server.server_address[:2]
    return host, port

  def _dispatch(self, request: dict[str, Any]) -> dict[str, Any]:
    if self._token is not None and not hmac.compare_digest(
        str(request.get("token") or ""), self._token):
      return {"ok": False, "error": "unauthorized: missing or wrong service token"}
    method = request.get("method")
    if method not in self._handlers:
      return {"ok": False, "error": f"unknown method {method!r}; known: "
                                    f"{', '.join(sorted(self._handlers))}"}
    payload = request.get("payload")
    if not isinstance(payload, dict):
      return {"ok": False, "error": f"method {method!r}: payload must be an object"}
    try:
      return {"ok": True, "result": self._handlers[method](payload)}
    except Exception as e:  # noqa: BLE001 (reported to the caller, never kills the server)
      return {"ok": False, "error": f"method {method!r} failed: {type(e).__name__}: {e}"}

  def start(self) -> RpcServer:
    self._thread = threading.Thread(target=self._server.serve_forever, name="rpc-server",
                                    daemon=True)
    self._thread.start()
    return self

  def serve_forever(self) -> None:
    self._server.serve_forever()

  def stop(self) -> None:
    """Stops accepting and closes open connections, as a process exit would."""
    self._server.shutdown()
    self._server.server_close()
    with self._lock:
      for connection in self._connections:
        try:
          connection.shutdown(socket.SHUT_RDWR)
        except OSError:
          pass
    if self._thread is not None:
      self._thread.join()


@dataclasses.dataclass(frozen=True)
class ClientSettings:
  """How an `RpcClient` waits.

  Attributes:
    deadline: seconds a call keeps retrying connection failures before giving up (it
      bounds reconnecting, not a slow answer).
    call_timeout: seconds one attempt may wait for its answer (a whole sub-agent batch).
    connect_timeout: seconds to open a connection.
  """

  deadline: float = 120.0
  call_timeout: float = 600.0
  connect_timeout: float = 5.0


def _is_transient(e: BaseException) -> bool:
  return isinstance(e, (ConnectionError, TimeoutError, OSError)) and not isinstance(e, RpcError)


class RpcClient:
  """Calls an `RpcServer`, retrying connection failures with backoff until the deadline."""

  def __init__(self, address: tuple[str, int], *, token: str | None = None,
               settings: ClientSettings = ClientSettings()) -> None:
    self.address = address
    self._token = token
    self._settings = settings
    self._sock: socket.socket | None = None
    self._lock = threading.Lock()

  def _attempt(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    try:
      if self._sock is None:
        self._sock = socket.create_connection(self.address,
                                              timeout=self._settings.connect_timeout)
      self._sock.settimeout(timeout)
      send_frame(self._sock, request)
      return recv_frame(self._sock)
    except BaseException:
      self.close()
      raise

  def call(self, method: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Returns the handler's result; raises RpcError or ServiceUnavailableError."""
    request = {"method": method, "payload": dict(payload), "token": self._token}
    host, port = self.address
    policy = RetryPolicy(deadline=self._settings.deadline,
                         request_timeout=self._settings.call_timeout,
                         backoff=Backoff(initial=0.05, multiplier=2.0, maximum=2.0))
    with self._lock:
      response = call_with_retry(
          lambda _: self._attempt(request, self._settings.call_timeout), policy=policy,
          is_transient=_is_transient, operation=f"call {method!r} to {host}:{port}",
          error_type=ServiceUnavailableError)
    if not response.get("ok"):
      raise RpcError(f"{host}:{port} {method!r}: {response.get('error', 'no error message')}")
    return response["result"]

  def close(self) -> None:
    if self._sock is not None:
      self._sock.close()
      self._sock = None
