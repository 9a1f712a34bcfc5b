"""The gRPC layer between the slices: typed round trips (a streamed request and a unary
one), the token checked before any part is read, errors, request ids, retries."""

import socket
import threading
import time

import numpy as np
import pytest

from mgrpo_jax.serving import messages, request_parts
from mgrpo_jax.serving.messages import BadRequest
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.rpc import (
  ClientSettings,
  Method,
  RpcClient,
  RpcError,
  RpcServer,
  ServiceUnavailableError,
)

SERVICE = messages.SERVICE


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def status(version: int) -> dict[str, Method]:
  """A `Status` method answering `version`."""
  return {"Status": Method(lambda data: messages.parse_request(data, pb.StatusRequest, {}),
                           lambda request: pb.StatusReply(version=version))}


@pytest.fixture
def server():
  calls, read = [], []

  def assemble(parts):
    return request_parts.assemble((read.append(part) or part for part in parts), 64)

  def echo(request):
    calls.append(request)
    if request.step == 13:
      raise BadRequest(f"step {request.step} is unlucky")
    if request.step == 7:
      raise ValueError(f"bad subtask {request.tasks[0].subtask!r}")
    return pb.RunSubtasksReply(version=len(calls), results=[
        pb.SubRecord(task=task, report=task.subtask,
                     trajectory=pb.Trajectory(ids=[task.call_index] * 3))
        for task in request.tasks])

  srv = RpcServer(SERVICE, {"RunSubtasks": Method(assemble, echo, streamed=True)},
                  token="s3cret").start()
  yield srv, calls, read
  srv.stop()


def _request(step: int = 0, subtask: str = "héllo <tool_call>") -> pb.RunSubtasksRequest:
  return pb.RunSubtasksRequest(step=step, seed=2**31, version=3, batch=1, tasks=[
      pb.SubTask(query_id="q-1", rollout_index=2, call_index=i, subtask=subtask,
                 context="ctx") for i in range(3)])


def _run(client: RpcClient, request: pb.RunSubtasksRequest, **kwargs) -> pb.RunSubtasksReply:
  return client.call("RunSubtasks", request, pb.RunSubtasksReply, parts=request_parts.parts,
                     **kwargs)


def test_typed_round_trip_reuses_the_connection(server):
  srv, calls, read = server
  client = RpcClient(SERVICE, srv.address, token="s3cret")
  reply = _run(client, _request())
  assert reply.version == 1 and [r.report for r in reply.results] == ["héllo <tool_call>"] * 3
  assert [list(r.trajectory.ids) for r in reply.results] == [[0] * 3, [1] * 3, [2] * 3]
  assert calls == [_request()] and len(read) == 1  # a small batch is one part
  small_parts = RpcClient(SERVICE, srv.address, token="s3cret",
                          settings=ClientSettings(max_part_bytes=64))
  assert _run(small_parts, _request()).results == reply.results
  assert calls[1] == _request() and len(read) == 1 + 3  # each part one task (and the header)
  client.close()


def test_wrong_or_missing_token_is_refused_before_any_part_is_read(server):
  srv, calls, read = server
  for token in ("nope", None, "s3cret\0"):
    with pytest.raises(RpcError, match="UNAUTHENTICATED: unauthorized"):
      _run(RpcClient(SERVICE, srv.address, token=token), _request())
  assert calls == [] and read == []


def test_bad_requests_handler_errors_and_unknown_methods_are_reported_not_fatal(server):
  srv, calls, _ = server
  client = RpcClient(SERVICE, srv.address, token="s3cret")
  with pytest.raises(RpcError, match=r"INVALID_ARGUMENT: method 'RunSubtasks': bad request: "
                                     r"step 13 is unlucky"):
    _run(client, _request(step=13))
  with pytest.raises(RpcError, match=r"INTERNAL: method 'RunSubtasks': failed: ValueError: "
                                     r"bad subtask"):
    _run(client, _request(step=7))
  with pytest.raises(RpcError, match="UNIMPLEMENTED"):
    client.call("Nope", _request(), pb.RunSubtasksReply)
  with pytest.raises(RpcError, match=r"INVALID_ARGUMENT: .*part 0: the header comes in the "
                                     "first part"):  # a unary request to a streamed method
    client.call("RunSubtasks", pb.RunSubtasksPart(tasks=[pb.SubTask()]), pb.RunSubtasksReply)
  assert _run(client, _request()).version == 3


