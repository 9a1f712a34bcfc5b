"""Sub-agent tools over a page corpus: `search(query)` (SQLite FTS5, BM25) and `visit(page)`.

The index is one SQLite file: a `pages(page_id, title, text)` table and an FTS5
external-content table over (title, text). Ranking is FTS5's BM25 with the title
column weighted `TITLE_WEIGHT` times the body. Free text is turned into an OR of quoted
terms (function words dropped), so FTS5 syntax in a query (quotes, `NEAR`, `*`, column
filters) is never interpreted. Pages are anything with `page_id`, `title` and `text`.
"""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from collections.abc import Iterable
from typing import Protocol

from mgrpo_jax.tools.base import Tool, ToolResult, error

TITLE_WEIGHT = 10.0
MAX_QUERY_CHARS = 256
MAX_QUERY_TERMS = 32
MAX_PAGE_ARG_CHARS = 200
SNIPPET_TOKENS = 16
_MAX_PAGE_ID = 2**63 - 1  # SQLite INTEGER
_TERM = re.compile(r"\w+", re.UNICODE)
# Function words dropped from queries (unless nothing else is left): they match most
# pages, add nothing to BM25's ranking and make OR-queries scan the whole index.
STOPWORDS = frozenset("""a an and are as at be by did do does for from had has have how in
  is it its of on or that the this to was were what when where which who whom whose why
  with""".split())


class PageLike(Protocol):
  page_id: int
  title: str
  text: str


def _create(conn: sqlite3.Connection, pages: Iterable[PageLike]) -> None:
  conn.executescript("""
    CREATE TABLE pages(page_id INTEGER PRIMARY KEY, title TEXT NOT NULL UNIQUE,
                       text TEXT NOT NULL);
    CREATE VIRTUAL TABLE pages_fts USING fts5(title, text, content='pages',
                                              content_rowid='page_id');
  """)
  with conn:
    conn.executemany("INSERT INTO pages VALUES (?, ?, ?)",
                     ((int(p.page_id), p.title, p.text) for p in pages))
    conn.execute("INSERT INTO pages_fts(rowid, title, text) "
                 "SELECT page_id, title, text FROM pages")
    conn.execute("INSERT INTO pages_fts(pages_fts) VALUES ('optimize')")


def build_index(pages: Iterable[PageLike], path: str | os.PathLike) -> None:
  """Writes the index for `pages` to `path` (atomically; same pages -> same bytes)."""
  path = os.fspath(path)
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".sqlite.tmp", dir=directory)
  os.close(fd)
  os.remove(tmp)
  conn = sqlite3.connect(tmp)
  try:
    conn.execute("PRAGMA journal_mode=OFF")
    _create(conn, pages)
    conn.execute("VACUUM")
  finally:
    conn.close()
  os.replace(tmp, path)


def fts_query(query: str) -> str:
  """Free text -> an FTS5 OR-query of quoted lower-case terms ("" if no terms)."""
  terms = list(dict.fromkeys(t.lower() for t in _TERM.findall(query)))
  terms = ([t for t in terms if t not in STOPWORDS] or terms)[:MAX_QUERY_TERMS]
  return " OR ".join(f'"{t}"' for t in terms)


