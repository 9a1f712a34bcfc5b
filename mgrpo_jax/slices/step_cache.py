"""Write-ahead caches of one step's rollouts, so a restarted slice redoes nothing differently.

Both live in the run's workdir (`store.folder`: a local folder or `gs://`), so a slice
restarted on another machine finds them.

Main slice (`MainStepCache`, `<workdir>/main/cache/step_<t>.json`): after the controller
finishes step t's rollouts, the scored M records (and, in shared_policy, the S records)
are written in ONE atomic file before anything else happens; a restart that finds it
trains on exactly those rollouts instead of sampling again (the sub-agent may have
trained since). The file also holds the digest of each S call M received
(`SubRecord.digest`), which the step's outcomes publish.

Sub slice (`SubStepCache`, `<workdir>/sub/cache/step_<t>/`): the service writes every S
record it produces, one atomic file per call `(query id, k, i)` (a batch's files
concurrently), BEFORE replying. Serving the same request again (a main slice that
restarted mid-rollout) rewrites the same content. Each file also holds the call's
arrival position (delegation batch of the step, position in the batch) for the
no_alignment grouping.

A step's files are deleted once no kept checkpoint of the agent precedes the step
(`retire`, after the step's checkpoint and ack): a slice whose newest checkpoint is
corrupt falls back to an older one and redoes the steps after it from their files.

Multi-host slices: only process 0 reads and writes these caches (the main slice gathers
every process's records first and broadcasts a cache it finds; the sub slice's service
runs on process 0).
"""

from __future__ import annotations

import concurrent.futures
import urllib.parse
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from mgrpo_jax.agents.records import MainRecord, SubRecord, Trajectory
from mgrpo_jax.store.folder import Folder
from mgrpo_jax.training.files import dump_json, parse_json

T = TypeVar("T")
R = TypeVar("R")
# Files of one batch or step written, read or deleted at a time: GCS round trips
# overlap, and a client's connection pool (10) is not exceeded.
_WORKERS = 8


def main_record_to_dict(record: MainRecord) -> dict[str, Any]:
  return {"query_id": record.query_id, "rollout_index": record.rollout_index,
          "role": record.role, "trajectory": record.trajectory.to_dict(),
          "num_sub_calls": record.num_sub_calls, "correct": record.correct}


def main_record_from_dict(data: dict[str, Any]) -> MainRecord:
  fields = dict(data)
  fields["trajectory"] = Trajectory.from_dict(fields["trajectory"])
  return MainRecord(**fields)


SubCalls = dict[tuple[str, int, int], str]  # {(query id, k, i): digest of the S record}
StepRecords = tuple[list[str], list[MainRecord], list[SubRecord], SubCalls]


def records_to_json(step: int, query_ids: list[str], main: list[MainRecord],
                    sub: list[SubRecord], sub_calls: SubCalls) -> dict[str, Any]:
  """One step's scored records and the digests of the S calls M received, as a JSON
  object (the cache file; a multi-host exchange)."""
  return {"step": step, "query_ids": list(query_ids),
          "main": [main_record_to_dict(r) for r in main], "sub": [r.to_dict() for r in sub],
          "sub_calls": [[*key, digest] for key, digest in sorted(sub_calls.items())]}


def records_from_json(data: dict[str, Any], step: int, source: str) -> StepRecords:
  """(query ids, M records, S records, S calls' digests) of `records_to_json`; `source`
  names it in errors."""
  if data.get("step") != step:
    raise ValueError(f"{source}: holds step {data.get('step')!r}, expected {step}")
  return (list(data["query_ids"]), [main_record_from_dict(r) for r in data["main"]],
          [SubRecord.from_dict(r) for r in data["sub"]],
          {(q, k, i): digest for q, k, i, digest in data["sub_calls"]})


def _step_name(step: int) -> str:
  if step < 0:
    raise ValueError(f"step must be >= 0, got {step}")
  return f"step_{step:08d}"


def _file_safe(query_id: str) -> str:
  """`query_id` as a file name part: percent-escaped, a leading "." too (a name starting
  with "." is a temporary file, which a `store.folder` neither lists nor accepts)."""
  quoted = urllib.parse.quote(query_id, safe="")
  return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


def _step_of(name: str) -> int:
  """t of a cache entry named `step_<t>.json` or `step_<t>/...`."""
  return int(name.split("/")[0].removesuffix(".json").split("_")[1])


