"""The gRPC layer between the slices: typed round trips, the token, errors, retries."""

import socket
import threading
import time

import numpy as np
import pytest

from mgrpo_jax.serving import messages
from mgrpo_jax.serving.messages import TASKS_FIELD, BadRequest
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


def _parse(data: bytes) -> pb.RunSubtasksRequest:
  return messages.parse_request(data, pb.RunSubtasksRequest, {TASKS_FIELD: 64})


def status(version: int) -> dict[str, Method]:
  """A `Status` method answering `version`."""
  return {"Status": Method(lambda data: messages.parse_request(data, pb.StatusRequest, {}),
                           lambda request: pb.StatusReply(version=version))}


@pytest.fixture
def server():
  calls = []

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

  srv = RpcServer(SERVICE, {"RunSubtasks": Method(_parse, echo)}, token="s3cret").start()
  yield srv, calls
  srv.stop()


def _request(step: int = 0, subtask: str = "héllo <tool_call>") -> pb.RunSubtasksRequest:
  return pb.RunSubtasksRequest(step=step, seed=2**31, version=3, batch=1, tasks=[
      pb.SubTask(query_id="q-1", rollout_index=2, call_index=i, subtask=subtask,
                 context="ctx") for i in range(3)])


def test_typed_round_trip_reuses_the_connection(server):
  srv, calls = server
  client = RpcClient(SERVICE, srv.address, token="s3cret")
  reply = client.call("RunSubtasks", _request(), pb.RunSubtasksReply)
  assert reply.version == 1 and [r.report for r in reply.results] == ["héllo <tool_call>"] * 3
  assert [list(r.trajectory.ids) for r in reply.results] == [[0] * 3, [1] * 3, [2] * 3]
  assert calls == [_request()]
  assert client.call("RunSubtasks", _request(), pb.RunSubtasksReply).version == 2
  client.close()


def test_wrong_or_missing_token_is_refused(server):
  srv, calls = server
  for token in ("nope", None, "s3cret\0"):
    with pytest.raises(RpcError, match="UNAUTHENTICATED: unauthorized"):
      RpcClient(SERVICE, srv.address, token=token).call("RunSubtasks", _request(),
                                                          pb.RunSubtasksReply)
  assert calls == []


def test_bad_requests_handler_errors_and_unknown_methods_are_reported_not_fatal(server):
  srv, calls = server
  client = RpcClient(SERVICE, srv.address, token="s3cret")
  with pytest.raises(RpcError, match=r"INVALID_ARGUMENT: method 'RunSubtasks': bad request: "
                                     r"step 13 is unlucky"):
    client.call("RunSubtasks", _request(step=13), pb.RunSubtasksReply)
  with pytest.raises(RpcError, match=r"INTERNAL: method 'RunSubtasks': failed: ValueError: "
                                     r"bad subtask"):
    client.call("RunSubtasks", _request(step=7), pb.RunSubtasksReply)
  with pytest.raises(RpcError, match="UNIMPLEMENTED"):
    client.call("Nope", _request(), pb.RunSubtasksReply)
  assert client.call("RunSubtasks", _request(), pb.RunSubtasksReply).version == 3


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
