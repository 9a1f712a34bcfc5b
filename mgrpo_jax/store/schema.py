"""The M-GRPO store records, their keys and the per-step store protocol.

Per training step t of run `run_id` (docs/ALGORITHM.md, "The step protocol"):
  * `runs/<run_id>/step_<t:08d>/outcomes` (`MainOutcomes`, written by the main slice):
    for every query q and rollout k, M's correctness, R_M, its sub-calls (the digest,
    `SubRecord.digest`, of each S record M received, in call order: d_k of them) and
    M's policy version; one record per step, shape [Q, K].
  * `runs/<run_id>/step_<t:08d>/ack_main` and `.../ack_sub` (`SliceAck`): the slice
    finished step t and now holds weight version `weight_version`.
The sub slice reads `correct` (replicated as correct_M into R_S, paper Eq. for R_S), d_k
(for the [Q, K, D] alignment) and the calls' digests (it trains only on the S records
M received) from the outcomes record.

Encoding is JSON with sorted keys and no spaces, so the same record always gives the
same bytes (a re-put after a crash is a no-op). Every record carries `schema_version`;
`from_bytes(key, data)` validates every field and raises `RecordError` naming the key
and the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from mgrpo_jax.store import keys as keys_lib
from mgrpo_jax.store.errors import RecordError

SCHEMA_VERSION = 2  # 2: each rollout names its sub-calls by digest
SLICES = ("main", "sub")
_OUTCOMES = "main_outcomes"
_ACK = "ack"
_NEW = "<new record>"
DIGEST_CHARS = 64  # a SHA-256 digest in hex


# ----------------------------------------------------------------------------- keys


def step_prefix(run_id: str, step: int) -> str:
  """`runs/<run_id>/step_<step:08d>/`: the folder of one step's records."""
  if not isinstance(run_id, str) or not keys_lib.is_valid_segment(run_id):
    raise keys_lib.InvalidKeyError(
        f"run_id {run_id!r} must be one key segment (letters, digits, '_', '-', '.')")
  if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
    raise keys_lib.InvalidKeyError(f"step must be an int >= 0, got {step!r}")
  return f"runs/{run_id}/step_{int(step):08d}/"


def outcomes_key(run_id: str, step: int) -> str:
  """Key of the main slice's `MainOutcomes` record for `step`."""
  return step_prefix(run_id, step) + "outcomes"


def ack_key(run_id: str, step: int, slice_name: str) -> str:
  """Key of `slice_name`'s (`main` or `sub`) `SliceAck` record for `step`."""
  if slice_name not in SLICES:
    raise keys_lib.InvalidKeyError(f"slice must be one of {SLICES}, got {slice_name!r}")
  return step_prefix(run_id, step) + f"ack_{slice_name}"


@dataclasses.dataclass(frozen=True)
class StoreOp:
  """One store operation of the step protocol: `put`, `get` or `wait` (>= 1 `exists`)."""

  op: str
  key: str


def step_store_ops(run_id: str, step: int, slice_name: str, *,
                   staleness: int = 0) -> tuple[StoreOp, ...]:
  """The store operations `slice_name` performs in training step `step`.

  main: wait for the sub slice's ack of step `step - 1 - staleness` (S serves weights at
  most `staleness` steps old), put outcomes, put its own ack. sub: wait for the outcomes,
  get them, put its ack.
  """
  if slice_name == "main":
    waited = step - 1 - staleness
    wait = (StoreOp("wait", ack_key(run_id, waited, "sub")),) if waited >= 0 else ()
    return wait + (StoreOp("put", outcomes_key(run_id, step)),
                   StoreOp("put", ack_key(run_id, step, "main")))
  if slice_name == "sub":
    key = outcomes_key(run_id, step)
    return (StoreOp("wait", key), StoreOp("get", key),
            StoreOp("put", ack_key(run_id, step, "sub")))
  raise ValueError(f"slice must be one of {SLICES}, got {slice_name!r}")


# ----------------------------------------------------------------------- validators


def _bool(key: str, field: str, value: Any) -> bool:
  if isinstance(value, bool | np.bool_):
    return bool(value)
  raise RecordError(key, field, f"expected a bool, got {type(value).__name__} {value!r}")


