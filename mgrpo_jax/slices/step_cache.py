"""Write-ahead caches of one step's rollouts, so a restarted slice redoes nothing differently.

Main slice (`MainStepCache`, `<local>/main/cache/step_<t>.json`): after the controller
finishes step t's rollouts, the scored M records (and, in shared_policy, the S records)
are written in ONE atomic file before anything else happens; a restart that finds it
trains on exactly those rollouts instead of sampling again (the sub-agent may have
trained since). It is deleted once M's checkpoint and ack of step t are durable.

Sub slice (`SubStepCache`, `<local>/sub/cache/step_<t>/`): the service writes every S
record it produces, one atomic file per call `(query id, k, i)`, BEFORE replying. Serving
the same request again (a main slice that restarted mid-rollout) rewrites the same
content. Each file also holds the call's arrival position (delegation batch of the
step, position in the batch) for the no_alignment grouping.

Multi-host slices: only process 0 reads and writes these caches (the main slice gathers
every process's records first and broadcasts a cache it finds; the sub slice's service
runs on process 0).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import urllib.parse
from typing import Any

from mgrpo_jax.agents.records import MainRecord, SubRecord, Trajectory
from mgrpo_jax.training.files import dump_json, load_json
from mgrpo_jax.utils.atomic_files import atomic_write


def main_record_to_dict(record: MainRecord) -> dict[str, Any]:
  return {"query_id": record.query_id, "rollout_index": record.rollout_index,
          "role": record.role, "trajectory": record.trajectory.to_dict(),
          "num_sub_calls": record.num_sub_calls, "correct": record.correct}


def main_record_from_dict(data: dict[str, Any]) -> MainRecord:
  fields = dict(data)
  fields["trajectory"] = Trajectory.from_dict(fields["trajectory"])
  return MainRecord(**fields)


def records_to_json(step: int, query_ids: list[str], main: list[MainRecord],
                    sub: list[SubRecord]) -> dict[str, Any]:
  """One step's scored records as a JSON object (the cache file; a multi-host exchange)."""
  return {"step": step, "query_ids": list(query_ids),
          "main": [main_record_to_dict(r) for r in main], "sub": [r.to_dict() for r in sub]}


def records_from_json(data: dict[str, Any], step: int, source: str
                      ) -> tuple[list[str], list[MainRecord], list[SubRecord]]:
  """(query ids, M records, S records) of `records_to_json`; `source` names it in errors."""
  if data.get("step") != step:
    raise ValueError(f"{source}: holds step {data.get('step')!r}, expected {step}")
  return (list(data["query_ids"]), [main_record_from_dict(r) for r in data["main"]],
          [SubRecord.from_dict(r) for r in data["sub"]])


def _step_name(step: int) -> str:
  if step < 0:
    raise ValueError(f"step must be >= 0, got {step}")
  return f"step_{step:08d}"


def _file_safe(query_id: str) -> str:
  """`query_id` as a file name part: percent-escaped, a leading "." too (a name starting
  with "." is a temporary file, which `SubStepCache.load` skips)."""
  quoted = urllib.parse.quote(query_id, safe="")
  return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


class MainStepCache:
  """The main slice's rollouts of one step (see the module docstring)."""

  def __init__(self, directory: str | os.PathLike[str]):
    self.directory = pathlib.Path(directory)

  def path(self, step: int) -> pathlib.Path:
    return self.directory / f"{_step_name(step)}.json"

  def write(self, step: int, query_ids: list[str], main: list[MainRecord],
            sub: list[SubRecord]) -> None:
    """Atomically stores step `step`'s scored records."""
    atomic_write(self.path(step), dump_json(records_to_json(step, query_ids, main, sub)))

  def load(self, step: int) -> tuple[list[str], list[MainRecord], list[SubRecord]] | None:
    """(query ids, M records, S records) of `step`, or None if it was not cached."""
    path = self.path(step)
    if not path.exists():
      return None
    return records_from_json(load_json(path), step, str(path))

  def delete(self, step: int) -> None:
    self.path(step).unlink(missing_ok=True)

  def delete_before(self, step: int) -> None:
    """Removes leftovers of steps < `step` (a crash between ack and delete)."""
    for path in self.directory.glob("step_*.json"):
      if int(path.stem.split("_")[1]) < step:
        path.unlink(missing_ok=True)


class SubStepCache:
  """The sub slice's S records of each step (see the module docstring)."""

  def __init__(self, directory: str | os.PathLike[str]):
    self.directory = pathlib.Path(directory)

  def step_dir(self, step: int) -> pathlib.Path:
    return self.directory / _step_name(step)

  def put(self, step: int, record: SubRecord, arrival: tuple[int, int]) -> None:
    """Atomically stores one call; the same call again replaces it."""
    name = f"{_file_safe(record.query_id)}.{record.rollout_index}.{record.call_index}.json"
    atomic_write(self.step_dir(step) / name,
                 dump_json({"arrival": list(arrival), "record": record.to_dict()}))

  def load(self, step: int) -> list[tuple[tuple[int, int], SubRecord]]:
    """[(arrival, record)] of `step`, in arrival order (empty if none were cached)."""
    folder = self.step_dir(step)
    if not folder.exists():
      return []
    out = []
    for path in folder.glob("*.json"):
      if path.name.startswith("."):
        continue  # a temporary file of an interrupted write
      data = load_json(path)
      out.append((tuple(data["arrival"]), SubRecord.from_dict(data["record"])))
    out.sort(key=lambda item: (item[0], item[1].key))
    return out

  def delete(self, step: int) -> None:
    shutil.rmtree(self.step_dir(step), ignore_errors=True)

  def delete_before(self, step: int) -> None:
    if not self.directory.exists():
      return
    for path in self.directory.glob("step_*"):
      if path.is_dir() and int(path.name.split("_")[1]) < step:
        shutil.rmtree(path, ignore_errors=True)
