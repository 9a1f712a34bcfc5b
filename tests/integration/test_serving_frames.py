"""Raw frames against a running server: every bad frame gets an error reply, never a hang
or a dropped connection without one, and the server keeps serving (hypothesis over bytes).
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgrpo_jax.serving.frames import (
  FrameError,
  decode_body,
  encode_body,
  recv_response,
  request_bytes,
)
from mgrpo_jax.serving.rpc import RpcClient, RpcServer, ServerLimits

TOKEN = b"s3cret"


def _u32(n: int) -> bytes:
  return n.to_bytes(4, "big")


@pytest.fixture(scope="module")
def server():
  srv = RpcServer({"echo": lambda p: {"echo": p}}, token=TOKEN.decode(),
                  limits=ServerLimits(read_timeout_s=0.5)).start()
  yield srv
  srv.stop()


def _exchange(address, data: bytes, *, close_write: bool = True) -> dict | None:
  """Sends `data`, then reads one response frame (None if the server closed without one)."""
  with socket.create_connection(address, timeout=10) as sock:
    sock.sendall(data)
    if close_write:
      sock.shutdown(socket.SHUT_WR)
    try:
      return recv_response(sock, time.monotonic() + 10)
    except ConnectionError:
      return None


def _body(body: bytes, token: bytes = TOKEN) -> bytes:
  return _u32(len(token)) + token + _u32(len(body)) + body


@pytest.mark.parametrize("frame,message", [
    (_body(b"[" * 200_000 + b"]" * 200_000), "nested too deeply"),
    (_body(b'{"method": "echo", "payload": {"x": "\xff\xfe"}}'), "not UTF-8"),
    (_body(b'{"method": "echo", '), "not JSON"),
    (_body(b'"just a string"'), "expected an object"),
    (_body(b'{"method": ["echo"], "payload": {}}'), "unknown method ['echo']"),
    (_body(b'{"method": "echo", "payload": {}, "id": 5}'), "id must be a string"),
    (_u32(5000) + b"x", "token of 5000 bytes exceeds the 1024-byte limit"),
    (_u32(len(TOKEN)) + TOKEN + _u32(2**31), "request of 2147483648 bytes exceeds"),
    (_body(b"{}", token="t\u00f6k\u00e9n".encode()), "unauthorized"),
    (_body(b"{}", token=b"\xff\x00"), "unauthorized"),
])
def test_a_bad_frame_gets_an_error_reply(server, frame, message):
  reply = _exchange(server.address, frame)
  assert reply is not None and reply["ok"] is False
  assert message in reply["error"]
  assert RpcClient(server.address, token=TOKEN.decode()).call("echo", {"a": 1}) == {
      "echo": {"a": 1}}


def test_a_wrong_token_is_refused_before_the_body_arrives(server):
  """The server answers right after the token, never waiting for the announced body."""
  start = time.monotonic()
  reply = _exchange(server.address, _u32(5) + b"wrong" + _u32(200 << 20), close_write=False)
  assert reply == {"ok": False, "error": "unauthorized: missing or wrong service token"}
  assert time.monotonic() - start < 0.4  # sooner than the 0.5 s read timeout


def test_a_frame_that_stalls_is_answered_at_the_read_timeout(server):
  start = time.monotonic()
  reply = _exchange(server.address, _u32(len(TOKEN)) + TOKEN + _u32(100) + b"{",
                    close_write=False)
  assert reply["ok"] is False and "not complete within 0.5s" in reply["error"]
  assert 0.4 < time.monotonic() - start < 5


@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(data=st.one_of(
    st.binary(max_size=64),
    st.binary(max_size=64).map(lambda b: _u32(len(TOKEN)) + TOKEN + _u32(len(b)) + b),
    st.recursive(st.none() | st.integers() | st.text(max_size=5),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c,
                                                                     max_size=3),
                 max_leaves=8).map(lambda v: _body(json.dumps(v).encode()))))
def test_any_bytes_get_at_most_one_reply_and_the_server_keeps_serving(server, data):
  reply = _exchange(server.address, data)
  if reply is not None:
    assert set(reply) <= {"ok", "error", "result", "retry"} and isinstance(reply["ok"], bool)
    if not reply["ok"]:
      assert isinstance(reply["error"], str) and reply["error"]
  assert RpcClient(server.address, token=TOKEN.decode()).call("echo", {}) == {"echo": {}}


@given(st.binary(max_size=256))
def test_decode_body_returns_an_object_or_raises_frame_error(data):
  try:
    assert isinstance(decode_body(data), dict)
  except FrameError:
    pass


@given(st.dictionaries(st.text(max_size=8), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c, max_size=4),
    max_leaves=20), max_size=5))
def test_bodies_round_trip(message):
  assert decode_body(encode_body(message)) == message
  frame = request_bytes(TOKEN, message)
  assert frame[:4] == _u32(len(TOKEN)) and frame[4:4 + len(TOKEN)] == TOKEN
