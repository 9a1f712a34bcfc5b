"""Raw parts against a running server: every malformed, misordered or oversized request
gets an error status, never a crash or a hang, nothing runs, and the server keeps serving
(hypothesis over parts); a request over the size limit is refused as its parts arrive,
the rest unread; a part over the part limit never runs what came before it; a wrong token
is refused before any part is read; many idle connections without a token do not lock a
caller with the token out.
"""

from __future__ import annotations

import socket

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgrpo_jax.serving import messages, request_parts
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.rpc import TOKEN_KEY, Method, RpcClient, RpcServer, ServerLimits
from tests.support.request_wire import header_part, task_part

TOKEN = "s3cret"
MAX_TASKS = 8
MANY_TASKS = 100_000  # the method "RunMany": tasks enough to pass the size limit
LIMITS = ServerLimits(max_request_bytes=256 << 10, max_part_bytes=16 << 10,
                      handshake_timeout_s=2)


@pytest.fixture(scope="module")
def server():
  calls = []

  def run(request):
    calls.append(request)
    return pb.RunSubtasksReply(version=len(request.tasks))

  methods = {name: Method(lambda parts, most=most: request_parts.assemble(parts, most), run,
                          streamed=True)
             for name, most in (("RunSubtasks", MAX_TASKS), ("RunMany", MANY_TASKS))}
  srv = RpcServer(messages.SERVICE, methods, token=TOKEN, limits=LIMITS).start()
  yield srv, calls
  srv.stop()


def _raw(address, parts, token: bytes = TOKEN.encode(), method: str = "RunSubtasks"):
  """(status code, details or reply) of one call streaming `parts` (bytes) as its parts."""
  with grpc.insecure_channel(f"{address[0]}:{address[1]}", options=[
      ("grpc.max_send_message_length", -1)]) as channel:
    call = channel.stream_unary(f"/{messages.SERVICE}/{method}", request_serializer=None,
                                response_deserializer=pb.RunSubtasksReply.FromString)
    try:
      return grpc.StatusCode.OK, call(iter(parts), timeout=60, metadata=[(TOKEN_KEY, token)])
    except grpc.RpcError as e:
      return e.code(), e.details()


def _serves(address) -> bool:
  request = pb.RunSubtasksRequest(tasks=[pb.SubTask(query_id="q", subtask="s")])
  return RpcClient(messages.SERVICE, address, token=TOKEN).call(
      "RunSubtasks", request, pb.RunSubtasksReply, parts=request_parts.parts).version == 1


def _tasks(count: int, entry: bytes = b""):
  return (task_part(entry) for _ in range(count))


@pytest.mark.parametrize("parts,message", [
    ([header_part(MAX_TASKS + 1)], f"announces {MAX_TASKS + 1} tasks: a request holds 0 to "
                               f"{MAX_TASKS}"),
    ([header_part(MAX_TASKS), *_tasks(MAX_TASKS + 1)], f"part 9: more tasks than the {MAX_TASKS}"),
    ([header_part(MAX_TASKS), task_part() * (MAX_TASKS + 1)], f"more than {MAX_TASKS} entries"),
    ([header_part(1), *_tasks(500_000)], "part 2: more tasks than the 1"),  # 1 MB of empty tasks
    ([*_tasks(2)], "part 0: the header comes in the first part, and only there"),
    ([header_part(1), header_part(1), task_part()], "part 1: the header comes in the first part"),
    ([], "no parts"),
    ([header_part(1), b""], "part 1 is empty"),
    ([header_part(2), task_part()], "ended after 1 of the 2 tasks"),
    ([header_part(0, b"\x08\x01\x08\x02")], "RunSubtasksHeader.step: a singular field sent 2"),
    ([header_part(0, b"\x0a\x01x")], "RunSubtasksHeader.step: wire type 2, expected 0"),
    ([header_part(1), task_part(b"\x10\x05\x10\x06")], "SubTask.rollout_index: a singular field"),
    ([header_part(1), task_part(b"\x12\x03abc")], "SubTask.rollout_index: wire type 2, expected 0"),
    ([header_part(1), task_part(b"\x22\x02\xff\xfe")], "malformed RunSubtasksPart"),  # not UTF-8
    ([header_part(1), b"\x0a\x00\x12\x00"], "part 1: the header comes in the first part"),
    ([b"\x78\x01"], "no field number 15"),
    ([header_part(0, b"\x08" + b"\xff" * 10 + b"\x01")], "overlong varint"),
    ([b"\x12\x10abc"], "truncated"),
])
def test_a_malformed_request_is_invalid_and_the_server_keeps_serving(server, parts, message):
  srv, calls = server
  before = len(calls)
  code, details = _raw(srv.address, parts)
  assert code == grpc.StatusCode.INVALID_ARGUMENT and message in details, details
  assert len(calls) == before  # refused before the method ran
  assert _serves(srv.address)


