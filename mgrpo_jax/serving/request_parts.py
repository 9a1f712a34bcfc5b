"""A `RunSubtasks` request as the stream of small parts it travels in, and back.

gRPC's unary receive path holds a message up to three times at once; a request sent as
parts of at most `serving.max_part_kib` each is held once, by the service, as it is
assembled. `parts(request, max_part_bytes)` is what the main slice sends: the header
(the batch's fields and its number of tasks) in the first part, and the tasks in order,
as many to a part as fit (a demo batch is one part). `assemble(parts, ...)` is how the
service reads them: each part's bytes checked against the schema before they are parsed
(`messages.parse_request`), the header in the first part and only there, no part empty,
at most `max_tasks` tasks, exactly as many as the header announced (gRPC may end the
stream of a call it refused mid-way, a part over its size limit, as if the caller had
finished it). Anything else is a `BadRequest` naming the part.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from mgrpo_jax.serving.messages import BadRequest, parse_request
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb

TASKS_FIELD = pb.RunSubtasksPart.DESCRIPTOR.fields_by_name["tasks"].full_name


def _entry_bytes(task: pb.SubTask) -> int:
  """The bytes `task` adds to a part: its tag, its length (a varint) and itself."""
  size = task.ByteSize()
  return 1 + max(1, (size.bit_length() + 6) // 7) + size


def parts(request: pb.RunSubtasksRequest, max_part_bytes: int
          ) -> Iterator[pb.RunSubtasksPart]:
  """`request` as the parts it is sent in: each as many of the next tasks as keep it
  within `max_part_bytes` (a task larger than that goes alone, and is refused)."""
  part = pb.RunSubtasksPart(header=pb.RunSubtasksHeader(
      step=request.step, seed=request.seed, version=request.version, batch=request.batch,
      num_tasks=len(request.tasks)))
  size = part.ByteSize()
  for task in request.tasks:
    entry = _entry_bytes(task)
    if size + entry > max_part_bytes and size:
      yield part
      part, size = pb.RunSubtasksPart(), 0
    part.tasks.append(task)
    size += entry
  yield part


def _request(header: pb.RunSubtasksHeader, max_tasks: int) -> pb.RunSubtasksRequest:
  """The request `header` opens, its tasks still to come."""
  if not 0 <= header.num_tasks <= max_tasks:
    raise BadRequest(f"the header announces {header.num_tasks} tasks: a request holds 0 "
                     f"to {max_tasks}")
  return pb.RunSubtasksRequest(step=header.step, seed=header.seed, version=header.version,
                               batch=header.batch)


def assemble(data: Iterable[bytes], max_tasks: int,
             lengths: Mapping[str, int] | None = None) -> pb.RunSubtasksRequest:
  """The request whose parts' bytes `data` yields (read to its end); string fields of at
  most `lengths[field]` bytes (`wire_check.check_wire`); `BadRequest` otherwise (module
  docstring)."""
  request, announced = None, 0
  for index, part_bytes in enumerate(data):
    part = parse_request(part_bytes, pb.RunSubtasksPart, {TASKS_FIELD: max_tasks}, lengths)
    if part.HasField("header") != (index == 0):
      raise BadRequest(f"part {index}: the header comes in the first part, and only there")
    if index == 0:
      request, announced = _request(part.header, max_tasks), part.header.num_tasks
    elif not part.tasks:
      raise BadRequest(f"part {index} is empty")
    if len(request.tasks) + len(part.tasks) > announced:
      raise BadRequest(f"part {index}: more tasks than the {announced} the header announced")
    request.tasks.extend(part.tasks)
  if request is None:
    raise BadRequest("no parts: a request starts with its header")
  if len(request.tasks) != announced:
    raise BadRequest(f"the request ended after {len(request.tasks)} of the {announced} tasks "
                     "its header announced")
  return request
