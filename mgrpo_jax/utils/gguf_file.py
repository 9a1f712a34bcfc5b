"""A GGUF file's metadata and tensor table, read in one pass over its header.

GGUF (llama.cpp's checkpoint format, versions 2 and 3, little-endian):

  magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
  kv_count x   (key: string, value_type u32, value)
  tensor_count x (name: string, n_dims u32, dims u64[n_dims], ggml_type u32, offset u64)
  padding to `general.alignment` (default 32), then the tensors' data at their offsets

where a string is a u64 byte length and UTF-8 bytes, and an array value is
(item_type u32, count u64, items). `gguf.GGUFReader` parses the same header into a
numpy view per string: SmolLM2's 49,152 tokens and 48,900 merges make about 250,000
views and 3-6 s per load. This reader decodes the header with `struct` from one
memory map and views the tensors' data without copying, as GGUFReader does (typed
arrays for float and integer tensors, bytes shaped by `gguf.quant_shape_to_byte_shape`
for quantized ones, the layout `gguf.quants.dequantize` reads).

Errors are `GGUFFormatError` naming the file, the byte offset and the key, tensor or
array item being read.
"""

from __future__ import annotations

import dataclasses
import math
import mmap
import os
import pathlib
import struct
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quant_shape_to_byte_shape

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
_STRING, _ARRAY = 8, 9
# value type -> struct format (little-endian), GGUF spec's numbering.
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                   10: "<Q", 11: "<q", 12: "<d"}
# Tensor types stored as plain numbers: their numpy element type.
_PLAIN_DTYPES = {
    GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F64: np.float64, GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16, GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


class GGUFFormatError(ValueError):
  """A file that is not a well-formed GGUF file: `str()` is "<file>: <detail>", the
  detail naming where (byte offset, key, tensor)."""

  def __init__(self, source: str, detail: str):
    super().__init__(f"{source}: {detail}")
    self.source, self.detail = source, detail


@dataclasses.dataclass(frozen=True)
class GGUFTensor:
  """One tensor of the table.

  Attributes:
    name: the GGUF name, e.g. "blk.0.attn_q.weight".
    shape: GGUF's dims, innermost first (ne0, ne1, ...): numpy's shape reversed.
    tensor_type: its ggml type (F32, Q4_1, ...).
    offset: the file's byte where its data starts.
    n_bytes: the bytes its data takes in the file.
    data: a read-only view of the data (module docstring).
  """

  name: str
  shape: tuple[int, ...]
  tensor_type: GGMLQuantizationType
  offset: int
  n_bytes: int
  data: np.ndarray


@dataclasses.dataclass(frozen=True)
class GGUFFile:
  """A parsed GGUF file: `metadata` maps each key to a Python value (str, int, float,
  bool, or a list of them), `tensors` in the file's order."""

  path: pathlib.Path
  version: int
  metadata: dict[str, Any]
  tensors: list[GGUFTensor]


class _Cursor:
  """Reads little-endian values from `buf`, naming `what` is read when the file ends."""

  def __init__(self, buf, source: str):
    self.buf, self.source, self.offset = buf, source, 0

  def fail(self, message: str, offset: int | None = None) -> GGUFFormatError:
    at = self.offset if offset is None else offset
    return GGUFFormatError(self.source, f"byte {at}: {message}")

  def take(self, size: int, what: str) -> int:
    """Advances over `size` bytes; returns where they start."""
    start = self.offset
    if size < 0 or start + size > len(self.buf):
      raise self.fail(f"the file ends inside {what} ({size} bytes needed, "
                      f"{len(self.buf) - start} left): truncated or corrupt")
    self.offset = start + size
    return start

  def scalar(self, fmt: str, what: str):
    return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

  def string(self, what: str) -> str:
    size = self.scalar("<Q", what)
    start = self.take(size, what)
    try:
      return bytes(self.buf[start:start + size]).decode("utf-8")
    except UnicodeDecodeError as e:
      raise self.fail(f"{what} is not UTF-8 ({e.reason})", start) from e

  def value(self, value_type: int, what: str) -> Any:
    if value_type == _STRING:
      return self.string(what)
    if value_type == _ARRAY:
      return self.array(what)
    fmt = _SCALAR_FORMATS.get(value_type)
    if fmt is None:
      raise self.fail(f"{what} has unknown value type {value_type}", self.offset - 4)
    return self.scalar(fmt, what)

  def array(self, what: str) -> list[Any]:
    at = self.offset
    item_type = self.scalar("<I", f"{what}'s item type")
    count = self.scalar("<Q", f"{what}'s length")
    fmt = _SCALAR_FORMATS.get(item_type)
    if fmt is not None:  # numbers: one bounds check, one numpy read
      dtype = np.dtype(fmt)
      start = self.take(count * dtype.itemsize, f"{what} ({count} items)")
      return np.frombuffer(self.buf, dtype, count, start).tolist()
    if item_type == _STRING:
      return [self.string(f"{what}[{i}]") for i in range(count)]
    if item_type == _ARRAY:
      return [self.array(f"{what}[{i}]") for i in range(count)]
    raise self.fail(f"{what} has unknown item type {item_type}", at)


def read_gguf(path: str | os.PathLike) -> GGUFFile:
  """Parses `path`'s header and views its tensors (the file stays mapped while any
  tensor view lives).

  Raises:
    FileNotFoundError: no such file.
    GGUFFormatError: not a GGUF file, an unsupported version or byte order, or a header
      or tensor that runs past the end of the file (the message names where).
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"GGUF file not found: {path}")
  with open(path, "rb") as f:
    if os.fstat(f.fileno()).st_size == 0:
      raise GGUFFormatError(str(path), "the file is empty")
    buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
  cursor = _Cursor(buf, str(path))
  cursor.take(len(MAGIC), "the magic")
  if bytes(buf[:len(MAGIC)]) != MAGIC:
    raise cursor.fail(f"not a GGUF file (starts with {bytes(buf[:4])!r}, not {MAGIC!r})", 0)
  version = cursor.scalar("<I", "the version")
  if version not in SUPPORTED_VERSIONS:
    kind = "a big-endian file" if version & 0xFFFF == 0 else f"version {version}"
    raise cursor.fail(f"{kind} is not supported (little-endian versions "
                      f"{SUPPORTED_VERSIONS})", 4)
  tensor_count = cursor.scalar("<Q", "the tensor count")
  kv_count = cursor.scalar("<Q", "the metadata count")
  metadata: dict[str, Any] = {}
  for i in range(kv_count):
    at = cursor.offset
    key = cursor.string(f"metadata key {i}")
    if key in metadata:
      raise cursor.fail(f"metadata key {key!r} appears twice", at)
    metadata[key] = cursor.value(cursor.scalar("<I", f"{key!r}'s type"), repr(key))
  table = [_tensor_entry(cursor, i) for i in range(tensor_count)]
  names = [entry[0] for entry in table]
  if len(set(names)) < len(names):
    twice = next(name for name in names if names.count(name) > 1)
    raise GGUFFormatError(str(path), f"tensor {twice!r} appears twice in the tensor table")
  alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
  if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
    raise GGUFFormatError(str(path), f"general.alignment {alignment!r} is not a power of two")
  data_start = -(-cursor.offset // alignment) * alignment
  tensors = [_view(buf, data_start, entry, str(path)) for entry in table]
  return GGUFFile(path=path, version=version, metadata=metadata, tensors=tensors)


def _tensor_entry(cursor: _Cursor, index: int) -> tuple[str, tuple[int, ...], int, int, int]:
  """(name, dims, ggml type, data offset, where the entry starts) of table entry
  `index`."""
  at = cursor.offset
  name = cursor.string(f"tensor {index}'s name")
  n_dims = cursor.scalar("<I", f"tensor {name!r}'s rank")
  dims = tuple(cursor.scalar("<Q", f"tensor {name!r}'s dims") for _ in range(n_dims))
  ggml_type = cursor.scalar("<I", f"tensor {name!r}'s type")
  offset = cursor.scalar("<Q", f"tensor {name!r}'s offset")
  return name, dims, ggml_type, offset, at


def _view(buf, data_start: int, entry, source: str) -> GGUFTensor:
  """The tensor of one table entry, its data viewed in `buf`."""
  name, dims, raw_type, offset, at = entry
  try:
    tensor_type = GGMLQuantizationType(raw_type)
  except ValueError:
    raise GGUFFormatError(source, f"byte {at}: tensor {name!r} has unknown ggml type "
                          f"{raw_type}") from None
  block, type_size = GGML_QUANT_SIZES[tensor_type]
  n_elements = math.prod(dims)  # Python ints: a corrupt dim cannot overflow
  if (dims[0] if dims else 1) % block:
    raise GGUFFormatError(source, f"tensor {name!r} of shape {dims}: its innermost dim is "
                          f"not a whole number of {tensor_type.name} blocks of {block}")
  n_bytes = n_elements // block * type_size
  start = data_start + offset
  if start + n_bytes > len(buf):
    raise GGUFFormatError(
        source, f"tensor {name!r} is truncated ({max(0, len(buf) - start)} of {n_bytes} "
        f"bytes at byte {start}): the file is incomplete or corrupt")
  numpy_shape = tuple(reversed(dims))
  if tensor_type in _PLAIN_DTYPES:
    dtype = np.dtype(_PLAIN_DTYPES[tensor_type])
    data = np.frombuffer(buf, dtype, n_elements, start).reshape(numpy_shape)
  else:
    data = np.frombuffer(buf, np.uint8, n_bytes, start).reshape(
        quant_shape_to_byte_shape(numpy_shape, tensor_type))
  return GGUFTensor(name=name, shape=dims, tensor_type=tensor_type, offset=start,
                    n_bytes=n_bytes, data=data)
