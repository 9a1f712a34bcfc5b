"""gRPC calls between the slices: the server and client under the sub-agent service.

The server (`RpcServer`) serves the methods of one gRPC service. A method reads the
request's serialized bytes itself (`Method.parse`, e.g. `messages.parse_request`, which
checks them against the schema before parsing) and returns a protobuf reply. A unary
method's request is one message; a streamed method's (`Method.streamed`) is a client
stream of small parts, which gRPC hands over one at a time and the method assembles
(`request_parts.assemble`), so that a large request is held once, not up to three times
as gRPC's unary receive path does. What the server enforces, each a `ServerLimits` field
(config keys `serving.*`):

  - the token: call metadata `mgrpo-token-bin` (any UTF-8, sent as bytes), compared in
    constant time (`hmac.compare_digest`) when the call's headers arrive, before its
    body is read: a wrong token is UNAUTHENTICATED and the body is never buffered;
  - every message at most `max_part_bytes` (a unary request, or one part: larger is
    RESOURCE_EXHAUSTED, unread), a streamed request's parts at most `max_request_bytes`
    together (counted as they arrive: RESOURCE_EXHAUSTED once past it, the rest unread),
    a reply at most `max_reply_bytes`;
  - at most `max_concurrent_calls` calls at once (more: RESOURCE_EXHAUSTED, which the
    client retries as "busy"); connections hold no thread, so idle ones cost only memory;
  - a new connection must finish its handshake (TLS and HTTP/2) within
    `handshake_timeout_s`; a connection without calls for `idle_timeout_s` is closed;
    keepalive pings every `keepalive_s`, a peer silent for `keepalive_timeout_s` after
    one is dropped;
  - TLS (`ServerTls`: its certificate, optionally client certificates it requires) on
    any address; without TLS and a token it listens on loopback only.

Each request id (metadata `mgrpo-request-id`) runs once: a retry of a call that is still
running waits for that run's answer, a retry of a finished one gets its answer again
(the newest `kept_replies`), and the same id with other bytes (the parts' bytes, in
order) is refused; a request its method cannot parse is refused before its id is looked
at. A bad request (`messages.BadRequest`) is INVALID_ARGUMENT with the reason; any other
error of a method is INTERNAL naming it, and the server keeps serving.

The client (`RpcClient`) retries UNAVAILABLE (no server, a dropped connection) and
"busy" with backoff until `ClientSettings.deadline`, resending the same request id (a
streamed request's parts built afresh from the request for each attempt), then raises
`ServiceUnavailableError` naming the address; a call not answered within `call_timeout`
(a gRPC deadline) raises `RpcTimeoutError` (not retried: it may still be running); any
other error status raises `RpcError`. Handlers must still be idempotent
(the sub-agent service is), since a restarted server has forgotten its request ids.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import hmac
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import grpc
from google.protobuf.message import Message

from mgrpo_jax.config.validate import is_loopback
from mgrpo_jax.serving.messages import BadRequest
from mgrpo_jax.serving.tls import ClientTls, ServerTls
from mgrpo_jax.utils.retry import Backoff, RetryPolicy, call_with_retry

TOKEN_KEY = "mgrpo-token-bin"
REQUEST_ID_KEY = "mgrpo-request-id"
MAX_REQUEST_ID_CHARS = 128
_BUSY = "Concurrent RPC limit exceeded"  # gRPC's message when maximum_concurrent_rpcs is hit


class RpcError(RuntimeError):
  """The server answered with an error (bad request, unauthorized, handler failure)."""


class ServiceUnavailableError(RuntimeError):
  """The service could not be reached before the deadline."""


class RpcTimeoutError(TimeoutError):
  """The service took the request but did not answer within the call timeout."""


class _Unavailable(ConnectionError):
  """One attempt found no server, lost its connection or was told "busy" (retried)."""


class _TooLarge(ValueError):
  """A streamed request's parts passed `ServerLimits.max_request_bytes` (RESOURCE_EXHAUSTED)."""


