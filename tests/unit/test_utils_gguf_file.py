"""read_gguf against gguf's own writer and reader, and on broken files (errors name where)."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFValueType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgrpo_jax.utils.gguf_file import GGUFFormatError, read_gguf

HEADER_BYTES = 24  # magic, version, tensor count, metadata count


def write(path, metadata=(), tensors=(), arch="llama"):
  """A GGUF file by gguf's writer: metadata (key, value, type[, item type]) entries and
  (name, array[, ggml type]) tensors."""
  writer = gguf.GGUFWriter(str(path), arch)
  for key, value, vtype, *sub in metadata:
    writer.add_key_value(key, value, vtype, *sub)
  for name, array, *raw in tensors:
    if raw:
      writer.add_tensor(name, array, raw_shape=array.shape, raw_dtype=raw[0])
    else:
      writer.add_tensor(name, array)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


def every_kind(path):
  rng = np.random.default_rng(0)
  embedding = rng.standard_normal((8, 64)).astype(np.float32)
  return write(path, metadata=[
      ("u8", 255, GGUFValueType.UINT8), ("i8", -128, GGUFValueType.INT8),
      ("u16", 65535, GGUFValueType.UINT16), ("i16", -32768, GGUFValueType.INT16),
      ("u32", 2**32 - 1, GGUFValueType.UINT32), ("i32", -2**31, GGUFValueType.INT32),
      ("u64", 2**64 - 1, GGUFValueType.UINT64), ("i64", -2**63, GGUFValueType.INT64),
      ("f32", 0.25, GGUFValueType.FLOAT32), ("f64", 1e-300, GGUFValueType.FLOAT64),
      ("yes", True, GGUFValueType.BOOL), ("name", "Grüße ✓", GGUFValueType.STRING),
      ("ints", [1, -2, 3], GGUFValueType.ARRAY, GGUFValueType.INT32),
      ("floats", [0.5, -1.5], GGUFValueType.ARRAY, GGUFValueType.FLOAT32),
      ("words", ["a", "", "ü b"], GGUFValueType.ARRAY, GGUFValueType.STRING),
      ("nested", [[1, 2], [3]], GGUFValueType.ARRAY, GGUFValueType.ARRAY),
  ], tensors=[
      ("embedding.q8", gguf.quants.quantize(embedding, GGMLQuantizationType.Q8_0),
       GGMLQuantizationType.Q8_0),
      ("norm", rng.standard_normal(64).astype(np.float32)),
      ("half", rng.standard_normal((3, 5)).astype(np.float16)),
      ("ids", np.arange(12, dtype=np.int32).reshape(3, 4)),
  ])


def assert_same_as_gguf_reader(path, flattened_by_gguf=()):
  """read_gguf gives what GGUFReader gives, but for the arrays of arrays that
  GGUFReader's `contents()` flattens (`flattened_by_gguf`)."""
  parsed, reference = read_gguf(path), gguf.GGUFReader(path)
  fields = {k: v.contents() for k, v in reference.fields.items() if not k.startswith("GGUF.")}
  for key in flattened_by_gguf:
    assert fields[key] == [x for item in parsed.metadata[key] for x in item]
    fields[key] = parsed.metadata[key]
  assert parsed.metadata == fields
  assert [t.name for t in parsed.tensors] == [t.name for t in reference.tensors]
  for ours, theirs in zip(parsed.tensors, reference.tensors, strict=True):
    assert ours.tensor_type == theirs.tensor_type
    assert ours.shape == tuple(theirs.shape.tolist()) and ours.n_bytes == int(theirs.n_bytes)
    assert ours.offset == theirs.data_offset
    assert ours.data.dtype == theirs.data.dtype and ours.data.shape == theirs.data.shape
    np.testing.assert_array_equal(ours.data, theirs.data)
  return parsed


def test_every_value_and_tensor_kind_reads_as_gguf_reader_reads_it(tmp_path):
  parsed = assert_same_as_gguf_reader(every_kind(tmp_path / "kinds.gguf"), ("nested",))
  assert parsed.version == 3
  assert parsed.metadata["u64"] == 2**64 - 1 and parsed.metadata["nested"] == [[1, 2], [3]]
  half = next(t for t in parsed.tensors if t.name == "half")
  assert half.shape == (5, 3) and half.data.shape == (3, 5)
  q8 = next(t for t in parsed.tensors if t.name == "embedding.q8")
  assert q8.data.dtype == np.uint8 and q8.data.shape == (8, 68)  # 2 blocks of 34 bytes


SCALARS = {
    GGUFValueType.UINT8: st.integers(0, 2**8 - 1), GGUFValueType.INT8: st.integers(-2**7, 2**7 - 1),
    GGUFValueType.UINT32: st.integers(0, 2**32 - 1),
    GGUFValueType.INT64: st.integers(-2**63, 2**63 - 1),
    GGUFValueType.FLOAT32: st.floats(width=32, allow_nan=False),
    GGUFValueType.FLOAT64: st.floats(allow_nan=False), GGUFValueType.BOOL: st.booleans(),
    GGUFValueType.STRING: st.text(max_size=12),
}


