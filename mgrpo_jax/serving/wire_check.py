"""A serialized request checked against its schema before protobuf parses it.

Protobuf's parser accepts what a hostile caller can abuse: a repeated field of millions
of empty messages (each becomes an object: 4 MiB of empty entries cost about 100 times
that once parsed), a known field sent with another wire type (kept as an unknown field,
the typed field left at its default: a string `rollout_index` would read as rollout 0),
fields the schema does not have, a singular field sent twice (the last one wins).
`check_wire(data, descriptor, counts, lengths)` walks the wire format once, building
nothing, and refuses each of these with a `WireError` naming the field; what passes
parses into at most `counts[field]` entries per repeated field and strings of at most
`lengths[field]` bytes, each field of its declared type.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.descriptor import Descriptor, FieldDescriptor

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_WIRE_OF_TYPE = {
    **dict.fromkeys((FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FIXED64,
                     FieldDescriptor.TYPE_SFIXED64), _FIXED64),
    **dict.fromkeys((FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_FIXED32,
                     FieldDescriptor.TYPE_SFIXED32), _FIXED32),
    **dict.fromkeys((FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES,
                     FieldDescriptor.TYPE_MESSAGE), _LENGTH),
    **dict.fromkeys((FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64,
                     FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_UINT32,
                     FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
                     FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM), _VARINT),
}
_MAX_DEPTH = 32


class WireError(ValueError):
  """Serialized bytes that do not follow the schema (the message names the field)."""


def _varint(data: memoryview, pos: int, what: str) -> tuple[int, int]:
  """(value, next position) of the varint at `pos`."""
  value = shift = 0
  for index in range(pos, min(pos + 10, len(data))):
    byte = data[index]
    value |= (byte & 0x7F) << shift
    if byte < 0x80:
      return value, index + 1
    shift += 7
  raise WireError(f"{what}: truncated or overlong varint at byte {pos}")


def check_wire(data: bytes | memoryview, descriptor: Descriptor, counts: Mapping[str, int],
               lengths: Mapping[str, int] | None = None, *, _depth: int = 0) -> None:
  """Raises `WireError` unless `data` is a message of `descriptor` whose every field is
  known, has its declared wire type, appears once (singular) or at most
  `counts[field.full_name]` times (repeated: every repeated field needs a count), is at
  most `lengths[field.full_name]` bytes long (string and bytes fields named there), and
  whose message fields check recursively."""
  lengths = lengths or {}
  if _depth > _MAX_DEPTH:
    raise WireError(f"{descriptor.full_name}: nested more than {_MAX_DEPTH} deep")
  data = memoryview(data)  # submessages are checked in place, not copied
  seen: dict[int, int] = {}
  pos, end = 0, len(data)
  while pos < end:
    key, pos = _varint(data, pos, descriptor.full_name)
    number, wire = key >> 3, key & 7
    field = descriptor.fields_by_number.get(number)
    if field is None:
      raise WireError(f"{descriptor.full_name}: no field number {number}")
    expected = _WIRE_OF_TYPE.get(field.type)
    packed = field.is_repeated and expected != _LENGTH and wire == _LENGTH
    if wire != expected and not packed:
      raise WireError(f"{field.full_name}: wire type {wire}, expected {expected} (a "
                      f"{field.type} field)")
    seen[number] = seen.get(number, 0) + 1
    if not field.is_repeated and seen[number] > 1:
      raise WireError(f"{field.full_name}: a singular field sent {seen[number]} times")
    if field.is_repeated and seen[number] > counts[field.full_name]:
      raise WireError(f"{field.full_name}: more than {counts[field.full_name]} entries")
    if wire == _VARINT:
      _, pos = _varint(data, pos, field.full_name)
    elif wire == _FIXED64:
      pos += 8
    elif wire == _FIXED32:
      pos += 4
    else:
      length, pos = _varint(data, pos, field.full_name)
      if length > lengths.get(field.full_name, length):
        raise WireError(f"{field.full_name}: {length} bytes, more than "
                        f"{lengths[field.full_name]}")
      if field.type == FieldDescriptor.TYPE_MESSAGE and pos + length <= end:
        check_wire(data[pos:pos + length], field.message_type, counts, lengths,
                   _depth=_depth + 1)
      pos += length
    if pos > end:
      raise WireError(f"{field.full_name}: truncated ({pos - end} bytes missing)")
