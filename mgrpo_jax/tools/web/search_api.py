"""`search(query)` through a web search API: a self-hosted SearXNG, or a generic HTTP one.

- SearXNG (`kind="searxng"`): GET `<url>/search?q=<query>&format=json` (`url` the
  instance, e.g. http://localhost:8888); the hits are `results[]` with `title`, `url`,
  `content`.
- Generic (`kind="http"`): GET `<url>?<query_param>=<query>`; the hits are the list at
  `fields.results`, each hit's title, URL and snippet at `fields.title`, `fields.url`,
  `fields.snippet`. A field is a dotted path (`data.web.results`, `meta.title`) whose
  all-digit parts index lists (`items.0.link`).

`params` (URL-encoded, `count=10&language=en`) follow the query in both. An API key, if
any, goes in the header `api_key_header`. The observation mirrors the offline search's:
lines "k. Title (URL): snippet", top `top_n` hits; "no results" when there are none; an
answer that is not JSON or has no list where the hits should be is a `bad_response`.
Hits without a URL are skipped (the agent could not visit them).
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from mgrpo_jax.tools.base import Tool, ToolResult, error
from mgrpo_jax.tools.search import MAX_QUERY_CHARS
from mgrpo_jax.tools.web.cache import CachedFetcher
from mgrpo_jax.tools.web.failures import WebCounters, WebError
from mgrpo_jax.tools.web.http_client import Response

SEARCH_KINDS = ("searxng", "http")
SNIPPET_CHARS = 300
MISSING = object()  # what `get_path` returns for a path that is not there


@dataclasses.dataclass(frozen=True)
class ResultFields:
  """Where the hits are in an API's JSON answer: dotted paths (module docstring)."""
  results: str = "results"
  title: str = "title"
  url: str = "url"
  snippet: str = "content"


SEARXNG_FIELDS = ResultFields()


@dataclasses.dataclass(frozen=True)
class SearchApi:
  """One search endpoint (module docstring).

  Attributes:
    kind: "searxng" or "http".
    url: the SearXNG instance, or the generic API's endpoint.
    params: more query parameters, URL-encoded.
    query_param: the generic API's query parameter.
    fields: the generic API's result fields (SearXNG's are fixed).
    api_key_header: the header carrying `api_key`.
    api_key: the key itself ("" for none).
  """
  kind: str
  url: str
  params: str = ""
  query_param: str = "q"
  fields: ResultFields = ResultFields()
  api_key_header: str = "Authorization"
  api_key: str = ""

  def __post_init__(self):
    if self.kind not in SEARCH_KINDS:
      raise ValueError(f"search API kind must be one of {SEARCH_KINDS}, got {self.kind!r}")

  def request_url(self, query: str) -> str:
    """The URL that asks for `query`'s hits."""
    if self.kind == "searxng":
      parts = urllib.parse.urlsplit(self.url)
      path = parts.path.rstrip("/")
      base = urllib.parse.urlunsplit(parts._replace(
          path=path if path.endswith("/search") else path + "/search"))
      pairs = [("q", query), ("format", "json")]
    else:
      base, pairs = self.url, [(self.query_param, query)]
    pairs += urllib.parse.parse_qsl(self.params, keep_blank_values=True)
    separator = "&" if urllib.parse.urlsplit(base).query else "?"
    return base + separator + urllib.parse.urlencode(pairs)

  def headers(self) -> dict[str, str]:
    return {self.api_key_header: self.api_key} if self.api_key else {}

  @property
  def result_fields(self) -> ResultFields:
    return SEARXNG_FIELDS if self.kind == "searxng" else self.fields


def get_path(value: Any, path: str) -> Any:
  """The value at dotted `path` in JSON `value` (all-digit parts index lists); `MISSING`
  when some part is not there."""
  for part in path.split("."):
    if isinstance(value, Mapping) and part in value:
      value = value[part]
    elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
      value = value[int(part)]
    else:
      return MISSING
  return value


def _text(value: Any) -> str:
  """A hit's field as one line: strings and numbers as they are, anything else empty."""
  if isinstance(value, bool) or not isinstance(value, str | int | float):
    return ""
  return " ".join(str(value).split())


def parse_hits(payload: Any, fields: ResultFields) -> list[tuple[str, str, str]]:
  """(title, url, snippet) of each hit with a URL, in the API's order; a snippet is cut
  at `SNIPPET_CHARS`, a missing title is the URL. `WebError("bad_response")` when there
  is no list at `fields.results`."""
  results = get_path(payload, fields.results)
  if not isinstance(results, list):
    found = "nothing" if results is MISSING else type(results).__name__
    raise WebError("bad_response", f"expected a list of hits at {fields.results!r}, "
                   f"found {found}")
  hits = []
  for result in results:
    url = _text(get_path(result, fields.url))
    if not url:
      continue
    snippet = _text(get_path(result, fields.snippet))
    if len(snippet) > SNIPPET_CHARS:
      snippet = snippet[:SNIPPET_CHARS] + " ..."
    hits.append((_text(get_path(result, fields.title)) or url, url, snippet))
  return hits


def _json(response: Response) -> Any:
  try:
    return json.loads(response.body.decode(response.charset or "utf-8"))
  except (ValueError, LookupError, RecursionError) as e:
    raise WebError("bad_response", f"{response.url} did not answer JSON "
                   f"({response.content_type or 'no media type'}): {e}") from None


def format_hits(hits: list[tuple[str, str, str]]) -> str:
  return "\n".join(f"{k}. {title} ({url}): {snippet}"
                   for k, (title, url, snippet) in enumerate(hits, start=1))


def make_web_search_tool(fetcher: CachedFetcher, api: SearchApi, counters: WebCounters, *,
                         top_n: int = 5) -> Tool:
  """`search(query)` through `api` (module docstring); each failure adds one to its
  kind's counter."""

  def search(query: str) -> ToolResult:
    try:
      if not query.strip():
        raise WebError("bad_query", "empty query")
      if len(query) > MAX_QUERY_CHARS:
        raise WebError("bad_query", f"query has {len(query)} characters "
                       f"(limit {MAX_QUERY_CHARS})")
      response = fetcher.get(api.request_url(query), headers=api.headers())
      hits = parse_hits(_json(response), api.result_fields)[:top_n]
    except WebError as e:
      counters.add(e.kind)
      return error(f"search: {e}")
    if not hits:
      return ToolResult(ok=True, text="no results", data=[])
    return ToolResult(ok=True, text=format_hits(hits), data=hits)

  return Tool("search", "Search the web; returns titles, URLs and snippets.",
              {"type": "object", "properties": {"query": {"type": "string"}},
               "required": ["query"]}, search)
