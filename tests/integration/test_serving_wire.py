"""Raw bytes against a running server: every malformed or oversized request gets an error
status, never a crash or a hang, and the server keeps serving (hypothesis over bytes);
a wrong token is refused before a large body is read; many idle connections without a
token do not lock a caller with the token out.
"""

from __future__ import annotations

import socket

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgrpo_jax.serving import messages
from mgrpo_jax.serving.messages import TASKS_FIELD
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.rpc import TOKEN_KEY, Method, RpcClient, RpcServer, ServerLimits

TOKEN = "s3cret"
MAX_TASKS = 8
PATH = f"/{messages.SERVICE}/RunSubtasks"


@pytest.fixture(scope="module")
def server():
  calls = []

  def run(request):
    calls.append(request)
    return pb.RunSubtasksReply(version=len(request.tasks))

  parse = lambda data: messages.parse_request(  # noqa: E731
      data, pb.RunSubtasksRequest, {TASKS_FIELD: MAX_TASKS})
  srv = RpcServer(messages.SERVICE, {"RunSubtasks": Method(parse, run)}, token=TOKEN,
                  limits=ServerLimits(max_request_bytes=1 << 20, handshake_timeout_s=2)).start()
  yield srv, calls
  srv.stop()


def _raw(address, data: bytes, token: bytes = TOKEN.encode(), timeout: float = 20):
  """(status code, details or reply) of one call sending `data` as the request's bytes."""
  with grpc.insecure_channel(f"{address[0]}:{address[1]}", options=[
      ("grpc.max_send_message_length", -1)]) as channel:
    call = channel.unary_unary(PATH, request_serializer=None,
                               response_deserializer=pb.RunSubtasksReply.FromString)
    try:
      return grpc.StatusCode.OK, call(data, timeout=timeout, metadata=[(TOKEN_KEY, token)])
    except grpc.RpcError as e:
      return e.code(), e.details()


def _serves(address) -> bool:
  request = pb.RunSubtasksRequest(tasks=[pb.SubTask(query_id="q", subtask="s")])
  return RpcClient(messages.SERVICE, address, token=TOKEN).call(
      "RunSubtasks", request, pb.RunSubtasksReply).version == 1


def _task_entries(count: int, entry: bytes = b"") -> bytes:
  """`count` entries of field 5 (tasks), each holding `entry`."""
  return (b"\x2a" + bytes([len(entry)]) + entry) * count


@pytest.mark.parametrize("data,message", [
    (_task_entries(MAX_TASKS + 1), f"more than {MAX_TASKS} entries"),
    (_task_entries(500_000), f"more than {MAX_TASKS} entries"),  # 1 MB of empty tasks
    (b"\x08\x01\x08\x02", "RunSubtasksRequest.step: a singular field sent 2 times"),
    (b"\x0a\x01x", "RunSubtasksRequest.step: wire type 2, expected 0"),
    (_task_entries(1, b"\x10\x05\x10\x06"), "SubTask.rollout_index: a singular field"),
    (_task_entries(1, b"\x12\x03abc"), "SubTask.rollout_index: wire type 2, expected 0"),
    (_task_entries(1, b"\x22\x02\xff\xfe"), "malformed RunSubtasksRequest"),  # not UTF-8
    (b"\x78\x01", "no field number 15"),
    (b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "overlong varint"),
    (b"\x2a\x10abc", "truncated"),
])
def test_a_malformed_request_is_invalid_and_the_server_keeps_serving(server, data, message):
  srv, calls = server
  before = len(calls)
  code, details = _raw(srv.address, data)
  assert code == grpc.StatusCode.INVALID_ARGUMENT and message in details, details
  assert len(calls) == before  # refused before the method ran
  assert _serves(srv.address)


def test_a_request_over_the_size_limit_is_refused_unread(server):
  srv, _ = server
  code, details = _raw(srv.address, _task_entries(1, b"\x22\x7f" + b"x" * 127) * 9000)
  assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details
  assert _serves(srv.address)


def test_a_wrong_token_is_refused_before_a_64_mib_body_is_read(server):
  srv, calls = server
  before = len(calls)
  code, details = _raw(srv.address, b"\x2a\x00" * (32 << 20), token=b"wrong")
  assert code == grpc.StatusCode.UNAUTHENTICATED, details
  assert len(calls) == before
  assert _serves(srv.address)


def test_two_hundred_silent_or_slow_connections_do_not_lock_the_token_holder_out(server):
  """(tools/serving_attacks.py measures the latency and memory.)"""
  srv, _ = server
  idle = [socket.create_connection(srv.address) for _ in range(200)]
  for sock in idle[::2]:
    sock.sendall(b"PRI * HTTP/2.0\r\n")  # half of them start the preface and stall
  try:
    assert _serves(srv.address)  # the old server kept 16 and told the rest "busy"
  finally:
    for sock in idle:
      sock.close()


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(
    st.binary(max_size=64),
    st.lists(st.binary(max_size=12), max_size=12).map(
        lambda entries: b"".join(_task_entries(1, e) for e in entries)),
    st.builds(lambda step, tasks: pb.RunSubtasksRequest(step=step, tasks=tasks)
              .SerializeToString(), st.integers(-2**63, 2**63 - 1),
              st.lists(st.builds(pb.SubTask, query_id=st.text(max_size=4),
                                 rollout_index=st.integers(-2**31, 2**31 - 1),
                                 subtask=st.text(max_size=4)), max_size=MAX_TASKS + 2))))
def test_any_bytes_get_a_reply_or_an_error_and_the_server_keeps_serving(server, data):
  srv, _ = server
  code, reply = _raw(srv.address, data)
  if code == grpc.StatusCode.OK:
    request = pb.RunSubtasksRequest.FromString(data)
    assert reply.version == len(request.tasks) <= MAX_TASKS
  else:
    assert code == grpc.StatusCode.INVALID_ARGUMENT and reply
  assert _serves(srv.address)