class StepFiles:
  """A cache's folder and how long a step's files are kept."""

  def __init__(self, folder: Folder, checkpoints_kept: int = 1):
    """`checkpoints_kept`: the agent's `checkpoint.keep` (`retire`)."""
    self.folder = folder
    self.checkpoints_kept = checkpoints_kept

  def delete_before(self, step: int) -> None:
    """Removes the files of steps < `step` (leftovers of a crash between ack and retire)."""
    _concurrently(self.folder.delete,
                  [name for name in self.folder.list("step_") if _step_of(name) < step])

  def retire(self, step: int) -> None:
    """After the agent's checkpoint and ack of step `step`: drops the files no kept
    checkpoint needs again. Checkpoints `steps_done` = step + 2 - keep .. step + 1 are
    kept, and a fallback to `steps_done` = s redoes steps s..step from their files."""
    self.delete_before(step + 2 - self.checkpoints_kept)


class MainStepCache(StepFiles):
  """The main slice's rollouts of one step (see the module docstring)."""

  def name(self, step: int) -> str:
    return f"{_step_name(step)}.json"

  def describe(self, step: int) -> str:
    """Where step `step`'s cache lives, for messages."""
    return f"{self.folder.uri}/{self.name(step)}"

  def write(self, step: int, query_ids: list[str], main: list[MainRecord],
            sub: list[SubRecord], sub_calls: SubCalls) -> None:
    """Atomically stores step `step`'s scored records and S calls' digests."""
    self.folder.write(self.name(step), dump_json(
        records_to_json(step, query_ids, main, sub, sub_calls)))

  def read_bytes(self, step: int) -> bytes | None:
    """The cache file of `step` as written, or None."""
    return self.folder.read(self.name(step))

  def load(self, step: int) -> StepRecords | None:
    """`records_from_json` of `step`'s file, or None if it was not cached."""
    data = self.read_bytes(step)
    if data is None:
      return None
    return records_from_json(parse_json(data, self.describe(step)), step, self.describe(step))


class SubStepCache(StepFiles):
  """The sub slice's S records of each step (see the module docstring)."""

  @staticmethod
  def _name(step: int, key: tuple[str, int, int]) -> str:
    query_id, rollout, call = key
    return f"{_step_name(step)}/{_file_safe(query_id)}.{rollout}.{call}.json"

  def put(self, step: int, calls: list[tuple[SubRecord, tuple[int, int]]]) -> None:
    """Atomically stores each (record, arrival) of a delegation batch, concurrently. The
    service stores a call once (`stored` first): it never replaces a record."""
    files = [(self._name(step, record.key),
              dump_json({"arrival": list(arrival), "record": record.to_dict()}))
             for record, arrival in calls]
    _concurrently(lambda file: self.folder.write(*file), files)

  def _read(self, names: list[str]) -> list[tuple[tuple[int, int], SubRecord]]:
    out = []
    for name, data in zip(names, _concurrently(self.folder.read, names), strict=True):
      fields = parse_json(data, f"{self.folder.uri}/{name}")
      out.append((tuple(fields["arrival"]), SubRecord.from_dict(fields["record"])))
    return out

  def stored(self, step: int, keys: Collection[tuple[str, int, int]]
             ) -> dict[tuple[str, int, int], tuple[tuple[int, int], SubRecord]]:
    """{key: (arrival, record)} of the calls among `keys` already stored for `step` (one
    listing of the step, then a read of each stored one)."""
    present = set(self.folder.list(f"{_step_name(step)}/"))
    names = [name for name in (self._name(step, key) for key in keys) if name in present]
    return {record.key: (arrival, record) for arrival, record in self._read(names)}

  def load(self, step: int) -> list[tuple[tuple[int, int], SubRecord]]:
    """[(arrival, record)] of `step`, in arrival order (empty if none were cached)."""
    out = self._read(self.folder.list(f"{_step_name(step)}/"))
    out.sort(key=lambda item: (item[0], item[1].key))
    return out


def _concurrently(fn: Callable[[T], R], items: list[T]) -> list[R]:
  """[fn(item) for item in items], `_WORKERS` at a time (a GCS folder's calls are round
  trips); the first error is raised."""
  if len(items) <= 1:
    return [fn(item) for item in items]
  with concurrent.futures.ThreadPoolExecutor(min(_WORKERS, len(items))) as pool:
    return list(pool.map(fn, items))
