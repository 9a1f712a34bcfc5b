"""A small request/response protocol over TCP: framed JSON, one thread per connection.

The main slice calls the sub slice through it (`--slice=all` uses loopback, a pod uses the
sub slice's host). Frames (`frames.py`): the request's token, then its JSON body
`{"method": str, "payload": dict, "id": str}`; the response `{"ok": true, "result": dict}`
or `{"ok": false, "error": str}` (with `"retry": true` when the server is at its
connection cap: the client retries).

The server (`RpcServer`) refuses a wrong token before reading the body, answers every
malformed frame with an error instead of dropping the connection, gives up on a frame
not complete within `read_timeout_s` and on a connection idle for `idle_timeout_s`,
serves at most `max_connections` connections at once, and runs each request id once: a
retry of a call that is still running waits for that run's answer, and a retry of a
finished one gets its answer again (the newest `kept_replies` are kept). It refuses to
listen on a non-loopback address without a token.

The client (`RpcClient`) retries connection failures with backoff until a deadline,
resending the same request id; an answer that takes longer than `call_timeout` raises
`RpcTimeoutError` (not retried: the call may still be running). Handlers must still be
idempotent (the sub-agent service is: serving a request again gives the same result),
since a server that restarted has forgotten its request ids.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hmac
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from mgrpo_jax.config.validate import is_loopback
from mgrpo_jax.serving.frames import (
  MAX_FRAME_BYTES,
  MAX_TOKEN_BYTES,
  FrameError,
  decode_body,
  recv_exact,
  recv_length,
  recv_response,
  request_bytes,
  response_bytes,
)
from mgrpo_jax.utils.retry import Backoff, RetryPolicy, call_with_retry

Handler = Callable[[dict[str, Any]], dict[str, Any]]
MAX_REQUEST_ID_CHARS = 128
_DRAIN_S = 1.0  # seconds a refused connection's unread bytes are discarded before closing


class RpcError(RuntimeError):
  """The server answered with an error (bad request, unauthorized, handler failure)."""


class ServiceUnavailableError(RuntimeError):
  """The service could not be reached before the deadline."""


class RpcTimeoutError(TimeoutError):
  """The service took the request but did not answer within the call timeout."""


class _ServerBusy(ConnectionError):
  """The server is at its connection cap (retried like a refused connection)."""


class _Refused(Exception):
  """A request the server answers with an error and then closes the connection on."""


@dataclasses.dataclass(frozen=True)
class ServerLimits:
  """What one `RpcServer` allows.

  Attributes:
    read_timeout_s: seconds a request frame may take to arrive once it has begun.
    idle_timeout_s: seconds a connection may wait for its next request (and a reply may
      take to be sent).
    max_connections: connections served at once; more are answered "busy".
    kept_replies: finished replies kept by request id, for retries.
  """

  read_timeout_s: float = 30.0
  idle_timeout_s: float = 900.0
  max_connections: int = 16
  kept_replies: int = 8

  def __post_init__(self):
    if min(self.read_timeout_s, self.idle_timeout_s) <= 0 or min(
        self.max_connections, self.kept_replies) < 1:
      raise ValueError(f"invalid server limits {self}")


class _ThreadingServer(socketserver.ThreadingTCPServer):
  """One thread per connection, at most `max_connections` at once."""

  daemon_threads = True
  allow_reuse_address = True

  def __init__(self, address, handler, max_connections: int):
    self._slots = threading.BoundedSemaphore(max_connections)
    self._max_connections = max_connections
    super().__init__(address, handler)

  def process_request(self, request, client_address):
    if not self._slots.acquire(blocking=False):
      _refuse(request, {"ok": False, "retry": True, "error": (
          f"busy: serving {self._max_connections} connections already")}, drain=False)
      self.shutdown_request(request)
      return
    try:
      super().process_request(request, client_address)
    except BaseException:
      self._slots.release()
      raise

  def process_request_thread(self, request, client_address):
    try:
      super().process_request_thread(request, client_address)
    finally:
      self._slots.release()


def _refuse(sock: socket.socket, reply: dict[str, Any], *, drain: bool = True) -> None:
  """Sends `reply`; with `drain`, then discards what the peer still sends for a moment, so
  closing does not reset the connection before the peer has read the reply."""
  try:
    sock.settimeout(_DRAIN_S)
    sock.sendall(response_bytes(reply))
    if not drain:
      return
    sock.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + _DRAIN_S
    while time.monotonic() < deadline and sock.recv(1 << 16):
      pass
  except OSError:
    pass


class RpcServer:
  """Serves `handlers[method](payload) -> result` on (host, port); port 0 picks a free one."""

  def __init__(self, handlers: Mapping[str, Handler], *, host: str = "127.0.0.1",
               port: int = 0, token: str | None = None,
               limits: ServerLimits = ServerLimits()) -> None:
    if token is None and not is_loopback(host):
      raise ValueError(f"serving.host={host!r} is reachable from other machines: the service "
                       "needs a shared token (serving.token_env)")
    self._handlers = dict(handlers)
    self._token = None if token is None else token.encode("utf-8")
    self._limits = limits
    self._lock = threading.Lock()
    self._connections: set[socket.socket] = set()
    self._replies: collections.OrderedDict[str, concurrent.futures.Future] = (
        collections.OrderedDict())
    outer = self

    class _Connection(socketserver.BaseRequestHandler):

      def setup(self) -> None:
        with outer._lock:
          outer._connections.add(self.request)

      def finish(self) -> None:
        with outer._lock:
          outer._connections.discard(self.request)

      def handle(self) -> None:
        outer._serve(self.request)

    self._server = _ThreadingServer((host, port), _Connection, limits.max_connections)
    self._thread: threading.Thread | None = None

  @property
  def address(self) -> tuple[str, int]:
    host, port = self._server.server_address[:2]
    return host, port

  def _serve(self, sock: socket.socket) -> None:
    """Answers the requests of one connection until it closes, idles or misbehaves."""
    while True:
      try:
        request = self._read_request(sock)
      except _Refused as e:
        _refuse(sock, {"ok": False, "error": str(e)})
        return
      except (ConnectionError, OSError):
        return
      if request is None:
        return
      try:
        reply = response_bytes(self._answer(request))
        sock.settimeout(self._limits.idle_timeout_s)  # the peer must take the reply in time
        sock.sendall(reply)
      except ValueError as e:  # a result too large for one frame
        _refuse(sock, {"ok": False, "error": f"reply not sent: {e}"})
        return
      except OSError:
        return

  def _read_request(self, sock: socket.socket) -> dict[str, Any] | None:
    """The next request; None when the peer closed or stayed idle; _Refused for a frame
    answered with an error (wrong token, too large, undecodable, too slow)."""
    sock.settimeout(self._limits.idle_timeout_s)
    try:
      if not sock.recv(1, socket.MSG_PEEK):
        return None
    except TimeoutError:
      return None
    deadline = time.monotonic() + self._limits.read_timeout_s
    try:
      token = recv_exact(sock, recv_length(sock, MAX_TOKEN_BYTES, "token", deadline), deadline)
      if self._token is not None and not hmac.compare_digest(token, self._token):
        raise _Refused("unauthorized: missing or wrong service token")
      length = recv_length(sock, MAX_FRAME_BYTES, "request", deadline)
      return decode_body(recv_exact(sock, length, deadline))
    except FrameError as e:
      raise _Refused(f"bad request: {e}") from None
    except TimeoutError:
      raise _Refused(f"bad request: frame not complete within "
                     f"{self._limits.read_timeout_s:g}s") from None

  def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
    """The reply to `request`, run once per request id (module docstring)."""
    request_id = request.get("id")
    if request_id is None:
      return self._dispatch(request)
    if not isinstance(request_id, str) or not 0 < len(request_id) <= MAX_REQUEST_ID_CHARS:
      return {"ok": False, "error": f"bad request: id must be a string of 1 to "
                                    f"{MAX_REQUEST_ID_CHARS} characters"}
    with self._lock:
      future = self._replies.get(request_id)
      owner = future is None
      if owner:
        future = self._replies[request_id] = concurrent.futures.Future()
    if owner:
      future.set_result(self._dispatch(request))
      with self._lock:
        done = [k for k, f in self._replies.items() if f.done()]
        for key in done[:max(0, len(done) - self._limits.kept_replies)]:
          del self._replies[key]
    return future.result()

  def _dispatch(self, request: dict[str, Any]) -> dict[str, Any]:
    method = request.get("method")
    if not isinstance(method, str) or method not in self._handlers:
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
  return isinstance(e, (ConnectionError, OSError)) and not isinstance(e, RpcTimeoutError)


class RpcClient:
  """Calls an `RpcServer`, retrying connection failures with backoff until the deadline."""

  def __init__(self, address: tuple[str, int], *, token: str | None = None,
               settings: ClientSettings = ClientSettings()) -> None:
    self.address = address
    self._token = b"" if token is None else token.encode("utf-8")
    self._settings = settings
    self._sock: socket.socket | None = None
    self._lock = threading.Lock()

  def _attempt(self, frame: bytes, method: str) -> dict[str, Any]:
    try:
      if self._sock is None:
        self._sock = socket.create_connection(self.address,
                                              timeout=self._settings.connect_timeout)
      self._sock.settimeout(self._settings.call_timeout)
      self._sock.sendall(frame)
      try:
        response = recv_response(self._sock, time.monotonic() + self._settings.call_timeout)
      except TimeoutError:
        host, port = self.address
        raise RpcTimeoutError(
            f"{host}:{port} {method!r}: no answer within {self._settings.call_timeout:g}s "
            "(serving.call_timeout_s); the call may still be running") from None
    except BaseException:
      self.close()
      raise
    if response.get("retry"):
      self.close()
      raise _ServerBusy(str(response.get("error")))
    return response

  def call(self, method: str, payload: Mapping[str, Any], *,
           request_id: str | None = None) -> dict[str, Any]:
    """Returns the handler's result; raises RpcError, RpcTimeoutError or
    ServiceUnavailableError. `request_id` (default: a fresh one) names the call for the
    server across retries: callers that retry a call themselves pass the same id."""
    frame = request_bytes(self._token, {"method": method, "payload": dict(payload),
                                        "id": request_id or uuid.uuid4().hex})
    host, port = self.address
    policy = RetryPolicy(deadline=self._settings.deadline,
                         request_timeout=self._settings.call_timeout,
                         backoff=Backoff(initial=0.05, multiplier=2.0, maximum=2.0))
    with self._lock:
      response = call_with_retry(
          lambda _: self._attempt(frame, method), policy=policy,
          is_transient=_is_transient, operation=f"call {method!r} to {host}:{port}",
          error_type=ServiceUnavailableError)
    if not response.get("ok"):
      raise RpcError(f"{host}:{port} {method!r}: {response.get('error', 'no error message')}")
    return response["result"]

  def close(self) -> None:
    if self._sock is not None:
      self._sock.close()
      self._sock = None
