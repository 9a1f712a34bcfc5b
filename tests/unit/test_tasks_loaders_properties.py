"""Property tests of the question-file parsers: any well-formed row comes back field for
field, and any broken line is refused naming its file and line."""

from __future__ import annotations

import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from mgrpo_jax.tasks import loaders

# Texts that survive a JSON round trip and are not blank (the loaders strip nothing else).
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda t: t.strip() == t and t)
_ROWS = st.lists(st.fixed_dictionaries({"question": _TEXT, "answer": _TEXT,
                                        "root_url": _TEXT}), min_size=1, max_size=5)
_FIELDS = {"id": "id", "question": "question", "answer": "answer"}


def _write(tmp_path_factory, name, lines):
  path = tmp_path_factory.mktemp("q") / name
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return path


@settings(max_examples=40, deadline=None)
@given(rows=_ROWS)
def test_jsonl_rows_round_trip(tmp_path_factory, rows):
  records = [{"id": f"q{i}", **row} for i, row in enumerate(rows)]
  path = _write(tmp_path_factory, "q.jsonl", [json.dumps(r) for r in records])
  tasks = loaders.load_jsonl(path, _FIELDS)
  assert [(t.id, t.text, t.answer) for t in tasks] == [
    (r["id"], r["question"], r["answer"]) for r in records]
  assert [t.extra for t in tasks] == [{"root_url": r["root_url"]} for r in records]


@settings(max_examples=40, deadline=None)
@given(rows=_ROWS, as_list=st.booleans())
def test_webwalker_rows_round_trip(tmp_path_factory, rows, as_list):
  lines = [json.dumps(rows)] if as_list else [json.dumps(r) for r in rows]
  name = "ww.json" if as_list else "ww.jsonl"
  tasks = loaders.load_webwalker(_write(tmp_path_factory, name, lines))
  assert [t.id for t in tasks] == [f"webwalker-{i}" for i in range(1, len(rows) + 1)]
  assert [(t.text, t.answer, t.extra["root_url"]) for t in tasks] == [
    (f"{r['question']}\nStart from the website {r['root_url']}", r["answer"], r["root_url"])
    for r in rows]


@settings(max_examples=60, deadline=None)
@given(rows=_ROWS, bad=st.sampled_from(['{"id": ', "[1]", "null", '"text"']),
       at=st.integers(min_value=0))
@example(rows=[{"question": "Q", "answer": "A", "root_url": "u"}], bad="[1]", at=0)
def test_a_broken_line_is_named(tmp_path_factory, rows, bad, at):
  lines = [json.dumps({"id": f"q{i}", **row}) for i, row in enumerate(rows)]
  at %= len(lines) + 1
  lines.insert(at, bad)
  path = _write(tmp_path_factory, "q.jsonl", lines)
  for load in (lambda p: loaders.load_jsonl(p, _FIELDS), loaders.load_webwalker):
    try:
      load(path)
    except loaders.BenchmarkFileError as e:
      assert str(e).startswith(f"{path}:{at + 1}: ")
    else:
      raise AssertionError(f"line {at + 1} ({bad!r}) was accepted")
