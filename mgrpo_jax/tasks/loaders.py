"""Loaders for user-provided benchmark files (GAIA, WebWalkerQA, generic JSONL / CSV).

GAIA's `metadata.jsonl` has one JSON object per line with fields `task_id`,
`Question`, `Final answer`, `Level` and `file_name` (others are kept in `extra`);
`split_attachments` separates the text-only questions from those needing an attached
file, which agents with web tools alone cannot read.
WebWalkerQA's rows (`load_webwalker`: a JSON list, or one object per line) have
`Question`, `Answer`, `Root_Url` and `Info` (Hugging Face's copy spells them in lower
case); the question is asked with its root URL, where the answer's pages start.
`load_jsonl` / `load_csv` read any file given a field mapping
{"id": ..., "question": ..., "answer": ...} (optional "level", "file_name"); a row
without the id field is named by its line, `line-<n>`, so a plain file of questions and
answers needs no ids.
Every problem raises `BenchmarkFileError` naming the path, the 1-based line number (the
item number of a JSON list) and the field.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

GAIA_FIELDS = {"id": "task_id", "question": "Question", "answer": "Final answer",
               "level": "Level", "file_name": "file_name"}
REQUIRED = ("id", "question", "answer")
OPTIONAL = ("level", "file_name")


class BenchmarkFileError(ValueError):
  """A benchmark file problem; the message names path, line and field."""


@dataclasses.dataclass(frozen=True)
class BenchmarkTask:
  """One external task: `text` and `answer` as the answer judge expects."""
  id: str
  text: str
  answer: str
  level: str = ""
  file_name: str = ""
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def check_field_map(field_map: Mapping[str, str]) -> None:
  missing = [k for k in REQUIRED if k not in field_map]
  unknown = [k for k in field_map if k not in REQUIRED + OPTIONAL]
  if missing or unknown:
    raise ValueError(f"field map needs keys {REQUIRED} (optional {OPTIONAL}); "
                     f"missing {missing}, unknown {unknown}")


def _task(record: Mapping[str, Any], field_map: Mapping[str, str], path: str,
          line: int) -> BenchmarkTask:
  values = {}
  for key, field in field_map.items():
    if field not in record:
      if key in REQUIRED and key != "id":
        raise BenchmarkFileError(f"{path}:{line}: missing field {field!r}")
      values[key] = f"line-{line}" if key == "id" else ""
      continue
    value = record[field]
    if value is None and key in REQUIRED:
      raise BenchmarkFileError(f"{path}:{line}: field {field!r} is null")
    values[key] = "" if value is None else str(value)
  extra = {k: v for k, v in record.items() if k not in set(field_map.values())}
  return BenchmarkTask(values["id"], values["question"], values["answer"],
                       values.get("level", ""), values.get("file_name", ""), extra)


def _open(path: str | os.PathLike):
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise BenchmarkFileError(f"{path}: file not found")
  return path, open(path, encoding="utf-8", newline="")


def _json_lines(lines: Iterable[str], path: str) -> Iterator[tuple[int, Any]]:
  """(line number, parsed value) of each non-blank line of a JSON-lines file; a
  malformed line is an error naming the file and the line."""
  for line_no, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      value = json.loads(line)
    except ValueError as exc:
      raise BenchmarkFileError(f"{path}:{line_no}: malformed JSON: {exc}") from None
    yield line_no, value


def load_jsonl(path: str | os.PathLike, field_map: Mapping[str, str]) -> list[BenchmarkTask]:
  """Tasks from a JSON-lines file; blank lines are skipped."""
  check_field_map(field_map)
  path, handle = _open(path)
  tasks = []
  with handle:
    for line_no, record in _json_lines(handle, path):
      if not isinstance(record, dict):
        raise BenchmarkFileError(f"{path}:{line_no}: expected a JSON object, "
                                 f"got {type(record).__name__}")
      tasks.append(_task(record, field_map, path, line_no))
  return tasks


def load_csv(path: str | os.PathLike, field_map: Mapping[str, str]) -> list[BenchmarkTask]:
  """Tasks from a CSV file with a header row (line 1)."""
  check_field_map(field_map)
  path, handle = _open(path)
  with handle:
    reader = csv.DictReader(handle)
    header = reader.fieldnames or []
    for key in ("question", "answer"):
      if field_map[key] not in header:
        raise BenchmarkFileError(f"{path}:1: missing field {field_map[key]!r} in the header")
    tasks = []
    for record in reader:
      if None in record:
        raise BenchmarkFileError(f"{path}:{reader.line_num}: more values than header fields")
      tasks.append(_task(record, field_map, path, reader.line_num))
  return tasks


def load_gaia(path: str | os.PathLike) -> list[BenchmarkTask]:
  """GAIA `metadata.jsonl` (a file, or a directory containing it)."""
  path = os.fspath(path)
  if os.path.isdir(path):
    path = os.path.join(path, "metadata.jsonl")
  return load_jsonl(path, GAIA_FIELDS)


def split_attachments(tasks: list[BenchmarkTask]
                      ) -> tuple[list[BenchmarkTask], list[BenchmarkTask]]:
  """(the tasks without an attached file, those with one), each in order."""
  return ([t for t in tasks if not t.file_name], [t for t in tasks if t.file_name])


WEBWALKER_FIELDS = ("question", "answer", "root_url")


def _webwalker_task(record: Any, where: str, number: int) -> BenchmarkTask:
  """One WebWalkerQA row; its id is its `id` field, else `webwalker-<number>`."""
  if not isinstance(record, dict):
    raise BenchmarkFileError(f"{where}: expected a JSON object, got {type(record).__name__}")
  by_name = {str(k).lower(): k for k in record}
  values = {}
  for field in WEBWALKER_FIELDS:
    if field not in by_name:
      raise BenchmarkFileError(f"{where}: missing field {field!r} (or {field.title()!r})")
    value = record[by_name[field]]
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or (
        not str(value).strip()):
      raise BenchmarkFileError(f"{where}: field {by_name[field]!r} must be a non-empty "
                               f"string, got {value!r}")
    values[field] = str(value).strip()
  used = {by_name[f] for f in WEBWALKER_FIELDS}
  extra = {k: v for k, v in record.items() if k not in used}
  extra["root_url"] = values["root_url"]
  task_id = str(record.get("id", "")).strip() or f"webwalker-{number}"
  info = record.get(by_name.get("info", "info"))
  level = str(info.get("Difficulty_Level", info.get("difficulty_level", ""))) if isinstance(
      info, dict) else ""
  text = f"{values['question']}\nStart from the website {values['root_url']}"
  return BenchmarkTask(task_id, text, values["answer"], level, "", extra)


def load_webwalker(path: str | os.PathLike) -> list[BenchmarkTask]:
  """WebWalkerQA's questions: one row per line in a `.jsonl` file or one not starting
  with `[` (errors name the line; blank lines are skipped), else a JSON list of rows
  (errors name the item)."""
  path, handle = _open(path)
  with handle:
    text = handle.read()
  if not path.endswith(".jsonl") and text.lstrip().startswith("["):
    try:
      rows = json.loads(text)
    except ValueError as exc:
      raise BenchmarkFileError(f"{path}: malformed JSON: {exc}") from None
    return [_webwalker_task(row, f"{path}: item {i}", i) for i, row in enumerate(rows, 1)]
  return [_webwalker_task(record, f"{path}:{line_no}", line_no)
          for line_no, record in _json_lines(text.splitlines(), path)]


def load_tasks(path: str | os.PathLike, field_map: Mapping[str, str] | None = None
               ) -> list[BenchmarkTask]:
  """By extension: .csv -> load_csv, otherwise JSONL (GAIA fields by default)."""
  field_map = GAIA_FIELDS if field_map is None else field_map
  if os.fspath(path).endswith(".csv"):
    return load_csv(path, field_map)
  return load_jsonl(path, field_map)
