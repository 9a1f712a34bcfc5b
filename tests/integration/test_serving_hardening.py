"""The gRPC layer under faults, through its public client and server over real sockets.

A server in another process that answers slowly; connections cut mid-call by a TCP
relay (the streamed request sent again); a full call cap; idle and silent connections; non-ASCII tokens; TLS with and
without client certificates; a server asked to listen on a public address without a
token or TLS. docs/RELIABILITY.md lists each case.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from mgrpo_jax.serving import messages, request_parts
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.rpc import (
  ClientSettings,
  Method,
  RpcClient,
  RpcError,
  RpcServer,
  RpcTimeoutError,
  ServerLimits,
  ServiceUnavailableError,
)
from mgrpo_jax.serving.tls import ClientTls, ServerTls
from tests.support.sockets import closed_by_peer
from tests.support.tls_certs import make_certificates

SERVICE = messages.SERVICE
STATUS = pb.StatusRequest()


def _method(run) -> dict[str, Method]:
  """A `Status` method that runs `run(request) -> version`."""
  return {"Status": Method(lambda data: messages.parse_request(data, pb.StatusRequest, {}),
                           lambda request: pb.StatusReply(version=run(request)))}


def _status(client: RpcClient, **kwargs) -> int:
  return client.call("Status", STATUS, pb.StatusReply, **kwargs).version


def _streamed(run, max_tasks: int = 1) -> dict[str, Method]:
  """A streamed `RunSubtasks` method that runs `run(request) -> version`."""
  return {"RunSubtasks": Method(lambda parts: request_parts.assemble(parts, max_tasks),
                                lambda request: pb.RunSubtasksReply(version=run(request)),
                                streamed=True)}


def _run(client: RpcClient, request: pb.RunSubtasksRequest, **kwargs) -> int:
  return client.call("RunSubtasks", request, pb.RunSubtasksReply, parts=request_parts.parts,
                     **kwargs).version


class _Relay:
  """A TCP relay to `target` whose connections the test can cut (a network fault)."""

  def __init__(self, target: tuple[str, int]):
    self._target = target
    self._listener = socket.create_server(("127.0.0.1", 0))
    self.address = self._listener.getsockname()[:2]
    self._sockets: list[socket.socket] = []
    self._lock = threading.Lock()
    threading.Thread(target=self._accept, daemon=True).start()

  def _accept(self) -> None:
    while True:
      try:
        client, _ = self._listener.accept()
      except OSError:
        return
      server = socket.create_connection(self._target)
      with self._lock:
        self._sockets += [client, server]
      for a, b in ((client, server), (server, client)):
        threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

  @staticmethod
  def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
      while data := src.recv(1 << 16):
        dst.sendall(data)
    except OSError:
      pass

  def cut(self) -> None:
    """Closes every relayed connection, both ends."""
    with self._lock:
      for sock in self._sockets:
        try:
          sock.shutdown(socket.SHUT_RDWR)
        except OSError:
          pass
        sock.close()
      self._sockets = []

  def close(self) -> None:
    self.cut()
    self._listener.close()


def test_a_public_address_needs_a_token_and_tls(tmp_path):
  certificates = make_certificates(tmp_path)
  tls = ServerTls(certificates.server_cert.read_bytes(), certificates.server_key.read_bytes())
  for token, server_tls in ((None, None), ("s3cret", None), (None, tls)):
    with pytest.raises(ValueError, match=r"serving\.host='0\.0\.0\.0'.*token.*TLS"):
      RpcServer(SERVICE, {}, host="0.0.0.0", token=token, tls=server_tls)
  RpcServer(SERVICE, {}, host="0.0.0.0", token="s3cret", tls=tls).stop()


def test_a_retried_call_still_running_is_answered_by_that_run():
  runs = []
  started = threading.Event()

  def slow(request):
    runs.append(1)
    started.set()
    time.sleep(1.0)
    return len(runs)

  server = RpcServer(SERVICE, _streamed(slow)).start()
  relay = _Relay(server.address)
  try:
    client = RpcClient(SERVICE, relay.address,
                       settings=ClientSettings(deadline=20, call_timeout=20))
    result = {}
    request = pb.RunSubtasksRequest(step=3, tasks=[pb.SubTask(subtask="x")])
    caller = threading.Thread(target=lambda: result.update(version=_run(client, request)))
    caller.start()
    assert started.wait(10)
    relay.cut()  # the connection drops while the server runs the call; the client retries
    caller.join(30)
    assert result == {"version": 1}
    assert runs == [1]
  finally:
    relay.close()
    server.stop()


def test_the_same_request_id_is_run_once_and_never_for_another_request():
  runs = []
  count = lambda request: runs.append(1) or len(runs)  # noqa: E731
  server = RpcServer(SERVICE, {**_method(count), **_streamed(count)}).start()
  try:
    client = RpcClient(SERVICE, server.address)
    request = pb.RunSubtasksRequest(step=1, tasks=[pb.SubTask(subtask="x")])
    assert _run(client, request, request_id="a") == 1
    assert _run(RpcClient(SERVICE, server.address), request, request_id="a") == 1
    assert _status(client, request_id="b") == 2
    assert _status(client, request_id="b") == 2
    assert _status(client) == 3  # a fresh id runs again
    with pytest.raises(RpcError, match="request id 'a' was used for another request"):
      _run(client, pb.RunSubtasksRequest(step=2, tasks=request.tasks), request_id="a")
    with pytest.raises(RpcError, match="request id 'b' was used for another request"):
      _run(client, request, request_id="b")
    with pytest.raises(RpcError, match="must have 1 to 128 characters"):
      _status(client, request_id="x" * 129)
    assert runs == [1, 1, 1]
  finally:
    server.stop()


_SLOW_SERVER = textwrap.dedent("""
    import sys, time
    from mgrpo_jax.serving import messages, request_parts
    from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
    from mgrpo_jax.serving.rpc import Method, RpcServer

    def run(request):
      if request.step:
        time.sleep(30)
      return pb.RunSubtasksReply()

    parse = lambda parts: request_parts.assemble(parts, 1)
    server = RpcServer(messages.SERVICE, {"RunSubtasks": Method(parse, run, streamed=True)}
                       ).start()
    print(server.address[1], flush=True)
    sys.stdin.read()