class SearchIndex:
  """Read access to an index file (or an in-memory index from `from_pages`)."""

  def __init__(self, conn: sqlite3.Connection):
    self._conn = conn

  @classmethod
  def open(cls, path: str | os.PathLike) -> SearchIndex:
    path = os.fspath(path)
    if not os.path.exists(path):
      raise FileNotFoundError(f"search index not found: {path}")
    uri = f"file:{path}?mode=ro"
    return cls(sqlite3.connect(uri, uri=True, check_same_thread=False))

  @classmethod
  def from_pages(cls, pages: Iterable[PageLike]) -> SearchIndex:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    _create(conn, pages)
    return cls(conn)

  def __len__(self) -> int:
    return self._conn.execute("SELECT count(*) FROM pages").fetchone()[0]

  def close(self) -> None:
    self._conn.close()

  def search(self, query: str, top_n: int = 5) -> list[tuple[str, int, str]]:
    """BM25 top-n as (title, page_id, snippet); [] when the query has no terms."""
    match = fts_query(query)
    if not match:
      return []
    rows = self._conn.execute(
      "SELECT title, rowid, snippet(pages_fts, 1, '', '', ' ... ', ?) FROM pages_fts "
      "WHERE pages_fts MATCH ? ORDER BY bm25(pages_fts, ?, 1.0), rowid LIMIT ?",
      (SNIPPET_TOKENS, match, TITLE_WEIGHT, int(top_n))).fetchall()
    return [(t, int(i), s.replace("\n", " ")) for t, i, s in rows]

  def page(self, page: int | str) -> tuple[int, str, str] | None:
    """(page_id, title, text) by id, digit string or exact title (then case-insensitive).

    An id outside SQLite's integer range (e.g. 30 digits) names no page: None.
    """
    digits = isinstance(page, str) and page.strip().isascii() and page.strip().isdigit()
    if isinstance(page, int) or digits:
      page_id = int(page)
      row = (self._conn.execute("SELECT page_id, title, text FROM pages WHERE page_id = ?",
                                (page_id,)).fetchone()
             if 0 <= page_id <= _MAX_PAGE_ID else None)
      if row or isinstance(page, int):
        return row
    title = page.strip().removeprefix("[[").removesuffix("]]").strip()
    row = self._conn.execute(
      "SELECT page_id, title, text FROM pages WHERE title = ?", (title,)).fetchone()
    if row is None:
      row = self._conn.execute(
        "SELECT page_id, title, text FROM pages WHERE title = ? COLLATE NOCASE "
        "ORDER BY page_id LIMIT 1", (title,)).fetchone()
    return row


def format_hits(hits: list[tuple[str, int, str]]) -> str:
  return "\n".join(f"{k}. {title} (page {pid}): {snippet}"
                   for k, (title, pid, snippet) in enumerate(hits, start=1))


def make_search_tool(index: SearchIndex, *, top_n: int = 5) -> Tool:
  """`search(query)`: top-n hits as lines "k. Title (page id): snippet"."""

  def search(query: str) -> ToolResult:
    if not query.strip():
      return error("search: empty query")
    if len(query) > MAX_QUERY_CHARS:
      return error(f"search: query has {len(query)} characters (limit {MAX_QUERY_CHARS})")
    if not fts_query(query):
      return error("search: query has no searchable words")
    hits = index.search(query, top_n)
    if not hits:
      return ToolResult(ok=True, text="no results", data=[])
    return ToolResult(ok=True, text=format_hits(hits), data=hits)

  return Tool("search", "Search the encyclopedia; returns titles, page ids and snippets.",
              {"type": "object", "properties": {"query": {"type": "string"}},
               "required": ["query"]}, search)


def make_visit_tool(index: SearchIndex, *, budget_chars: int = 1500) -> Tool:
  """`visit(page)`: page text by id or title, truncated to `budget_chars`."""

  def visit(page: int | str) -> ToolResult:
    if isinstance(page, str):
      if not page.strip():
        return error("visit: empty page argument")
      if len(page) > MAX_PAGE_ARG_CHARS:
        return error(f"visit: page argument has {len(page)} characters "
                     f"(limit {MAX_PAGE_ARG_CHARS})")
    if isinstance(page, int) and not 0 <= page < 2**62:
      return error(f"visit: no page with id {page}")
    row = index.page(page)
    if row is None:
      return error(f"visit: no page {page!r}")
    page_id, title, text = row
    if len(text) > budget_chars:
      text = text[:budget_chars] + " [truncated]"
    return ToolResult(ok=True, text=text, data={"page_id": page_id, "title": title})

  return Tool("visit", "Open a page by id or exact title; returns its text (truncated).",
              {"type": "object", "properties": {"page": {"type": ["string", "integer"]}},
               "required": ["page"]}, visit)
