"""Search / visit over the FTS5 index and the tool registry's error handling."""

from __future__ import annotations

import json

import pytest

from mgrpo_jax.tasks import pages, world
from mgrpo_jax.tools import SearchIndex, ToolRegistry, ToolResult, default_registry
from mgrpo_jax.tools.search import build_index, fts_query


@pytest.fixture(scope="module")
def tiny():
  w = world.generate_world("tiny", 0)
  ps = pages.render_pages(w)
  return w, ps, SearchIndex.from_pages(ps)


def test_exact_name_ranks_first(tiny):
  w, _, index = tiny
  top = [index.search(name, 1)[0][1] == i for i, name in enumerate(w.names)]
  assert sum(top) / len(top) >= 0.95


def test_search_results_and_snippets(tiny):
  w, ps, index = tiny
  registry = default_registry(index, top_n=3)
  result = registry.call("search", {"query": w.names[5]})
  assert result.ok and len(result.data) == 3
  title, page_id, snippet = result.data[0]
  assert (title, page_id) == (w.names[5], 5)
  assert result.text.splitlines()[0].startswith(f"1. {title} (page 5): ")
  assert snippet and result.latency_s > 0
  # FTS5 syntax in a query is treated as words, never as operators.
  assert registry.call("search", {"query": 'NEAR("x" *) OR title:'}).ok


def test_visit_by_id_title_and_budget(tiny):
  w, ps, index = tiny
  registry = default_registry(index, visit_budget=40)
  by_id = registry.call("visit", {"page": 3})
  by_title = registry.call("visit", {"page": f"[[{w.names[3]}]]"})
  by_digits = registry.call("visit", {"page": "3"})
  assert by_id.text == by_title.text == by_digits.text == ps[3].text[:40] + " [truncated]"
  full = default_registry(index).call("visit", {"page": w.names[3].lower()})
  assert full.text == ps[3].text


@pytest.mark.parametrize("name,args,message", [
  ("search", {"query": ""}, "empty query"),
  ("search", {"query": "   "}, "empty query"),
  ("search", {"query": "x" * 300}, "limit 256"),
  ("search", {"query": "?!"}, "no searchable words"),
  ("search", {}, "missing argument 'query'"),
  ("search", {"query": 3}, "must be string"),
  ("search", {"query": "a", "n": 2}, "unknown argument 'n'"),
  ("search", ["a"], "must be a JSON object"),
  ("visit", {"page": "No Such Page"}, "no page"),
  ("visit", {"page": 10**9}, "no page"),
  ("visit", {"page": -1}, "no page"),
  ("visit", {"page": "1" * 30}, "no page"),
  ("visit", {"page": 10**30}, "no page"),
  ("visit", {"page": "\u00b2"}, "no page"),
  ("reason", {"problem": "abs([-1, 5])"}, "abs() takes one number, got list"),
  ("visit", {"page": ""}, "empty page"),
  ("visit", {"page": True}, "must be"),
  ("visit", {"page": "y" * 500}, "limit 200"),
  ("reason", {"problem": "().__class__"}, "not allowed"),
  ("fly", {}, "unknown tool 'fly'"),
  (None, {}, "unknown tool"),
])
def test_bad_arguments_are_error_observations(tiny, name, args, message):
  result = default_registry(tiny[2]).call(name, args)
  assert isinstance(result, ToolResult) and not result.ok
  assert result.text.startswith("error: ") and message in result.text


def test_json_dispatch_and_user_tools(tiny):
  registry = default_registry(tiny[2])
  ok = registry.call_json(json.dumps({"name": "reason", "arguments": {"problem": "6*7"}}))
  assert ok.ok and ok.text == "42"
  assert "not valid JSON" in registry.call_json("{nope").text
  assert "not valid JSON" in registry.call("reason", "{nope").text

  def boom(x: int) -> str:
    raise RuntimeError("kaput")

  registry.register_function("boom", boom, description="fails",
                             parameters={"type": "object", "properties": {
                               "x": {"type": "integer"}}, "required": ["x"]})
  failed = registry.call("boom", {"x": 1})
  assert not failed.ok and "RuntimeError: kaput" in failed.text
  registry.register_function("echo", lambda text: text.upper(), description="echo",
                             parameters={"type": "object", "properties": {
                               "text": {"type": "string"}}, "required": ["text"]})
  assert registry.call("echo", {"text": "hi"}).text == "HI"
  assert [s["name"] for s in registry.schemas()] == ["search", "visit", "reason", "boom", "echo"]
  with pytest.raises(ValueError, match="already registered"):
    registry.register_function("echo", str, description="", parameters={})
  assert ToolRegistry().call("search", {"query": "x"}).text.startswith("error: unknown tool")


def test_index_file_is_deterministic_and_readable(tiny, tmp_path):
  _, ps, _ = tiny
  build_index(ps, tmp_path / "a.sqlite")
  build_index(ps, tmp_path / "b.sqlite")
  assert (tmp_path / "a.sqlite").read_bytes() == (tmp_path / "b.sqlite").read_bytes()
  index = SearchIndex.open(tmp_path / "a.sqlite")
  assert len(index) == len(ps) and index.page(7)[1] == ps[7].title
  with pytest.raises(FileNotFoundError, match="missing.sqlite"):
    SearchIndex.open(tmp_path / "missing.sqlite")


def test_fts_query_quotes_terms():
  assert fts_query('Velora "Trust" OR *') == '"velora" OR "trust"'
  assert fts_query("the of") == '"the" OR "of"'
  assert fts_query("?!") == ""
