"""Benchmark file loaders: GAIA metadata.jsonl and generic JSONL / CSV with a field map."""

from __future__ import annotations

import json

import pytest

from mgrpo_jax.tasks import loaders

GAIA_ROWS = [
  {"task_id": "t-1", "Question": "What is 2+2?", "Level": 1, "Final answer": "4",
   "file_name": "", "Annotator Metadata": {"Steps": "add"}},
  {"task_id": "t-2", "Question": "Who?", "Level": "2", "Final answer": "Ada",
   "file_name": "a.png"},
]


def _write_jsonl(path, rows, extra_lines=()):
  lines = [json.dumps(r) for r in rows] + list(extra_lines)
  path.write_text("\n".join(lines) + "\n")
  return path


def test_gaia_file_and_directory(tmp_path):
  path = _write_jsonl(tmp_path / "metadata.jsonl", GAIA_ROWS)
  tasks = loaders.load_gaia(path)
  assert [(t.id, t.text, t.answer, t.level, t.file_name) for t in tasks] == [
    ("t-1", "What is 2+2?", "4", "1", ""), ("t-2", "Who?", "Ada", "2", "a.png")]
  assert tasks[0].extra == {"Annotator Metadata": {"Steps": "add"}}
  assert loaders.load_gaia(tmp_path) == tasks


def test_missing_file_names_path(tmp_path):
  with pytest.raises(loaders.BenchmarkFileError, match=r"nope\.jsonl: file not found"):
    loaders.load_gaia(tmp_path / "nope.jsonl")
  with pytest.raises(loaders.BenchmarkFileError, match=r"metadata\.jsonl: file not found"):
    loaders.load_gaia(tmp_path)


def test_missing_field_names_path_line_and_field(tmp_path):
  rows = [GAIA_ROWS[0], {"task_id": "t-2", "Question": "Q?"}]
  path = _write_jsonl(tmp_path / "m.jsonl", rows)
  with pytest.raises(loaders.BenchmarkFileError) as err:
    loaders.load_gaia(path)
  assert str(err.value) == f"{path}:2: missing field 'Final answer'"


def test_malformed_and_non_object_lines(tmp_path):
  path = _write_jsonl(tmp_path / "m.jsonl", GAIA_ROWS[:1], ["", "{broken"])
  with pytest.raises(loaders.BenchmarkFileError, match=rf"{path}:3: malformed JSON"):
    loaders.load_gaia(path)
  path = _write_jsonl(tmp_path / "n.jsonl", [], ["[1, 2]"])
  with pytest.raises(loaders.BenchmarkFileError, match=rf"{path}:1: expected a JSON object"):
    loaders.load_gaia(path)


def test_generic_jsonl_mapping(tmp_path):
  path = _write_jsonl(tmp_path / "x.jsonl", [{"qid": 7, "q": "Why?", "a": None}])
  with pytest.raises(loaders.BenchmarkFileError, match=r"x\.jsonl:1: field 'a' is null"):
    loaders.load_jsonl(path, {"id": "qid", "question": "q", "answer": "a"})
  with pytest.raises(ValueError, match="missing \\['answer'\\]"):
    loaders.load_jsonl(path, {"id": "qid", "question": "q"})


def test_csv_mapping_and_errors(tmp_path):
  path = tmp_path / "b.csv"
  path.write_text('id,query,gold\n1,"Hello, world?",42\n2,Next,x\n')
  fields = {"id": "id", "question": "query", "answer": "gold"}
  tasks = loaders.load_tasks(path, fields)
  assert [(t.id, t.text, t.answer) for t in tasks] == [("1", "Hello, world?", "42"),
                                                      ("2", "Next", "x")]
  bad_header = tmp_path / "c.csv"
  bad_header.write_text("id,query\n1,Q\n")
  with pytest.raises(loaders.BenchmarkFileError, match=r"c\.csv:1: missing field 'gold'"):
    loaders.load_csv(bad_header, fields)
  extra = tmp_path / "d.csv"
  extra.write_text("id,query,gold\n1,Q,A\n2,Q,A,surplus\n")
  with pytest.raises(loaders.BenchmarkFileError, match=r"d\.csv:3: more values"):
    loaders.load_csv(extra, fields)


