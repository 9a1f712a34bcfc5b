"""The RPC layer under faults, through its public client and server over real sockets.

A server in another process that answers slowly; connections cut mid-call by a TCP
relay; a full connection cap; a non-ASCII token; a server asked to listen on a public
address without a token. docs/RELIABILITY.md lists each case.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from mgrpo_jax.serving.rpc import (
  ClientSettings,
  RpcClient,
  RpcError,
  RpcServer,
  RpcTimeoutError,
  ServerLimits,
  ServiceUnavailableError,
)


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


def test_public_address_without_a_token_is_refused():
  with pytest.raises(ValueError, match=r"serving\.host='0\.0\.0\.0'.*serving\.token_env"):
    RpcServer({}, host="0.0.0.0")
  RpcServer({}, host="0.0.0.0", token="s3cret")._server.server_close()


def test_a_retried_call_still_running_is_answered_by_that_run(tmp_path):
  runs = []
  started = threading.Event()

  def slow(payload):
    runs.append(payload["x"])
    started.set()
    time.sleep(1.0)
    return {"x": payload["x"], "runs": len(runs)}

  server = RpcServer({"slow": slow}).start()
  relay = _Relay(server.address)
  try:
    client = RpcClient(relay.address, settings=ClientSettings(deadline=20, call_timeout=20))
    result = {}
    caller = threading.Thread(target=lambda: result.update(client.call("slow", {"x": 7})))
    caller.start()
    assert started.wait(10)
    relay.cut()  # the connection drops while the server runs the call; the client retries
    caller.join(30)
    assert result == {"x": 7, "runs": 1}
    assert runs == [7]
  finally:
    relay.close()
    server.stop()


def test_the_same_request_id_is_run_once_even_after_it_finished():
  runs = []
  server = RpcServer({"count": lambda p: {"n": runs.append(1) or len(runs)}}).start()
  try:
    client = RpcClient(server.address)
    assert client.call("count", {}, request_id="a") == {"n": 1}
    assert RpcClient(server.address).call("count", {}, request_id="a") == {"n": 1}
    assert client.call("count", {}) == {"n": 2}  # a fresh id runs again
    with pytest.raises(RpcError, match="id must be a string of 1 to 128"):
      client.call("count", {}, request_id="x" * 129)
  finally:
    server.stop()


_SLOW_SERVER = textwrap.dedent("""
    import sys, time
    from mgrpo_jax.serving.rpc import RpcServer
    server = RpcServer({"slow": lambda p: time.sleep(30) or {}, "ping": lambda p: {}}).start()
    print(server.address[1], flush=True)
    sys.stdin.read()
""")


def test_a_slow_answer_is_a_timeout_not_an_unreachable_service():
  process = subprocess.Popen([sys.executable, "-c", _SLOW_SERVER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
  try:
    port = int(process.stdout.readline())
    client = RpcClient(("127.0.0.1", port),
                       settings=ClientSettings(deadline=30, call_timeout=0.5))
    assert client.call("ping", {}) == {}
    start = time.monotonic()
    with pytest.raises(RpcTimeoutError, match=r"'slow': no answer within 0\.5s "
                                              r"\(serving\.call_timeout_s\)"):
      client.call("slow", {})
    assert time.monotonic() - start < 5  # not retried until the 30 s deadline
  finally:
    process.kill()
    process.wait()


def test_connections_over_the_cap_are_told_busy_and_retried():
  server = RpcServer({"ping": lambda p: {"pong": True}},
                     limits=ServerLimits(max_connections=2)).start()
  idle = [socket.create_connection(server.address) for _ in range(2)]
  try:
    time.sleep(0.2)
    with pytest.raises(ServiceUnavailableError, match="busy: serving 2 connections"):
      RpcClient(server.address, settings=ClientSettings(deadline=1)).call("ping", {})
    client = RpcClient(server.address, settings=ClientSettings(deadline=20))
    threading.Timer(0.5, idle.pop().close).start()  # a slot frees up while the client retries
    assert client.call("ping", {}) == {"pong": True}
  finally:
    for sock in idle:
      sock.close()
    server.stop()


def test_idle_connections_are_closed_and_the_client_reconnects():
  server = RpcServer({"ping": lambda p: {"pong": True}},
                     limits=ServerLimits(idle_timeout_s=0.3)).start()
  try:
    with socket.create_connection(server.address, timeout=5) as idle:
      assert idle.recv(1) == b""  # closed by the server after 0.3 s
    client = RpcClient(server.address)
    assert client.call("ping", {}) == {"pong": True}
    time.sleep(0.6)
    assert client.call("ping", {}) == {"pong": True}  # its reused connection had closed
  finally:
    server.stop()


@pytest.mark.parametrize("token", ["t\u00f6k\u00e9n", "\u2603" * 50, "x" * 200])
def test_a_wrong_non_ascii_token_is_an_error_reply(token):
  server = RpcServer({"ping": lambda p: {}}, token="s3cret").start()
  try:
    client = RpcClient(server.address, token=token, settings=ClientSettings(deadline=5))
    with pytest.raises(RpcError, match="unauthorized"):
      client.call("ping", {})
  finally:
    server.stop()


def test_a_non_ascii_token_is_accepted_when_it_is_the_right_one():
  server = RpcServer({"ping": lambda p: {"pong": True}}, token="t\u00f6k\u00e9n").start()
  try:
    assert RpcClient(server.address, token="t\u00f6k\u00e9n").call("ping", {}) == {"pong": True}
  finally:
    server.stop()