def _int(key: str, field: str, value: Any, minimum: int = 0) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise RecordError(key, field, f"expected an int, got {type(value).__name__} {value!r}")
  if value < minimum:
    raise RecordError(key, field, f"expected an int >= {minimum}, got {value}")
  return int(value)


def _float(key: str, field: str, value: Any) -> float:
  if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
    raise RecordError(key, field, f"expected a number, got {type(value).__name__} {value!r}")
  if not math.isfinite(value):
    raise RecordError(key, field, f"expected a finite number, got {value}")
  return float(value)


def _str(key: str, field: str, value: Any) -> str:
  if not isinstance(value, str) or not value:
    raise RecordError(key, field, f"expected a non-empty str, got {value!r}")
  return value


def _digests(key: str, field: str, value: Any) -> tuple[str, ...]:
  if not isinstance(value, list | tuple):
    raise RecordError(key, field, f"expected a list of digests, got {value!r}")
  for i, digest in enumerate(value):
    if (not isinstance(digest, str) or len(digest) != DIGEST_CHARS
        or digest.strip("0123456789abcdef")):
      raise RecordError(key, f"{field}[{i}]", f"expected a SHA-256 hex digest, got {digest!r}")
  return tuple(value)


def _list(key: str, field: str, value: Any) -> Sequence[Any]:
  if not isinstance(value, list | tuple) or not value:
    raise RecordError(key, field, f"expected a non-empty list, got {value!r}")
  return value


def _fields(key: str, field: str, value: Any, names: Sequence[str]) -> dict[str, Any]:
  """Checks `value` is an object with exactly the fields `names`."""
  if not isinstance(value, dict):
    raise RecordError(key, field or "<record>",
                      f"expected a JSON object, got {type(value).__name__}")
  dot = f"{field}." if field else ""
  for name in names:
    if name not in value:
      raise RecordError(key, dot + name, "missing")
  for name in value:
    if name not in names:
      raise RecordError(key, dot + str(name), "unknown field")
  return value


def _header(key: str, obj: Any, record: str, names: Sequence[str]) -> dict[str, Any]:
  """Checks the schema version and record type first, then the exact field set."""
  if isinstance(obj, dict):
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
      raise RecordError(key, "schema_version",
                        f"unsupported {version!r}; this code reads {SCHEMA_VERSION}")
    if obj.get("record") != record:
      raise RecordError(key, "record", f"expected {record!r}, got {obj.get('record')!r}")
  return _fields(key, "", obj, ("schema_version", "record", *names))


def _parse_json(key: str, data: bytes) -> Any:
  def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
      raise ValueError("duplicate field names")
    return obj

  def no_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name}")

  if not isinstance(data, bytes | bytearray):
    raise RecordError(key, "<record>", f"expected bytes, got {type(data).__name__}")
  try:
    return json.loads(data.decode("utf-8"), object_pairs_hook=no_duplicates,
                      parse_constant=no_constant)
  except (UnicodeDecodeError, ValueError) as e:
    raise RecordError(key, "<record>", f"not valid UTF-8 JSON: {e}") from None


def _encode(obj: dict[str, Any]) -> bytes:
  return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False,
                    ensure_ascii=True).encode("ascii")


def _check_location(key: str, expected_key: str) -> None:
  if key != expected_key:
    raise RecordError(key, "run_id/step",
                      f"the record's run and step belong at key {expected_key!r}")


def _record_key(key: str, make_key: Any, *args: Any) -> str:
  """`make_key(*args)`, with a bad run_id/step/slice reported as a `RecordError` at `key`."""
  try:
    return make_key(*args)
  except keys_lib.InvalidKeyError as e:
    raise RecordError(key, "run_id/step", str(e)) from None


# -------------------------------------------------------------------------- records


