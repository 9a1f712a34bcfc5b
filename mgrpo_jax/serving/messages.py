"""The service's protobuf messages (`proto/sub_agent.proto`) to and from the agents' records.

A trajectory's arrays [T] travel as packed repeated fields (ids and roles int32, the
loss mask bool, logprobs float32: exact), so a record read back is bitwise the one
sent, and its `SubRecord.digest()` is the same on both sides. `parse_request` reads a
request the way the server must: checked against the schema before it is parsed
(`wire_check`), so a hostile request cannot make the parser build more than the limits
allow, then parsed (bad UTF-8 in a string is refused too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import numpy as np
from google.protobuf.message import DecodeError, Message

from mgrpo_jax.agents.records import SubRecord, ToolCall, Trajectory
from mgrpo_jax.agents.sub_client import SubAgentResult, SubTaskRequest
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.wire_check import WireError, check_wire

# The fully qualified name of the service (gRPC paths are /<service>/<method>).
SERVICE = pb.DESCRIPTOR.services_by_name["SubAgent"].full_name
TASK_FIELDS = {name: field.full_name
               for name, field in pb.SubTask.DESCRIPTOR.fields_by_name.items()}
M = TypeVar("M", bound=Message)


class BadRequest(ValueError):
  """A request the service refuses (malformed, out of range, not handed out): the caller
  gets INVALID_ARGUMENT with the reason, and nothing is run or stored."""


def parse_request(data: bytes, message_type: type[M], counts: Mapping[str, int],
                  lengths: Mapping[str, int] | None = None) -> M:
  """`data` as a `message_type`, checked first (`wire_check.check_wire` with `counts` and
  `lengths`); `BadRequest` naming the problem otherwise."""
  try:
    check_wire(data, message_type.DESCRIPTOR, counts, lengths)
    return message_type.FromString(data)
  except (WireError, DecodeError) as e:
    raise BadRequest(f"malformed {message_type.DESCRIPTOR.name}: {e}") from None


def task_to_proto(request: SubTaskRequest) -> pb.SubTask:
  return pb.SubTask(query_id=request.query_id, rollout_index=request.rollout_index,
                    call_index=request.call_index, subtask=request.subtask,
                    context=request.context)


def task_from_proto(message: pb.SubTask) -> SubTaskRequest:
  return SubTaskRequest(message.query_id, message.rollout_index, message.call_index,
                        message.subtask, message.context)


def _trajectory_to_proto(trajectory: Trajectory) -> pb.Trajectory:
  message = pb.Trajectory(
      ids=trajectory.ids.tolist(), loss_mask=trajectory.loss_mask.tolist(),
      logprobs=trajectory.logprobs.tolist(), roles=trajectory.roles.tolist(),
      messages=[pb.Message(role=role, text=text) for role, text in trajectory.messages],
      policy_version=trajectory.policy_version, format_ok=trajectory.format_ok,
      error=trajectory.error, end=trajectory.end, num_turns=trajectory.num_turns,
      tool_calls=[pb.ToolCall(turn=c.turn, name=c.name, arguments=c.arguments, ok=c.ok,
                              latency_s=c.latency_s) for c in trajectory.tool_calls],
      wall_s=trajectory.wall_s)
  if trajectory.final is not None:
    message.final = trajectory.final
  return message


def _trajectory_from_proto(message: pb.Trajectory) -> Trajectory:
  return Trajectory(
      ids=np.array(message.ids, np.int32), loss_mask=np.array(message.loss_mask, bool),
      logprobs=np.array(message.logprobs, np.float32), roles=np.array(message.roles, np.int32),
      messages=tuple((m.role, m.text) for m in message.messages),
      policy_version=message.policy_version, format_ok=message.format_ok,
      error=message.error, end=message.end, num_turns=message.num_turns,
      tool_calls=tuple(ToolCall(c.turn, c.name, c.arguments, c.ok, c.latency_s)
                       for c in message.tool_calls),
      final=message.final if message.HasField("final") else None, wall_s=message.wall_s)


def record_to_proto(record: SubRecord) -> pb.SubRecord:
  task = SubTaskRequest(record.query_id, record.rollout_index, record.call_index,
                        record.subtask, record.context)
  return pb.SubRecord(task=task_to_proto(task), report=record.report,
                      trajectory=_trajectory_to_proto(record.trajectory),
                      expert=record.expert, main_correct=record.main_correct)


def record_from_proto(message: pb.SubRecord) -> SubRecord:
  task = task_from_proto(message.task)
  return SubRecord(task.query_id, task.rollout_index, task.call_index, task.subtask,
                   task.context, message.report, _trajectory_from_proto(message.trajectory),
                   expert=message.expert, main_correct=message.main_correct)


def result_to_proto(result: SubAgentResult) -> pb.SubRecord:
  """A result as its record (what M reads is the record's report)."""
  if result.report != result.record.report:
    raise ValueError(f"call {result.record.key}: the report differs from its record's")
  return record_to_proto(result.record)


def result_from_proto(message: pb.SubRecord) -> SubAgentResult:
  record = record_from_proto(message)
  return SubAgentResult(record.report, record)