def test_gaia_questions_with_attached_files_are_split_off(tmp_path):
  tasks = loaders.load_gaia(_write_jsonl(tmp_path / "metadata.jsonl", GAIA_ROWS))
  text_only, with_files = loaders.split_attachments(tasks)
  assert [t.id for t in text_only] == ["t-1"] and [t.id for t in with_files] == ["t-2"]


WEBWALKER_ROW = {
  "Question": "When is the paper deadline of the industry track?", "Answer": "March 21",
  "Root_Url": "https://conf.example.org/",
  "Info": {"Hop": "single_source", "Difficulty_Level": "easy",
           "Golden_Path": ["root->calls"]}}


def test_webwalker_json_list_and_lower_case_jsonl(tmp_path):
  listed = tmp_path / "main.json"
  listed.write_text(json.dumps([WEBWALKER_ROW]))
  (task,) = loaders.load_webwalker(listed)
  assert (task.id, task.answer, task.level) == ("webwalker-1", "March 21", "easy")
  assert task.text == ("When is the paper deadline of the industry track?\n"
                       "Start from the website https://conf.example.org/")
  assert task.extra == {"Info": WEBWALKER_ROW["Info"], "root_url": "https://conf.example.org/"}
  lower = {"id": "w7", "question": "Q?", "answer": 3, "root_url": "https://a.example/"}
  lines = _write_jsonl(tmp_path / "ww.jsonl", [lower], ["", json.dumps(lower | {"id": ""})])
  assert [(t.id, t.answer, t.level) for t in loaders.load_webwalker(lines)] == [
    ("w7", "3", ""), ("webwalker-3", "3", "")]


def test_webwalker_bad_rows_name_the_file_and_line_or_item(tmp_path):
  path = _write_jsonl(tmp_path / "ww.jsonl", [WEBWALKER_ROW, {"Question": "Q?",
                                                              "Answer": "A"}])
  with pytest.raises(loaders.BenchmarkFileError) as err:
    loaders.load_webwalker(path)
  assert str(err.value) == f"{path}:2: missing field 'root_url' (or 'Root_Url')"
  listed = tmp_path / "main.json"
  listed.write_text(json.dumps([WEBWALKER_ROW, WEBWALKER_ROW | {"Answer": " "}]))
  with pytest.raises(loaders.BenchmarkFileError,
                     match=rf"{listed}: item 2: field 'Answer' must be a non-empty string"):
    loaders.load_webwalker(listed)
  listed.write_text(json.dumps([["not", "a", "row"]]))
  with pytest.raises(loaders.BenchmarkFileError, match=r"item 1: expected a JSON object"):
    loaders.load_webwalker(listed)
  listed.write_text("[{broken")
  with pytest.raises(loaders.BenchmarkFileError, match=rf"{listed}: malformed JSON"):
    loaders.load_webwalker(listed)


def test_rows_without_ids_are_named_by_their_line(tmp_path):
  fields = {"id": "id", "question": "question", "answer": "answer"}
  path = _write_jsonl(tmp_path / "plain.jsonl", [{"question": "Q1?", "answer": "A1"}],
                      ["", json.dumps({"id": "x", "question": "Q2?", "answer": "A2"})])
  assert [(t.id, t.text, t.answer) for t in loaders.load_jsonl(path, fields)] == [
    ("line-1", "Q1?", "A1"), ("x", "Q2?", "A2")]
  plain = tmp_path / "plain.csv"
  plain.write_text("question,answer\nQ1?,A1\n")
  assert [(t.id, t.text) for t in loaders.load_csv(plain, fields)] == [("line-2", "Q1?")]
