"""The TCP request/response layer between the slices: framing, auth, errors, retries."""

import socket
import threading
import time

import pytest

from mgrpo_jax.serving.frames import recv_response, request_bytes
from mgrpo_jax.serving.rpc import (
  ClientSettings,
  RpcClient,
  RpcError,
  RpcServer,
  ServiceUnavailableError,
)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture
def server():
  calls = []

  def echo(payload):
    calls.append(payload)
    return {"echo": payload, "n": len(calls)}

  def boom(payload):
    raise ValueError(f"bad subtask {payload.get('x')!r}")

  srv = RpcServer({"echo": echo, "boom": boom}, token="s3cret").start()
  yield srv, calls
  srv.stop()


def test_round_trip_preserves_payload(server):
  srv, calls = server
  client = RpcClient(srv.address, token="s3cret")
  payload = {"text": "héllo <tool_call>", "ids": list(range(1000)), "nested": {"a": [1.5, None]}}
  assert client.call("echo", payload) == {"echo": payload, "n": 1}
  assert client.call("echo", {"k": 2})["n"] == 2  # the connection is reused
  client.close()


def test_wrong_or_missing_token_is_refused(server):
  srv, calls = server
  for token in ("nope", None):
    with pytest.raises(RpcError, match="unauthorized"):
      RpcClient(srv.address, token=token).call("echo", {})
  assert calls == []


def test_handler_error_and_unknown_method_are_reported_not_fatal(server):
  srv, _ = server
  client = RpcClient(srv.address, token="s3cret")
  with pytest.raises(RpcError, match=r"'boom' failed: ValueError: bad subtask 7"):
    client.call("boom", {"x": 7})
  with pytest.raises(RpcError, match=r"unknown method 'nope'; known: boom, echo"):
    client.call("nope", {})
  assert client.call("echo", {})["n"] == 1


def test_oversized_or_malformed_frames_are_rejected(server):
  srv, _ = server
  token = b"s3cret"
  prefix = len(token).to_bytes(4, "big") + token
  with socket.create_connection(srv.address, timeout=5) as sock:
    sock.sendall(prefix + (2**31).to_bytes(4, "big"))
    assert "exceeds" in recv_response(sock)["error"]
  with socket.create_connection(srv.address, timeout=5) as sock:
    body = b"[1, 2]"
    sock.sendall(prefix + len(body).to_bytes(4, "big") + body)
    assert "expected an object" in recv_response(sock)["error"]
  with socket.create_connection(srv.address, timeout=5) as sock:
    sock.sendall(request_bytes(token, {"method": "echo", "payload": []}))
    assert "payload must be an object" in recv_response(sock)["error"]


def test_unreachable_service_fails_after_deadline_naming_the_address():
  port = _free_port()
  client = RpcClient(("127.0.0.1", port), settings=ClientSettings(deadline=0.5))
  start = time.monotonic()
  with pytest.raises(ServiceUnavailableError, match=rf"'run' to 127\.0\.0\.1:{port} failed after"):
    client.call("run", {})
  assert time.monotonic() - start < 10


def test_client_waits_for_a_server_that_starts_late():
  port = _free_port()
  started = {}

  def start_later():
    time.sleep(0.5)
    started["srv"] = RpcServer({"ping": lambda p: {"pong": True}}, port=port).start()

  thread = threading.Thread(target=start_later)
  thread.start()
  try:
    client = RpcClient(("127.0.0.1", port), settings=ClientSettings(deadline=20))
    assert client.call("ping", {}) == {"pong": True}
  finally:
    thread.join()
    started["srv"].stop()


def test_server_restart_between_calls_is_retried():
  port = _free_port()
  srv = RpcServer({"ping": lambda p: {"v": 1}}, port=port).start()
  client = RpcClient(("127.0.0.1", port), settings=ClientSettings(deadline=20))
  assert client.call("ping", {}) == {"v": 1}
  srv.stop()
  srv = RpcServer({"ping": lambda p: {"v": 2}}, port=port).start()
  try:
    assert client.call("ping", {}) == {"v": 2}
  finally:
    srv.stop()