@dataclasses.dataclass(frozen=True)
class ServerLimits:
  """What one `RpcServer` allows (module docstring; keys `serving.*`).

  Attributes:
    max_request_bytes: a streamed request's parts together, at most.
    max_part_bytes: one message a caller sends (a unary request or one part), at most.
    max_reply_bytes: one reply, at most.
    max_concurrent_calls: calls at once; more are told "busy".
    handshake_timeout_s, idle_timeout_s, keepalive_s, keepalive_timeout_s: a new
      connection's handshake, a connection without calls, the pings (module docstring).
    kept_replies: finished calls whose answers are kept for retries of their request id.
  """

  max_request_bytes: int = 4 << 20
  max_part_bytes: int = 64 << 10
  max_reply_bytes: int = 256 << 20
  max_concurrent_calls: int = 16
  handshake_timeout_s: float = 10.0
  idle_timeout_s: float = 900.0
  keepalive_s: float = 60.0
  keepalive_timeout_s: float = 20.0
  kept_replies: int = 8

  def __post_init__(self):
    if (min(self.max_part_bytes, self.max_reply_bytes, self.max_concurrent_calls,
            self.kept_replies) < 1
        or self.max_part_bytes > self.max_request_bytes
        or min(self.handshake_timeout_s, self.idle_timeout_s, self.keepalive_s,
               self.keepalive_timeout_s) <= 0):
      raise ValueError(f"invalid server limits {self}")

  @classmethod
  def from_config(cls, serving) -> ServerLimits:
    return cls(max_request_bytes=int(serving.max_request_mib) << 20,
               max_part_bytes=int(serving.max_part_kib) << 10,
               max_reply_bytes=int(serving.max_reply_mib) << 20,
               max_concurrent_calls=int(serving.max_concurrent_calls),
               handshake_timeout_s=float(serving.handshake_timeout_s),
               idle_timeout_s=float(serving.idle_timeout_s),
               keepalive_s=float(serving.keepalive_s),
               keepalive_timeout_s=float(serving.keepalive_timeout_s))

  def options(self) -> list[tuple[str, int]]:
    """The server's gRPC channel arguments."""
    return [("grpc.max_receive_message_length", self.max_part_bytes),
            ("grpc.max_send_message_length", self.max_reply_bytes),
            ("grpc.server_handshake_timeout_ms", int(self.handshake_timeout_s * 1000)),
            ("grpc.max_connection_idle_ms", int(self.idle_timeout_s * 1000)),
            ("grpc.keepalive_time_ms", int(self.keepalive_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            # clients ping every keepalive_s; pings twice as often are still allowed
            ("grpc.http2.min_recv_ping_interval_without_data_ms",
             int(self.keepalive_s * 500)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.so_reuseport", 0)]


@dataclasses.dataclass(frozen=True)
class Method:
  """One method of the service. `parse` or `run` may raise `messages.BadRequest`
  (INVALID_ARGUMENT, with its message).

  Attributes:
    parse: the request from what the caller sent: a unary method's bytes, or a streamed
      method's parts (an iterator over each part's bytes, read to its end).
    run: the reply to the parsed request.
    streamed: whether the caller sends the request as a stream of parts.
  """

  parse: Callable[[Any], Message]
  run: Callable[[Message], Message]
  streamed: bool = False


def _target(host: str, port: int) -> str:
  return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _TokenCheck(grpc.ServerInterceptor):
  """Refuses a call whose token is missing or wrong before its body is read."""

  def __init__(self, token: bytes):
    self._token = token

  def intercept_service(self, continuation, handler_call_details):
    sent = dict(handler_call_details.invocation_metadata).get(TOKEN_KEY, b"")
    if isinstance(sent, bytes) and hmac.compare_digest(sent, self._token):
      return continuation(handler_call_details)

    def refuse(request_iterator, context):  # never reads the request: its body stays unread
      del request_iterator
      context.abort(grpc.StatusCode.UNAUTHENTICATED, "unauthorized: missing or wrong "
                    "service token")

    return grpc.stream_unary_rpc_method_handler(refuse)


# A finished call: (None, reply bytes) or (error status, message).
_Outcome = tuple[grpc.StatusCode | None, bytes | str]


class _Parts:
  """A request's parts as they arrive (one for a unary request), each one's bytes counted
  against `max_bytes` (past it: `_TooLarge`, the rest never read) and hashed in order
  (`digest`: each part's length, then its bytes)."""

  def __init__(self, parts: Iterator[bytes], max_bytes: int):
    self._parts = parts
    self._max_bytes = max_bytes
    self._bytes = 0
    self._hash = hashlib.sha256()

  def __iter__(self) -> Iterator[bytes]:
    return self

  def __next__(self) -> bytes:
    part = next(self._parts)
    self._bytes += len(part)
    if self._bytes > self._max_bytes:
      raise _TooLarge(f"the request's parts are more than {self._max_bytes} bytes")
    self._hash.update(len(part).to_bytes(8, "little"))
    self._hash.update(part)
    return part

  def digest(self) -> bytes:
    return self._hash.digest()


class RpcServer:
  """Serves `methods` of gRPC service `service` on (host, port); port 0 picks a free one."""

  def __init__(self, service: str, methods: Mapping[str, Method], *,
               host: str = "127.0.0.1", port: int = 0, token: str | None = None,
               limits: ServerLimits = ServerLimits(), tls: ServerTls | None = None) -> None:
    if not is_loopback(host) and (token is None or tls is None):
      raise ValueError(f"serving.host={host!r} is reachable from other machines: the service "
                       "needs a shared token (serving.token_env) and TLS (serving.tls_cert, "
                       "serving.tls_key)")
    self._limits = limits
    self._lock = threading.Lock()
    self._outcomes: collections.OrderedDict[str, tuple[bytes, concurrent.futures.Future]] = (
        collections.OrderedDict())
    handlers = {name: self._handler(name, method) for name, method in methods.items()}
    self._server = grpc.server(
        concurrent.futures.ThreadPoolExecutor(limits.max_concurrent_calls,
                                              thread_name_prefix="rpc"),
        handlers=[grpc.method_handlers_generic_handler(service, handlers)],
        interceptors=[] if token is None else [_TokenCheck(token.encode("utf-8"))],
        options=limits.options(), maximum_concurrent_rpcs=limits.max_concurrent_calls)
    target = _target(host, port)
    try:
      bound = (self._server.add_insecure_port(target) if tls is None
               else self._server.add_secure_port(target, tls.credentials()))
    except RuntimeError:  # gRPC's "Failed to bind" (in use, no such address)
      bound = 0
    if not bound:
      raise OSError(f"serving.host:port = {target}: cannot listen there (in use, or not an "
                    "address of this machine)")
    self._address = (host, bound)

  @property
  def address(self) -> tuple[str, int]:
    return self._address

  def _handler(self, name: str, method: Method) -> grpc.RpcMethodHandler:
    def handle(request, context: grpc.ServicerContext) -> bytes:
      request_id = dict(context.invocation_metadata()).get(REQUEST_ID_KEY)
      parts = _Parts(request if method.streamed else iter((request,)),
                     self._limits.max_request_bytes)
      code, reply = self._answer(method, parts, request_id)
      if code is not None:
        context.abort(code, f"method {name!r}: {reply}")
      return reply

    if method.streamed:
      return grpc.stream_unary_rpc_method_handler(handle)
    return grpc.unary_unary_rpc_method_handler(handle)

  def _answer(self, method: Method, parts: _Parts, request_id: str | None) -> _Outcome:
    """The outcome of a call: its request read, then run once per request id."""
    if request_id is not None and not 0 < len(request_id) <= MAX_REQUEST_ID_CHARS:
      return (grpc.StatusCode.INVALID_ARGUMENT,
              f"bad request: {REQUEST_ID_KEY} must have 1 to {MAX_REQUEST_ID_CHARS} characters")
    code, request = _outcome(lambda: method.parse(parts if method.streamed else next(parts)))
    if code is not None:
      return code, request

    def run() -> _Outcome:
      return _outcome(lambda: method.run(request).SerializeToString())

    return run() if request_id is None else self._once(request_id, parts.digest(), run)

  def _once(self, request_id: str, digest: bytes, run: Callable[[], _Outcome]) -> _Outcome:
    """`run()`'s outcome, run once per request id (module docstring)."""
    with self._lock:
      kept = self._outcomes.get(request_id)
      owner = kept is None
      if owner:
        kept = self._outcomes[request_id] = (digest, concurrent.futures.Future())
    if kept[0] != digest:
      return (grpc.StatusCode.INVALID_ARGUMENT,
              f"bad request: request id {request_id!r} was used for another request")
    future = kept[1]
    if owner:
      future.set_result(run())
      with self._lock:
        done = [key for key, (_, f) in self._outcomes.items() if f.done()]
        for key in done[:max(0, len(done) - self._limits.kept_replies)]:
          del self._outcomes[key]
    return future.result()

  def start(self) -> RpcServer:
    self._server.start()
    return self

  def stop(self) -> None:
    """Stops at once, cancelling running calls, as a process exit would."""
    self._server.stop(grace=None).wait()


def _outcome(step: Callable[[], Any]) -> tuple[grpc.StatusCode | None, Any]:
  """(None, step()), or the error status and message of the exception it raised."""
  try:
    return None, step()
  except BadRequest as e:
    return grpc.StatusCode.INVALID_ARGUMENT, f"bad request: {e}"
  except _TooLarge as e:
    return grpc.StatusCode.RESOURCE_EXHAUSTED, f"{e} (serving.max_request_mib)"
  except Exception as e:  # noqa: BLE001 (reported to the caller, never kills the server)
    return grpc.StatusCode.INTERNAL, f"failed: {type(e).__name__}: {e}"


def _serialize(message: Message) -> bytes:
  return message.SerializeToString()


@dataclasses.dataclass(frozen=True)
class ClientSettings:
  """How an `RpcClient` waits (keys `serving.*`).

  Attributes:
    deadline: seconds a call keeps retrying an unreachable or busy server (it bounds
      reconnecting, not a slow answer).
    call_timeout: seconds one attempt may wait for its answer (a whole sub-agent batch).
    max_reply_bytes: the largest reply accepted.
    max_part_bytes: the largest part of a streamed request sent (the server's
      `ServerLimits.max_part_bytes`).
    keepalive_s, keepalive_timeout_s: pings on an open connection, and how long an
      unanswered one may wait before the connection counts as dropped.
  """

  deadline: float = 120.0
  call_timeout: float = 600.0
  max_reply_bytes: int = 256 << 20
  max_part_bytes: int = 64 << 10
  keepalive_s: float = 60.0
  keepalive_timeout_s: float = 20.0

  @classmethod
  def from_config(cls, serving) -> ClientSettings:
    return cls(deadline=float(serving.deadline_s), call_timeout=float(serving.call_timeout_s),
               max_reply_bytes=int(serving.max_reply_mib) << 20,
               max_part_bytes=int(serving.max_part_kib) << 10,
               keepalive_s=float(serving.keepalive_s),
               keepalive_timeout_s=float(serving.keepalive_timeout_s))

  def options(self) -> list[tuple[str, int]]:
    """The channel's gRPC arguments: reconnects are retried quickly (the call's own
    backoff paces them), not after gRPC's default of up to two minutes."""
    return [("grpc.max_receive_message_length", self.max_reply_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.keepalive_time_ms", int(self.keepalive_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            ("grpc.initial_reconnect_backoff_ms", 50),
            ("grpc.min_reconnect_backoff_ms", 50),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.enable_retries", 0)]


class RpcClient:
  """Calls an `RpcServer`, retrying unavailability with backoff until the deadline."""

  def __init__(self, service: str, address: tuple[str, int], *, token: str | None = None,
               settings: ClientSettings = ClientSettings(), tls: ClientTls | None = None
               ) -> None:
    self.address = address
    self._service = service
    self._metadata = (() if token is None
                      else ((TOKEN_KEY, token.encode("utf-8")),))
    self._settings = settings
    target = _target(*address)
    options = settings.options() + ([] if tls is None else tls.options())
    self._channel = (grpc.insecure_channel(target, options=options) if tls is None
                     else grpc.secure_channel(target, tls.credentials(), options=options))

  def call(self, method: str, request: Message, reply_type: type[Message], *,
           request_id: str | None = None,
           parts: Callable[[Message, int], Iterable[Message]] | None = None) -> Message:
    """The reply to `request`; raises RpcError, RpcTimeoutError or
    ServiceUnavailableError. `request_id` (default: a fresh one) names the call for the
    server across retries: callers that retry a call themselves pass the same id. A
    streamed method's request is sent as `parts(request, settings.max_part_bytes)`, built
    afresh for each attempt."""
    host, port = self.address
    open_call = self._channel.unary_unary if parts is None else self._channel.stream_unary
    stub = open_call(f"/{self._service}/{method}", request_serializer=_serialize,
                     response_deserializer=reply_type.FromString)
    metadata = (*self._metadata, (REQUEST_ID_KEY, request_id or uuid.uuid4().hex))

    def attempt(_: float) -> Message:
      try:
        return stub(request if parts is None
                    else iter(parts(request, self._settings.max_part_bytes)),
                    timeout=self._settings.call_timeout, metadata=metadata)
      except grpc.RpcError as e:
        code, details = e.code(), e.details()
        if code == grpc.StatusCode.UNAVAILABLE or (
            code == grpc.StatusCode.RESOURCE_EXHAUSTED and _BUSY in (details or "")):
          raise _Unavailable(f"{code.name}: {details}") from None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
          raise RpcTimeoutError(
              f"{host}:{port} {method!r}: no answer within {self._settings.call_timeout:g}s "
              "(serving.call_timeout_s); the call may still be running") from None
        raise RpcError(f"{host}:{port} {method!r}: {code.name}: {details}") from None

    policy = RetryPolicy(deadline=self._settings.deadline,
                         request_timeout=self._settings.call_timeout,
                         backoff=Backoff(initial=0.05, multiplier=2.0, maximum=2.0))
    return call_with_retry(attempt, policy=policy,
                           is_transient=lambda e: isinstance(e, _Unavailable),
                           operation=f"call {method!r} to {host}:{port}",
                           error_type=ServiceUnavailableError)

  def close(self) -> None:
    self._channel.close()
