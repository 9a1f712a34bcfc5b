"""Trajectory records: what each agent saw and sampled, for training and logs.

M (or the single agent) gives one `MainRecord` per rollout, keyed by (query id,
rollout index k); S gives one `SubRecord` per call, keyed by (query id, k, call index
i). Each holds a `Trajectory` with per-token arrays of one shape [T]:

  ids        int32    the whole conversation: rendered prompt and observation ids, and
                      the sampled ids exactly as the policy returned them
  loss_mask  bool     True exactly on sampled ids (the only tokens that carry loss)
  logprobs   float32  the policy's log-probability of each sampled id; 0 elsewhere
  roles      int32    `text.chat.Role` code of the message each id belongs to

Reward parts start unscored (NaN) and are filled by `scoring.score`: M's `correct`
(r_correct), S's `expert` (r_expert) and `main_correct` (M's correctness replicated to
every S call of the rollout). `format_ok` (r_format) is set by the validator.
`to_dict` / `from_dict` convert to plain data (str, int, float, bool, lists, numpy
arrays) for the slices' caches; `SubRecord.digest` names a record's content.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any

import numpy as np

# The per-token arrays of a trajectory and the byte layout `SubRecord.digest` hashes.
_ARRAY_BYTES = (("ids", "<i4"), ("loss_mask", "|b1"), ("logprobs", "<f4"), ("roles", "<i4"))

# Why a trajectory ended (Trajectory.end).
END_RESULT = "result"
END_FORMAT = "format_error"
END_TURNS = "turn_limit"
END_CONTEXT = "context_budget"


@dataclasses.dataclass(frozen=True)
class ToolCall:
  """One executed tool call: assistant turn index, tool, JSON arguments, outcome, latency."""
  turn: int
  name: str
  arguments: str
  ok: bool
  latency_s: float


@dataclasses.dataclass(frozen=True, eq=False)
class Trajectory:
  """One agent's conversation (arrays [T], see the module docstring).

  Attributes:
    messages: (role, text) of every message, assistant text decoded from sampled ids
      (for judges and logs; never re-encoded for training).
    policy_version: the version of the policy that sampled the first turn.
    format_ok: r_format; True iff the trajectory ended with a well-formed result.
    error: the parse error code that ended it, or "".
    end: END_RESULT, END_FORMAT, END_TURNS or END_CONTEXT.
    num_turns: assistant turns taken.
    tool_calls: executed tool calls (delegations included for M).
    final: the `<result>` text (M's answer, S's report), or None.
    wall_s: seconds from the first prompt to the end.
  """
  ids: np.ndarray
  loss_mask: np.ndarray
  logprobs: np.ndarray
  roles: np.ndarray
  messages: tuple[tuple[str, str], ...]
  policy_version: int
  format_ok: bool
  error: str
  end: str
  num_turns: int
  tool_calls: tuple[ToolCall, ...]
  final: str | None
  wall_s: float

  @property
  def num_sampled(self) -> int:
    return int(self.loss_mask.sum())

  def to_dict(self) -> dict[str, Any]:
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
    out["messages"] = [list(m) for m in self.messages]
    out["tool_calls"] = [dataclasses.asdict(c) for c in self.tool_calls]
    return out

  @classmethod
  def from_dict(cls, data: dict[str, Any]) -> Trajectory:
    fields = dict(data)
    fields["ids"] = np.asarray(fields["ids"], np.int32)
    fields["loss_mask"] = np.asarray(fields["loss_mask"], bool)
    fields["logprobs"] = np.asarray(fields["logprobs"], np.float32)
    fields["roles"] = np.asarray(fields["roles"], np.int32)
    fields["messages"] = tuple(tuple(m) for m in fields["messages"])
    fields["tool_calls"] = tuple(ToolCall(**c) for c in fields["tool_calls"])
    return cls(**fields)


@dataclasses.dataclass(frozen=True, eq=False)
class MainRecord:
  """M's (or the single agent's) rollout k of query `query_id`."""
  query_id: str
  rollout_index: int
  role: str
  trajectory: Trajectory
  num_sub_calls: int
  correct: float = math.nan

  @property
  def key(self) -> tuple[str, int]:
    return (self.query_id, self.rollout_index)


@dataclasses.dataclass(frozen=True, eq=False)
class SubRecord:
  """S's call `call_index` in rollout k of query `query_id`.

  `report` is what M received (the summarizer's output); `trajectory.final` is S's own
  result text.
  """
  query_id: str
  rollout_index: int
  call_index: int
  subtask: str
  context: str
  report: str
  trajectory: Trajectory
  expert: float = math.nan
  main_correct: float = math.nan

  @property
  def key(self) -> tuple[str, int, int]:
    return (self.query_id, self.rollout_index, self.call_index)

  def to_dict(self) -> dict[str, Any]:
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
    out["trajectory"] = self.trajectory.to_dict()
    return out

  def digest(self) -> str:
    """SHA-256 (hex) of what the record holds but its clock readings (`wall_s`, each tool
    call's `latency_s`, which differ between two runs that sampled the same): equal
    records, wherever they were decoded from, have equal digests, and so do the
    records of a rerun. The main slice publishes the digest of each call it received in
    the step's outcomes; the sub slice trains only on records with it."""
    digest = hashlib.sha256()
    plain = self.to_dict()
    trajectory = plain["trajectory"]
    for name, dtype in _ARRAY_BYTES:  # the arrays as little-endian bytes, length first
      data = np.ascontiguousarray(trajectory.pop(name), dtype).tobytes()
      digest.update(len(data).to_bytes(8, "little") + data)
    del trajectory["wall_s"]
    for call in trajectory["tool_calls"]:
      del call["latency_s"]
    digest.update(json.dumps(plain, sort_keys=True, separators=(",", ":"),
                             allow_nan=True).encode("utf-8"))
    return digest.hexdigest()

  @classmethod
  def from_dict(cls, data: dict[str, Any]) -> SubRecord:
    fields = dict(data)
    fields["trajectory"] = Trajectory.from_dict(fields["trajectory"])
    return cls(**fields)