def test_a_request_id_runs_once_and_never_for_other_parts(server):
  """A retry of a finished call gets its kept reply without a second run; the same id
  with other parts (another header, another task, a task fewer) is refused."""
  srv, calls, _ = server
  client = RpcClient(SERVICE, srv.address, token="s3cret")
  with pytest.raises(RpcError, match="INVALID_ARGUMENT: .*step 13 is unlucky"):
    _run(client, _request(step=13), request_id="b")
  first = _run(client, _request(), request_id="a")
  assert _run(client, _request(), request_id="a") == first
  assert len(calls) == 2  # step 13's call and the first "a"
  for other in (_request(step=1), _request(subtask="other"),
                pb.RunSubtasksRequest(tasks=_request().tasks[:2])):
    with pytest.raises(RpcError, match="INVALID_ARGUMENT: .*request id 'a' was used for "
                                       "another request"):
      _run(client, other, request_id="a")
  assert len(calls) == 2
  assert _run(client, _request(step=2), request_id="c").version == 3


def test_token_ids_travel_packed_and_exact():
  """A trajectory's arrays as packed repeated fields: 1,000 ids cost about 2 bytes each,
  float32 logprobs 4, and they come back bitwise."""
  rng = np.random.default_rng(0)
  ids = rng.integers(0, 50_000, 1000).astype(np.int32)
  logprobs = rng.normal(size=1000).astype(np.float32)
  message = pb.Trajectory(ids=ids.tolist(), logprobs=logprobs.tolist())
  assert len(message.SerializeToString()) < 1000 * 3 + 1000 * 4 + 16
  back = pb.Trajectory.FromString(message.SerializeToString())
  np.testing.assert_array_equal(np.array(back.ids, np.int32), ids)
  assert np.array(back.logprobs, np.float32).tobytes() == logprobs.tobytes()


def test_unreachable_service_fails_after_deadline_naming_the_address():
  port = _free_port()
  client = RpcClient(SERVICE, ("127.0.0.1", port), settings=ClientSettings(deadline=0.5))
  with pytest.raises(ServiceUnavailableError,
                     match=rf"'Status' to 127\.0\.0\.1:{port} failed after"):
    client.call("Status", pb.StatusRequest(), pb.StatusReply)


def test_client_waits_for_a_server_that_starts_late():
  port = _free_port()
  started = {}

  def start_later():
    time.sleep(0.5)
    started["srv"] = RpcServer(SERVICE, status(5), port=port).start()

  thread = threading.Thread(target=start_later)
  thread.start()
  try:
    client = RpcClient(SERVICE, ("127.0.0.1", port), settings=ClientSettings(deadline=20))
    assert client.call("Status", pb.StatusRequest(), pb.StatusReply).version == 5
  finally:
    thread.join()
    started["srv"].stop()


def test_server_restart_between_calls_is_retried():
  port = _free_port()
  srv = RpcServer(SERVICE, status(1), port=port).start()
  client = RpcClient(SERVICE, ("127.0.0.1", port), settings=ClientSettings(deadline=20))
  assert client.call("Status", pb.StatusRequest(), pb.StatusReply).version == 1
  srv.stop()
  srv = RpcServer(SERVICE, status(2), port=port).start()
  try:
    assert client.call("Status", pb.StatusRequest(), pb.StatusReply).version == 2
  finally:
    srv.stop()


def test_a_port_in_use_is_an_error_naming_it():
  srv = RpcServer(SERVICE, status(1)).start()
  try:
    with pytest.raises(OSError, match=rf"127\.0\.0\.1:{srv.address[1]}: cannot listen"):
      RpcServer(SERVICE, status(2), port=srv.address[1])
  finally:
    srv.stop()
