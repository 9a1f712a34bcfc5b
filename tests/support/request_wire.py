"""`RunSubtasksPart` bytes written by hand, well-formed or not, for attacks on the
sub-agent service (tests/integration/test_serving_wire.py, tools/serving_attacks.py)."""

from __future__ import annotations

from mgrpo_jax.serving.proto import sub_agent_pb2 as pb


def header_part(num_tasks: int, body: bytes | None = None) -> bytes:
  """A header part announcing `num_tasks` (or holding the header bytes `body`)."""
  if body is None:
    return pb.RunSubtasksPart(header=pb.RunSubtasksHeader(num_tasks=num_tasks)
                              ).SerializeToString()
  return b"\x0a" + bytes([len(body)]) + body


def task_part(entry: bytes = b"") -> bytes:
  """A part of one task, holding the `SubTask` bytes `entry` (under 128 bytes)."""
  return b"\x12" + bytes([len(entry)]) + entry