@dataclasses.dataclass(frozen=True)
class RolloutOutcome:
  """M's outcome on one rollout k of one query q.

  Attributes:
    correct: M's final answer is correct (binary; correct_M for the sub slice's R_S).
    main_reward: R_M of the rollout.
    sub_calls: the digest (`SubRecord.digest`) of each S record M received in this
      rollout, in call order: d_k = len(sub_calls) delegations.
    policy_version: version of M's weights that sampled the rollout.
  """

  correct: bool
  main_reward: float
  sub_calls: tuple[str, ...]
  policy_version: int

  FIELDS = ("correct", "main_reward", "sub_calls", "policy_version")

  @property
  def num_sub_calls(self) -> int:
    """d_k."""
    return len(self.sub_calls)

  @classmethod
  def parse(cls, key: str, field: str, obj: Any) -> RolloutOutcome:
    obj = _fields(key, field, obj, cls.FIELDS)
    return cls(
        correct=_bool(key, f"{field}.correct", obj["correct"]),
        main_reward=_float(key, f"{field}.main_reward", obj["main_reward"]),
        sub_calls=_digests(key, f"{field}.sub_calls", obj["sub_calls"]),
        policy_version=_int(key, f"{field}.policy_version", obj["policy_version"]))

  def to_json(self) -> dict[str, Any]:
    return {**dataclasses.asdict(self), "sub_calls": list(self.sub_calls)}


@dataclasses.dataclass(frozen=True)
class QueryOutcomes:
  """The K rollouts of one query, in rollout order k = 0..K-1."""

  query_id: str
  rollouts: tuple[RolloutOutcome, ...]

  FIELDS = ("query_id", "rollouts")

  @classmethod
  def parse(cls, key: str, field: str, obj: Any) -> QueryOutcomes:
    obj = _fields(key, field, obj, cls.FIELDS)
    rollouts = _list(key, f"{field}.rollouts", obj["rollouts"])
    return cls(
        query_id=_str(key, f"{field}.query_id", obj["query_id"]),
        rollouts=tuple(RolloutOutcome.parse(key, f"{field}.rollouts[{k}]", r)
                       for k, r in enumerate(rollouts)))

  def to_json(self) -> dict[str, Any]:
    return {"query_id": self.query_id, "rollouts": [r.to_json() for r in self.rollouts]}