""")


def test_a_slow_answer_is_a_timeout_not_an_unreachable_service():
  process = subprocess.Popen([sys.executable, "-c", _SLOW_SERVER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
  try:
    port = int(process.stdout.readline())
    client = RpcClient(SERVICE, ("127.0.0.1", port),
                       settings=ClientSettings(deadline=30, call_timeout=0.5))
    _run(client, pb.RunSubtasksRequest())
    start = time.monotonic()
    with pytest.raises(RpcTimeoutError, match=r"'RunSubtasks': no answer within 0\.5s "
                                              r"\(serving\.call_timeout_s\)"):
      _run(client, pb.RunSubtasksRequest(step=1))
    assert time.monotonic() - start < 5  # not retried until the 30 s deadline
  finally:
    process.kill()
    process.wait()


def test_calls_over_the_cap_are_told_busy_and_retried():
  release = threading.Event()

  def run(request):
    if request.version:  # hold the only slot
      release.wait(30)
    return 1

  server = RpcServer(SERVICE, _streamed(run),
                     limits=ServerLimits(max_concurrent_calls=1)).start()
  holder = threading.Thread(target=lambda: _run(RpcClient(SERVICE, server.address),
                                                pb.RunSubtasksRequest(version=1)))
  holder.start()
  try:
    time.sleep(0.5)
    with pytest.raises(ServiceUnavailableError, match="Concurrent RPC limit exceeded"):
      _run(RpcClient(SERVICE, server.address, settings=ClientSettings(deadline=1)),
           pb.RunSubtasksRequest())
    client = RpcClient(SERVICE, server.address, settings=ClientSettings(deadline=20))
    threading.Timer(0.5, release.set).start()  # the slot frees up while the client retries
    assert _run(client, pb.RunSubtasksRequest(tasks=[pb.SubTask(subtask="x")])) == 1
  finally:
    release.set()
    holder.join(10)
    server.stop()


def test_silent_and_idle_connections_are_closed_and_the_client_reconnects():
  server = RpcServer(SERVICE, _method(lambda request: 3), limits=ServerLimits(
      handshake_timeout_s=0.5, idle_timeout_s=1.0)).start()
  try:
    silent = socket.create_connection(server.address)
    slow = socket.create_connection(server.address)
    slow.sendall(b"PRI * HTTP/2.0\r\n")  # the preface, cut short
    assert closed_by_peer(silent, 10) and closed_by_peer(slow, 10)
    client = RpcClient(SERVICE, server.address)
    assert _status(client) == 3
    time.sleep(2.5)  # the server closes the idle connection (GOAWAY)
    assert _status(client) == 3
  finally:
    server.stop()


@pytest.mark.parametrize("token", ["t\u00f6k\u00e9n", "\u2603" * 50, "x" * 200])
def test_a_wrong_non_ascii_token_is_refused(token):
  server = RpcServer(SERVICE, _method(lambda request: 0), token="s3cret").start()
  try:
    client = RpcClient(SERVICE, server.address, token=token,
                       settings=ClientSettings(deadline=5))
    with pytest.raises(RpcError, match="UNAUTHENTICATED"):
      _status(client)
  finally:
    server.stop()


def test_a_non_ascii_token_is_accepted_when_it_is_the_right_one():
  server = RpcServer(SERVICE, _method(lambda request: 4), token="t\u00f6k\u00e9n").start()
  try:
    assert _status(RpcClient(SERVICE, server.address, token="t\u00f6k\u00e9n")) == 4
  finally:
    server.stop()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
  return make_certificates(tmp_path_factory.mktemp("tls"))


def _tls_server(certificates, client_ca: bool = False) -> RpcServer:
  tls = ServerTls(certificates.server_cert.read_bytes(), certificates.server_key.read_bytes(),
                  certificates.ca.read_bytes() if client_ca else None)
  return RpcServer(SERVICE, _method(lambda request: 9), token="s3cret", tls=tls).start()


def _tls_client(server: RpcServer, tls: ClientTls | None) -> RpcClient:
  return RpcClient(SERVICE, server.address, token="s3cret", tls=tls,
                   settings=ClientSettings(deadline=1.5))


def test_tls_serves_a_client_that_trusts_the_certificate_and_no_other(certificates):
  server = _tls_server(certificates)
  try:
    ca = certificates.ca.read_bytes()
    assert _status(_tls_client(server, ClientTls(root_certs=ca))) == 9
    assert _status(_tls_client(server, ClientTls(root_certs=ca, server_name="localhost"))) == 9
    for tls in (None, ClientTls(root_certs=certificates.other_ca.read_bytes()),
                ClientTls(root_certs=ca, server_name="elsewhere.example")):
      with pytest.raises(ServiceUnavailableError):
        _status(_tls_client(server, tls))
  finally:
    server.stop()


def test_tls_with_client_certificates_refuses_a_client_without_one(certificates):
  server = _tls_server(certificates, client_ca=True)
  try:
    ca = certificates.ca.read_bytes()
    with pytest.raises(ServiceUnavailableError):
      _status(_tls_client(server, ClientTls(root_certs=ca)))
    signed = ClientTls(root_certs=ca, cert_chain=certificates.client_cert.read_bytes(),
                       private_key=certificates.client_key.read_bytes())
    assert _status(_tls_client(server, signed)) == 9
  finally:
    server.stop()