@st.composite
def entries(draw):
  vtype = draw(st.sampled_from(sorted(SCALARS)))
  if draw(st.booleans()):
    return draw(st.lists(SCALARS[vtype], min_size=1, max_size=6)), GGUFValueType.ARRAY, vtype
  return draw(SCALARS[vtype]), vtype


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(metadata=st.dictionaries(st.text(min_size=1, max_size=10).filter(
           lambda k: not k.startswith("general.")), entries(), max_size=6),
       shapes=st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), max_size=3))
def test_what_gguf_writes_reads_back(tmp_path_factory, metadata, shapes):
  path = tmp_path_factory.mktemp("w") / "w.gguf"
  tensors = [(f"t{i}", np.full(shape, i, np.float32)) for i, shape in enumerate(shapes)]
  write(path, [(k, *v) for k, v in metadata.items()], tensors)
  parsed = assert_same_as_gguf_reader(path)
  assert {k: v for k, v in parsed.metadata.items() if not k.startswith("general.")} == {
      k: v[0] for k, v in metadata.items()}
  assert [t.data.shape for t in parsed.tensors] == [tuple(s) for s in shapes]


def test_a_file_cut_anywhere_before_its_last_tensor_ends_is_refused_naming_the_file(tmp_path):
  full = every_kind(tmp_path / "kinds.gguf")
  data = full.read_bytes()
  end = max(t.offset + t.n_bytes for t in read_gguf(full).tensors)
  assert end <= len(data)
  cut = tmp_path / "cut.gguf"
  cut.write_bytes(data[:end])  # what follows the last tensor is padding
  assert len(read_gguf(cut).tensors) == 4
  for size in range(1, end):
    cut.write_bytes(data[:size])
    with pytest.raises(GGUFFormatError, match=r"cut\.gguf: ") as caught:
      read_gguf(cut)
    assert "truncated" in caught.value.detail or "ends inside" in caught.value.detail, size


def _patched(path, at, fmt, value):
  data = bytearray(path.read_bytes())
  struct.pack_into(fmt, data, at, value)
  path.write_bytes(bytes(data))
  return path


def test_bad_headers_are_named(tmp_path):
  good = write(tmp_path / "good.gguf", metadata=[("k", 1, GGUFValueType.UINT32)],
               tensors=[("a", np.zeros(4, np.float32)), ("b", np.zeros(4, np.float32))])
  first_type = HEADER_BYTES + 8 + len("general.architecture")
  cases = [
      (0, "<4s", b"GGML", r"byte 0: not a GGUF file \(starts with b'GGML'"),
      (4, "<I", 7, r"byte 4: version 7 is not supported"),
      (4, ">I", 3, r"byte 4: a big-endian file is not supported"),
      (first_type, "<I", 13, r"'general\.architecture' has unknown value type 13"),
  ]
  for at, fmt, value, message in cases:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(good.read_bytes())
    with pytest.raises(GGUFFormatError, match=message):
      read_gguf(_patched(broken, at, fmt, value))
  twice = tmp_path / "twice.gguf"
  twice.write_bytes(good.read_bytes().replace(b"\x01\x00\x00\x00\x00\x00\x00\x00b",
                                              b"\x01\x00\x00\x00\x00\x00\x00\x00a"))
  with pytest.raises(GGUFFormatError, match="tensor 'a' appears twice"):
    read_gguf(twice)
  empty = tmp_path / "empty.gguf"
  empty.write_bytes(b"")
  with pytest.raises(GGUFFormatError, match="empty.gguf: the file is empty"):
    read_gguf(empty)
  with pytest.raises(FileNotFoundError, match="absent.gguf"):
    read_gguf(tmp_path / "absent.gguf")


def test_a_tensor_past_the_files_end_or_of_partial_blocks_is_named(tmp_path):
  path = write(tmp_path / "big.gguf", tensors=[("w", np.zeros((2, 3), np.float32))])
  dims_at = HEADER_BYTES + 8 + len("general.architecture") + 4 + 8 + len("llama")
  dims_at += 8 + len("w") + 4  # the tensor's name and rank
  size = (2**64 - 1) * 2 * 4  # ne0 patched, ne1 = 2, float32
  with pytest.raises(GGUFFormatError, match=rf"big\.gguf: tensor 'w' is truncated \(32 of "
                     rf"{size} bytes at byte 128\)"):
    read_gguf(_patched(path, dims_at, "<Q", 2**64 - 1))
  quantized = write(tmp_path / "q.gguf", tensors=[(
      "q", gguf.quants.quantize(np.zeros((2, 64), np.float32), GGMLQuantizationType.Q8_0),
      GGMLQuantizationType.Q8_0)])
  with pytest.raises(GGUFFormatError, match=r"q\.gguf: tensor 'q' of shape \(48, 2\): its "
                     r"innermost dim is not a whole number of Q8_0 blocks of 32"):
    read_gguf(_patched(quantized, dims_at, "<Q", 48))  # 48 x 2 = 96 elements, 3 blocks in all
