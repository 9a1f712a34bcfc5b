"""The service's schema and messages: the committed generated module matches the .proto;
records cross the wire bitwise (so their digests agree on both sides); a request is
checked against the schema before it is parsed (hypothesis over messages and bytes); a
`RunSubtasks` request travels as parts within their size and is assembled back
unchanged, and a stream of parts out of order, cut short or over its announced count is
a bad request."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError
from grpc_tools import protoc
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.agents.records import SubRecord, ToolCall, Trajectory
from mgrpo_jax.agents.sub_client import SubAgentResult, SubTaskRequest
from mgrpo_jax.serving import messages, request_parts
from mgrpo_jax.serving.messages import BadRequest
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.wire_check import WireError, check_wire

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO = "mgrpo_jax/serving/proto/sub_agent.proto"


def _without_json_names(messages_: list[descriptor_pb2.DescriptorProto]) -> None:
  """Clears what protoc derives for JSON (generated modules leave it out)."""
  for message in messages_:
    for field in message.field:
      field.ClearField("json_name")
    _without_json_names(list(message.nested_type))


def test_the_generated_module_matches_the_proto_file(tmp_path):
  """Regenerate with the command in the .proto's header when this fails."""
  out = tmp_path / "schema.pb"
  assert protoc.main(["protoc", f"-I{ROOT}", f"--descriptor_set_out={out}",
                      str(ROOT / PROTO)]) == 0
  (compiled,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
  _without_json_names(list(compiled.message_type))
  committed = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
  assert committed == compiled
  assert len(committed.message_type) == 11 and committed.service[0].name == "SubAgent"
  (run_subtasks, _) = committed.service[0].method
  assert run_subtasks.client_streaming and run_subtasks.input_type.endswith("RunSubtasksPart")


_TEXT = st.text(max_size=12)
_FLOAT32 = st.floats(width=32, allow_nan=False)


@st.composite
def sub_records(draw) -> SubRecord:
  length = draw(st.integers(0, 40))
  arrays = st.lists(st.integers(-2**31, 2**31 - 1), min_size=length, max_size=length)
  trajectory = Trajectory(
      ids=np.array(draw(arrays), np.int32),
      loss_mask=np.array(draw(st.lists(st.booleans(), min_size=length, max_size=length)),
                         bool),
      logprobs=np.array(draw(st.lists(_FLOAT32, min_size=length, max_size=length)),
                        np.float32),
      roles=np.array(draw(arrays), np.int32),
      messages=tuple(draw(st.lists(st.tuples(_TEXT, _TEXT), max_size=3))),
      policy_version=draw(st.integers(0, 2**40)), format_ok=draw(st.booleans()),
      error=draw(_TEXT), end=draw(_TEXT), num_turns=draw(st.integers(0, 50)),
      tool_calls=tuple(draw(st.lists(st.builds(
          ToolCall, st.integers(0, 50), _TEXT, _TEXT, st.booleans(),
          st.floats(0, 1e6, allow_nan=False)), max_size=3))),
      final=draw(st.none() | _TEXT), wall_s=draw(st.floats(0, 1e6, allow_nan=False)))
  return SubRecord(draw(_TEXT), draw(st.integers(0, 100)), draw(st.integers(0, 100)),
                   draw(_TEXT), draw(_TEXT), draw(_TEXT), trajectory,
                   expert=draw(st.just(math.nan) | st.floats(0, 1)),
                   main_correct=draw(st.just(math.nan) | st.floats(0, 1)))


@given(sub_records())
def test_a_record_crosses_the_wire_bitwise_and_keeps_its_digest(record):
  wire = messages.result_to_proto(SubAgentResult(record.report, record)).SerializeToString()
  back = messages.result_from_proto(pb.SubRecord.FromString(wire))
  assert back.report == record.report
  assert back.record.digest() == record.digest()
  assert SubRecord.from_dict(record.to_dict()).digest() == record.digest()  # the S cache's
  for name in ("ids", "loss_mask", "logprobs", "roles"):
    sent, received = getattr(record.trajectory, name), getattr(back.record.trajectory, name)
    assert received.dtype == sent.dtype and received.tobytes() == sent.tobytes()
  assert back.record.trajectory.final == record.trajectory.final  # None stays None
  assert back.record.trajectory.tool_calls == record.trajectory.tool_calls


def test_a_digest_changes_with_any_content_but_clock_readings():
  trajectory = Trajectory(np.array([1, 2], np.int32), np.array([False, True]),
                          np.array([0.0, -0.5], np.float32), np.array([0, 2], np.int32),
                          (("user", "x"),), 0, True, "", "result", 1, (), "r", 0.25)
  record = SubRecord("q", 0, 1, "task", "", "r", trajectory)
  changed = [record.__class__(**{**record.__dict__, "report": "R"}),
             SubRecord("q", 0, 1, "task", "", "r", Trajectory(
                 **{**trajectory.__dict__, "ids": np.array([1, 3], np.int32)})),
             SubRecord("q", 0, 1, "task", "", "r", Trajectory(
                 **{**trajectory.__dict__, "logprobs": np.array([0.0, -0.25], np.float32)}))]
  assert len({record.digest(), *(c.digest() for c in changed)}) == 4
  rerun = SubRecord("q", 0, 1, "task", "", "r", Trajectory(  # the same, sampled again
      **{**trajectory.__dict__, "wall_s": 7.5,
         "tool_calls": (ToolCall(0, "search", "{}", True, 0.5),)}))
  assert rerun.digest() == SubRecord("q", 0, 1, "task", "", "r", Trajectory(
      **{**trajectory.__dict__, "tool_calls": (ToolCall(0, "search", "{}", True, 9.0),)})
      ).digest()


TASKS_FIELD = pb.RunSubtasksRequest.DESCRIPTOR.fields_by_name["tasks"].full_name
_LIMITS = {TASKS_FIELD: 4}
_TASKS = st.lists(st.builds(pb.SubTask, query_id=_TEXT,
                            rollout_index=st.integers(-2**31, 2**31 - 1),
                            call_index=st.integers(-2**31, 2**31 - 1),
                            subtask=_TEXT, context=_TEXT), max_size=4)


@given(st.builds(pb.RunSubtasksRequest, step=st.integers(-2**63, 2**63 - 1),
                 seed=st.integers(-2**63, 2**63 - 1), version=st.integers(-2**63, 2**63 - 1),
                 batch=st.integers(-2**63, 2**63 - 1), tasks=_TASKS))
def test_every_well_formed_request_passes_the_check_unchanged(request):
  parsed = messages.parse_request(request.SerializeToString(), pb.RunSubtasksRequest, _LIMITS)
  assert parsed == request
  tasks = [messages.task_from_proto(t) for t in parsed.tasks]
  assert [messages.task_to_proto(t) for t in tasks] == list(request.tasks)
  assert all(isinstance(t, SubTaskRequest) for t in tasks)


@given(st.binary(max_size=200))
def test_any_bytes_are_a_checked_request_or_a_bad_request(data):
  try:
    parsed = messages.parse_request(data, pb.RunSubtasksRequest, _LIMITS)
  except BadRequest as e:
    assert str(e).startswith("malformed RunSubtasksRequest: ")
    return
  assert len(parsed.tasks) <= 4
  assert parsed.SerializeToString() == pb.RunSubtasksRequest.FromString(data).SerializeToString()


@pytest.mark.parametrize("data,problem", [
    (b"\x2a\x00" * 5, "more than 4 entries"),
    (b"\x10\x01\x10\x01", "seed: a singular field sent 2 times"),
    (b"\x15\x00\x00\x00\x00", "seed: wire type 5, expected 0"),
    (b"\x2a\x02\x10\x01\x2a\x03\x12\x01x", "rollout_index: wire type 2"),
    (b"\x2a\x02\x38\x01", "mgrpo_jax.serving.SubTask: no field number 7"),
    (b"\x0b\x0c", "wire type 3"),
    (b"\x2a\x05\x22\x01", "truncated"),
    (b"\x80", "truncated or overlong varint"),
])
def test_the_check_names_the_field(data, problem):
  with pytest.raises(WireError, match=problem):
    check_wire(data, pb.RunSubtasksRequest.DESCRIPTOR, _LIMITS)


def test_strings_are_checked_against_their_length_limit():
  lengths = {messages.TASK_FIELDS["subtask"]: 3}
  ok = pb.RunSubtasksRequest(tasks=[pb.SubTask(subtask="abc", context="longer")])
  check_wire(ok.SerializeToString(), pb.RunSubtasksRequest.DESCRIPTOR, _LIMITS, lengths)
  with pytest.raises(WireError, match="SubTask.subtask: 4 bytes, more than 3"):
    check_wire(pb.RunSubtasksRequest(tasks=[pb.SubTask(subtask="abcd")]).SerializeToString(),
               pb.RunSubtasksRequest.DESCRIPTOR, _LIMITS, lengths)


def test_a_repeated_field_needs_a_limit_and_parse_errors_are_bad_requests():
  with pytest.raises(KeyError, match="tasks"):
    check_wire(b"\x2a\x00", pb.RunSubtasksRequest.DESCRIPTOR, {})
  with pytest.raises(BadRequest, match="malformed RunSubtasksRequest"):
    messages.parse_request(b"\x2a\x02\x22\x01\xff", pb.RunSubtasksRequest, _LIMITS)
  with pytest.raises(DecodeError):  # what parse_request turns into a BadRequest
    pb.RunSubtasksRequest.FromString(b"\x2a\x03\x22\x01\xff")


_REQUESTS = st.builds(pb.RunSubtasksRequest, step=st.integers(-2**63, 2**63 - 1),
                      seed=st.integers(-2**63, 2**63 - 1),
                      version=st.integers(-2**63, 2**63 - 1),
                      batch=st.integers(-2**63, 2**63 - 1), tasks=_TASKS)


def _wire(request: pb.RunSubtasksRequest, max_part_bytes: int = 64 << 10) -> list[bytes]:
  return [part.SerializeToString() for part in request_parts.parts(request, max_part_bytes)]


@given(_REQUESTS, st.integers(1, 120))
def test_every_request_round_trips_through_its_parts(request, max_part_bytes):
  """Each part within the limit unless it holds one task or the header alone; the header
  announces the tasks; assembled, the parts are the request."""
  data = _wire(request, max_part_bytes)
  parts = [pb.RunSubtasksPart.FromString(d) for d in data]
  assert parts[0].header.num_tasks == len(request.tasks)
  assert [t for p in parts for t in p.tasks] == list(request.tasks)
  for part, size in zip(parts, map(len, data), strict=True):
    assert size <= max_part_bytes or len(part.tasks) + part.HasField("header") == 1
  assert request_parts.assemble(iter(data), 4) == request
  assert request_parts.assemble(data, len(request.tasks)) == request  # exactly at the limit
  assert len(_wire(request)) == 1  # a small batch is one part


@given(st.lists(st.binary(max_size=24), max_size=6))
def test_any_parts_are_a_checked_request_or_a_bad_request(data):
  try:
    request = request_parts.assemble(data, 4)
  except BadRequest:
    return
  parts = [pb.RunSubtasksPart.FromString(d) for d in data]
  assert len(request.tasks) == parts[0].header.num_tasks <= 4
  assert list(request.tasks) == [t for p in parts for t in p.tasks]


def _header(num_tasks: int, *tasks: pb.SubTask) -> bytes:
  return pb.RunSubtasksPart(header=pb.RunSubtasksHeader(step=1, num_tasks=num_tasks),
                            tasks=tasks).SerializeToString()


_X = pb.SubTask(query_id="q", subtask="x")
_TASK = pb.RunSubtasksPart(tasks=[_X]).SerializeToString()


@pytest.mark.parametrize("data,problem", [
    ([], "no parts: a request starts with its header"),
    ([_TASK, _header(1)], "part 0: the header comes in the first part, and only there"),
    ([b""], "part 0: the header comes in the first part"),
    ([_header(1), _header(1), _TASK], "part 1: the header comes in the first part"),
    ([_header(1), _header(0, _X)], "part 1: the header comes in the first part"),
    ([_header(1), b"", _TASK], "part 1 is empty"),
    ([_header(5)], "the header announces 5 tasks: a request holds 0 to 4"),
    ([_header(-1)], "the header announces -1 tasks"),
    ([_header(4, *[_X] * 5)], "more than 4 entries"),
    ([_header(2), _TASK], "ended after 1 of the 2 tasks its header announced"),
    ([_header(1, _X)] + [b""], "part 1 is empty"),
    ([_header(1), _TASK, _TASK], "part 2: more tasks than the 1 the header announced"),
    ([_header(2, _X, _X), _TASK], "part 1: more tasks than the 2"),
    ([_header(1), b"\x12\x02\x22\x01"], "malformed RunSubtasksPart: .*truncated"),
    ([_header(1), b"\x12\x04\x10\x01\x10\x02"], "a singular field sent 2 times"),
    ([_header(1), b"\x12\x03\x22\x01\xff"], "malformed RunSubtasksPart"),  # not UTF-8
    ([_header(1, pb.SubTask(subtask="abcd"))], "SubTask.subtask: 4 bytes, more than 3"),
])
def test_a_stream_of_parts_out_of_order_or_miscounted_is_a_bad_request(data, problem):
  with pytest.raises(BadRequest, match=problem):
    request_parts.assemble(data, 4, {messages.TASK_FIELDS["subtask"]: 3})


def test_assembly_stops_reading_at_the_first_bad_part():
  consumed = []

  def endless():
    yield _header(4)
    while True:
      consumed.append(1)
      yield _TASK

  with pytest.raises(BadRequest, match="part 5: more tasks than the 4"):
    request_parts.assemble(endless(), 4)
  assert len(consumed) == 5
