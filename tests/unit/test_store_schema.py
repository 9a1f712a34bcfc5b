"""M-GRPO store records: keys, deterministic encoding, round trips and validation."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.store import InvalidKeyError, RecordError, schema

_DIGEST = st.text("0123456789abcdef", min_size=64, max_size=64)
_ROLLOUT = st.builds(
    schema.RolloutOutcome, correct=st.booleans(),
    main_reward=st.floats(-10, 10, allow_nan=False, allow_infinity=False),
    sub_calls=st.lists(_DIGEST, max_size=6).map(tuple), policy_version=st.integers(0, 2**40))


def _digests(count: int, seed: str) -> list[str]:
  """`count` distinct SHA-256 hex digests."""
  return [hashlib.sha256(f"{seed}/{i}".encode()).hexdigest() for i in range(count)]


@st.composite
def main_outcomes(draw) -> schema.MainOutcomes:
  num_rollouts = draw(st.integers(1, 4))
  query_ids = draw(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4,
                            unique=True))
  queries = tuple(schema.QueryOutcomes(
      qid, tuple(draw(st.lists(_ROLLOUT, min_size=num_rollouts, max_size=num_rollouts))))
      for qid in query_ids)
  return schema.MainOutcomes(draw(st.from_regex(r"[a-z0-9][a-z0-9_-]{0,8}", fullmatch=True)),
                             draw(st.integers(0, 10**7)), queries)


def _example() -> schema.MainOutcomes:
  return schema.MainOutcomes.from_arrays(
      "run-1", 3, ["q0", "q1"], correct=[[True, False], [False, True]],
      main_reward=[[1.0, 0.1], [0.0, 1.0]],
      sub_calls=[[_digests(2, "a"), []], [_digests(9, "b"), _digests(1, "c")]],
      policy_version=7)


def test_keys_follow_the_documented_layout() -> None:
  assert schema.step_prefix("run-1", 3) == "runs/run-1/step_00000003/"
  assert schema.outcomes_key("run-1", 3) == "runs/run-1/step_00000003/outcomes"
  assert schema.ack_key("run-1", 12345678, "sub") == "runs/run-1/step_12345678/ack_sub"
  for bad in [("a/b", 1), ("..", 1), ("r", -1), ("r", True), ("r", 1.0)]:
    with pytest.raises(InvalidKeyError):
      schema.outcomes_key(*bad)
  with pytest.raises(InvalidKeyError, match="slice"):
    schema.ack_key("r", 1, "other")


def test_golden_encoding_is_sorted_compact_json() -> None:
  ack = schema.SliceAck("run-1", 3, "main", 4)
  assert ack.to_bytes() == (b'{"record":"ack","run_id":"run-1","schema_version":2,'
                            b'"slice":"main","step":3,"weight_version":4}')
  data = _example().to_bytes()
  first, second = _digests(2, "a")
  assert data.startswith(b'{"queries":[{"query_id":"q0","rollouts":[{"correct":true,'
                         b'"main_reward":1.0,"policy_version":7,"sub_calls":["'
                         + f'{first}","{second}"]}},'.encode())
  assert data.endswith(b'"record":"main_outcomes","run_id":"run-1","schema_version":2,'
                       b'"step":3}')


def test_arrays_round_trip_with_shapes_and_dtypes() -> None:
  arrays = _example().to_arrays()
  np.testing.assert_array_equal(arrays["correct"], [[True, False], [False, True]])
  np.testing.assert_array_equal(arrays["num_sub_calls"], [[2, 0], [9, 1]])
  np.testing.assert_array_equal(arrays["policy_version"], np.full((2, 2), 7))
  np.testing.assert_allclose(arrays["main_reward"], [[1.0, 0.1], [0.0, 1.0]])
  assert {k: (v.dtype, v.shape) for k, v in arrays.items()} == {
      "correct": (np.dtype(bool), (2, 2)), "main_reward": (np.dtype(np.float32), (2, 2)),
      "num_sub_calls": (np.dtype(np.int32), (2, 2)),
      "policy_version": (np.dtype(np.int32), (2, 2))}
  assert _example().shape == (2, 2)
  digests = _example().sub_call_digests()
  assert len(digests) == 12 and digests[(1, 0, 8)] == _digests(9, "b")[8]
  assert (0, 1, 0) not in digests


@given(main_outcomes())
def test_main_outcomes_round_trip_is_byte_identical(record: schema.MainOutcomes) -> None:
  data = record.to_bytes()
  decoded = schema.MainOutcomes.from_bytes(record.key, data)
  assert decoded == record
  assert decoded.to_bytes() == data


@given(st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}", fullmatch=True),
       st.integers(0, 10**8 - 1), st.sampled_from(schema.SLICES), st.integers(0, 10**9))
def test_ack_round_trip(run_id: str, step: int, slice_name: str, version: int) -> None:
  ack = schema.SliceAck(run_id, step, slice_name, version)
  assert schema.SliceAck.from_bytes(ack.key, ack.to_bytes()) == ack


def _mutated(mutate) -> tuple[str, bytes]:
  obj = json.loads(_example().to_bytes())
  mutate(obj)
  return _example().key, json.dumps(obj).encode()


@pytest.mark.parametrize("mutate, field", [
    (lambda o: o.update(schema_version=1), "schema_version"),
    (lambda o: o.pop("schema_version"), "schema_version"),
    (lambda o: o.update(record="ack"), "record"),
    (lambda o: o.pop("step"), "step"),
    (lambda o: o.update(extra=1), "extra"),
    (lambda o: o.update(step=-1), "step"),
    (lambda o: o.update(step="3"), "step"),
    (lambda o: o.update(step=4), "run_id/step"),
    (lambda o: o.update(run_id="other"), "run_id/step"),
    (lambda o: o.update(run_id="a/b"), "run_id/step"),
    (lambda o: o.update(queries=[]), "queries"),
    (lambda o: o["queries"][1].update(query_id="q0"), "queries[1].query_id"),
    (lambda o: o["queries"][1].update(query_id=""), "queries[1].query_id"),
    (lambda o: o["queries"][1]["rollouts"].pop(), "queries[1].rollouts"),
    (lambda o: o["queries"][0]["rollouts"][1].update(correct=1),
     "queries[0].rollouts[1].correct"),
    (lambda o: o["queries"][0]["rollouts"][1].update(main_reward="0.1"),
     "queries[0].rollouts[1].main_reward"),
    (lambda o: o["queries"][0]["rollouts"][1].update(main_reward=True),
     "queries[0].rollouts[1].main_reward"),
    (lambda o: o["queries"][1]["rollouts"][0].update(sub_calls=3),
     "queries[1].rollouts[0].sub_calls"),
    (lambda o: o["queries"][1]["rollouts"][0]["sub_calls"].__setitem__(4, "ab" * 31),
     "queries[1].rollouts[0].sub_calls[4]"),
    (lambda o: o["queries"][1]["rollouts"][0]["sub_calls"].__setitem__(0, "A" * 64),
     "queries[1].rollouts[0].sub_calls[0]"),
    (lambda o: o["queries"][1]["rollouts"][0]["sub_calls"].__setitem__(0, 7),
     "queries[1].rollouts[0].sub_calls[0]"),
    (lambda o: o["queries"][1]["rollouts"][0].pop("policy_version"),
     "queries[1].rollouts[0].policy_version"),
    (lambda o: o["queries"][1]["rollouts"][0].update(bonus=0),
     "queries[1].rollouts[0].bonus"),
])
def test_decode_names_key_and_bad_field(mutate, field: str) -> None:
  key, data = _mutated(mutate)
  with pytest.raises(RecordError) as info:
    schema.MainOutcomes.from_bytes(key, data)
  assert info.value.key == key and info.value.field == field
  assert f"record {key!r}: field {field!r}" in str(info.value)


@pytest.mark.parametrize("data, problem", [
    (b"", "not valid UTF-8 JSON"), (b"\xff", "not valid UTF-8 JSON"),
    (b"[1]", "expected a JSON object"), (b'{"a":1,"a":2}', "duplicate"),
    (b'{"x": NaN}', "non-finite"),
])
def test_decode_rejects_malformed_bytes(data: bytes, problem: str) -> None:
  with pytest.raises(RecordError, match=problem):
    schema.MainOutcomes.from_bytes("runs/r/step_00000000/outcomes", data)


def test_construction_validates_and_names_the_key() -> None:
  with pytest.raises(RecordError, match=r"'runs/r/step_00000000/outcomes'.*main_reward.*finite"):
    schema.MainOutcomes.from_arrays("r", 0, ["q"], correct=[[True]],
                                    main_reward=[[np.nan]], sub_calls=[[_digests(1, "x")]],
                                    policy_version=0)
  with pytest.raises(RecordError, match=r"sub_calls.*1 lists of 1 rollouts"):
    schema.MainOutcomes.from_arrays("r", 0, ["q"], correct=[[True]], main_reward=[[1.0]],
                                    sub_calls=[[[], []]], policy_version=0)


@pytest.mark.parametrize("mutate, field", [
    (lambda o: o.update(slice="other"), "slice"),
    (lambda o: o.update(weight_version=-1), "weight_version"),
    (lambda o: o.update(step=9), "run_id/step"),
    (lambda o: o.update(schema_version=0), "schema_version"),
])
def test_ack_decode_names_bad_field(mutate, field: str) -> None:
  ack = schema.SliceAck("r", 1, "sub", 2)
  obj = json.loads(ack.to_bytes())
  mutate(obj)
  with pytest.raises(RecordError) as info:
    schema.SliceAck.from_bytes(ack.key, json.dumps(obj).encode())
  assert (info.value.key, info.value.field) == (ack.key, field)


def test_step_store_ops_per_slice() -> None:
  main0 = schema.step_store_ops("r", 0, "main")
  assert [(o.op, o.key) for o in main0] == [
      ("put", "runs/r/step_00000000/outcomes"), ("put", "runs/r/step_00000000/ack_main")]
  main5 = schema.step_store_ops("r", 5, "main", staleness=1)
  assert main5[0] == schema.StoreOp("wait", "runs/r/step_00000003/ack_sub")
  sub = schema.step_store_ops("r", 5, "sub")
  assert [(o.op, o.key) for o in sub] == [
      ("wait", "runs/r/step_00000005/outcomes"), ("get", "runs/r/step_00000005/outcomes"),
      ("put", "runs/r/step_00000005/ack_sub")]
  with pytest.raises(ValueError, match="slice"):
    schema.step_store_ops("r", 0, "both")