def test_a_request_over_the_size_limit_in_small_parts_is_refused_as_they_arrive(server):
  """100,000 parts of 105 bytes (10.5 MB against 256 KiB): RESOURCE_EXHAUSTED once the
  parts pass the limit; the caller's parts after that are never asked for."""
  srv, calls = server
  before = len(calls)
  sent = []

  def parts():
    yield header_part(MANY_TASKS)
    for _ in range(MANY_TASKS):
      sent.append(1)
      yield task_part(b"\x22\x64" + b"x" * 100)

  code, details = _raw(srv.address, parts(), method="RunMany")
  assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
  assert f"parts are more than {256 << 10} bytes" in details
  assert len(calls) == before
  assert 2_400 < len(sent) < 20_000  # refused after 256 KiB / 105 bytes, not all read
  assert _raw(srv.address, [header_part(2_000), *_tasks(2_000, b"\x22\x64" + b"x" * 100)],
              method="RunMany")[1].version == 2_000  # 210 KB is served
  assert _serves(srv.address)


def test_a_part_over_the_part_limit_never_runs_the_parts_before_it(server):
  """gRPC may end the stream of a call it refused for an oversized part as if the caller
  had finished it (about one time in six): the header's task count refuses what came."""
  srv, calls = server
  before = len(calls)
  big = pb.RunSubtasksPart(tasks=[pb.SubTask(subtask="x" * (16 << 10))]).SerializeToString()
  for _ in range(30):
    code, details = _raw(srv.address, [header_part(2), task_part(), big])
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details
  assert len(calls) == before
  assert _serves(srv.address)


def test_a_wrong_token_is_refused_before_any_part_is_read(server):
  srv, calls = server
  before = len(calls)
  sent = []

  def parts():  # 64 MiB in 4 KiB parts
    yield header_part(16_384)
    for _ in range(16_384):
      sent.append(1)
      yield pb.RunSubtasksPart(tasks=[pb.SubTask(subtask="x" * 4090)]).SerializeToString()

  code, details = _raw(srv.address, parts(), token=b"wrong", method="RunMany")
  assert code == grpc.StatusCode.UNAUTHENTICATED, details
  assert len(calls) == before
  assert len(sent) < 16_384 // 4
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


_SUB_TASKS = st.lists(st.builds(pb.SubTask, query_id=st.text(max_size=4),
                                rollout_index=st.integers(-2**31, 2**31 - 1),
                                subtask=st.text(max_size=4)), max_size=MAX_TASKS + 2)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.one_of(
    st.lists(st.binary(max_size=24), max_size=6),
    st.lists(st.binary(max_size=12), max_size=12).map(
        lambda entries: [header_part(len(entries))] + [task_part(e) for e in entries]),
    st.builds(lambda step, tasks, size: [p.SerializeToString() for p in request_parts.parts(
        pb.RunSubtasksRequest(step=step, tasks=tasks), size)], st.integers(-2**63, 2**63 - 1),
              _SUB_TASKS, st.integers(1, 40))))
def test_any_parts_get_a_reply_or_an_error_and_the_server_keeps_serving(server, parts):
  srv, _ = server
  code, reply = _raw(srv.address, parts)
  if code == grpc.StatusCode.OK:
    assert reply.version == len(request_parts.assemble(parts, MAX_TASKS).tasks) <= MAX_TASKS
  else:
    assert code == grpc.StatusCode.INVALID_ARGUMENT and reply
  assert _serves(srv.address)