@dataclasses.dataclass(frozen=True)
class MainOutcomes:
  """The main slice's outcomes of one step: Q queries x K rollouts (one record per step).

  Construction validates (and normalizes numpy scalars); errors name the record's key.
  """

  run_id: str
  step: int
  queries: tuple[QueryOutcomes, ...]

  FIELDS = ("run_id", "step", "queries")

  def __post_init__(self):
    key = _record_key(_NEW, outcomes_key, self.run_id, self.step)
    parsed = MainOutcomes._parse_body(key, {
        "run_id": self.run_id, "step": self.step,
        "queries": [q.to_json() if isinstance(q, QueryOutcomes) else q
                    for q in _list(key, "queries", self.queries)]})
    object.__setattr__(self, "step", parsed["step"])
    object.__setattr__(self, "queries", parsed["queries"])

  @property
  def key(self) -> str:
    return outcomes_key(self.run_id, self.step)

  @property
  def shape(self) -> tuple[int, int]:
    """(Q, K)."""
    return len(self.queries), len(self.queries[0].rollouts)

  def to_bytes(self) -> bytes:
    return _encode({
        "schema_version": SCHEMA_VERSION, "record": _OUTCOMES, "run_id": self.run_id,
        "step": self.step, "queries": [q.to_json() for q in self.queries]})

  @classmethod
  def from_bytes(cls, key: str, data: bytes) -> MainOutcomes:
    """Decodes and validates the record stored at `key`."""
    obj = _header(key, _parse_json(key, data), _OUTCOMES, cls.FIELDS)
    body = cls._parse_body(key, obj)
    _check_location(key, _record_key(key, outcomes_key, body["run_id"], body["step"]))
    return cls(**body)

  @staticmethod
  def _parse_body(key: str, obj: dict[str, Any]) -> dict[str, Any]:
    run_id = _str(key, "run_id", obj["run_id"])
    step = _int(key, "step", obj["step"])
    queries = tuple(QueryOutcomes.parse(key, f"queries[{q}]", v)
                    for q, v in enumerate(_list(key, "queries", obj["queries"])))
    num_rollouts = len(queries[0].rollouts)
    seen = set()
    for q, query in enumerate(queries):
      if len(query.rollouts) != num_rollouts:
        raise RecordError(key, f"queries[{q}].rollouts",
                          f"has {len(query.rollouts)} rollouts, queries[0] has {num_rollouts}")
      if query.query_id in seen:
        raise RecordError(key, f"queries[{q}].query_id", f"duplicate {query.query_id!r}")
      seen.add(query.query_id)
    return {"run_id": run_id, "step": step, "queries": queries}

  def sub_call_digests(self) -> dict[tuple[int, int, int], str]:
    """{(q, k, i): digest} of every sub-call the record names."""
    return {(q, k, i): digest for q, query in enumerate(self.queries)
            for k, rollout in enumerate(query.rollouts)
            for i, digest in enumerate(rollout.sub_calls)}

  def to_arrays(self) -> dict[str, np.ndarray]:
    """Arrays [Q, K]: `correct` bool, `main_reward` float32, `num_sub_calls` (d_k) and
    `policy_version` int32."""
    rows = [q.rollouts for q in self.queries]
    return {
        "correct": np.array([[r.correct for r in row] for row in rows], dtype=bool),
        "main_reward": np.array([[r.main_reward for r in row] for row in rows], np.float32),
        "num_sub_calls": np.array([[r.num_sub_calls for r in row] for row in rows], np.int32),
        "policy_version": np.array([[r.policy_version for r in row] for row in rows],
                                   np.int32),
    }

  @classmethod
  def from_arrays(cls, run_id: str, step: int, query_ids: Sequence[str], *, correct: Any,
                  main_reward: Any, sub_calls: Sequence[Sequence[Sequence[str]]],
                  policy_version: Any) -> MainOutcomes:
    """Builds the record from arrays [Q, K] (`policy_version` may be a scalar) and
    `sub_calls[q][k]`, the digests of rollout (q, k)'s sub-calls."""
    key = _record_key(_NEW, outcomes_key, run_id, step)
    correct = np.asarray(correct)
    if correct.ndim != 2 or correct.shape[0] != len(query_ids):
      raise RecordError(key, "correct",
                        f"expected shape [Q={len(query_ids)}, K], got {correct.shape}")
    arrays = {"correct": correct, "main_reward": np.asarray(main_reward),
              "policy_version": np.broadcast_to(np.asarray(policy_version), correct.shape)}
    for name, array in arrays.items():
      if array.shape != correct.shape:
        raise RecordError(key, name, f"expected shape {correct.shape}, got {array.shape}")
    if [len(row) for row in sub_calls] != [correct.shape[1]] * correct.shape[0]:
      raise RecordError(key, "sub_calls", f"expected {correct.shape[0]} lists of "
                        f"{correct.shape[1]} rollouts' digests")
    queries = tuple(
        QueryOutcomes(str(qid), tuple(
            RolloutOutcome(correct=arrays["correct"][q, k].item(),
                           main_reward=arrays["main_reward"][q, k].item(),
                           sub_calls=tuple(sub_calls[q][k]),
                           policy_version=arrays["policy_version"][q, k].item())
            for k in range(correct.shape[1])))
        for q, qid in enumerate(query_ids))
    return cls(run_id, step, queries)


@dataclasses.dataclass(frozen=True)
class SliceAck:
  """A slice finished `step` and now holds weights `weight_version`."""

  run_id: str
  step: int
  slice_name: str
  weight_version: int

  FIELDS = ("run_id", "step", "slice", "weight_version")

  def __post_init__(self):
    key = _record_key(_NEW, ack_key, self.run_id, self.step, self.slice_name)
    object.__setattr__(self, "step", _int(key, "step", self.step))
    object.__setattr__(self, "weight_version",
                       _int(key, "weight_version", self.weight_version))

  @property
  def key(self) -> str:
    return ack_key(self.run_id, self.step, self.slice_name)

  def to_bytes(self) -> bytes:
    return _encode({
        "schema_version": SCHEMA_VERSION, "record": _ACK, "run_id": self.run_id,
        "step": self.step, "slice": self.slice_name, "weight_version": self.weight_version})

  @classmethod
  def from_bytes(cls, key: str, data: bytes) -> SliceAck:
    """Decodes and validates the record stored at `key`."""
    obj = _header(key, _parse_json(key, data), _ACK, cls.FIELDS)
    run_id = _str(key, "run_id", obj["run_id"])
    step = _int(key, "step", obj["step"])
    slice_name = _str(key, "slice", obj["slice"])
    if slice_name not in SLICES:
      raise RecordError(key, "slice", f"expected one of {SLICES}, got {slice_name!r}")
    weight_version = _int(key, "weight_version", obj["weight_version"])
    _check_location(key, _record_key(key, ack_key, run_id, step, slice_name))
    return cls(run_id, step, slice_name, weight_version)
