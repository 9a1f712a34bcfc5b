"""`visit(page)` on the web: a URL's main text, within the page budget.

The argument is a URL (an `http://` or `https://` one, as the search's hits show). The
page is fetched through the `CachedFetcher` (time and byte budgets, retries, the host's
rate limit, the cache) accepting HTML and plain text only, and its main text extracted
(`extract.page_text`). The observation mirrors the offline visit's: the text, cut at
`budget_chars` with " [truncated]"; `data` holds the final URL (after redirects) and the
page's title. A failure is an observation "error: visit: <kind>: ..." and one more in
its kind's counter.
"""

from __future__ import annotations

from mgrpo_jax.tools.base import Tool, ToolResult, error
from mgrpo_jax.tools.web.cache import CachedFetcher
from mgrpo_jax.tools.web.extract import PAGE_TYPES, page_text
from mgrpo_jax.tools.web.failures import WebCounters, WebError


def make_web_visit_tool(fetcher: CachedFetcher, counters: WebCounters, *,
                        budget_chars: int = 1500) -> Tool:
  """`visit(page)` (module docstring)."""

  def visit(page: int | str) -> ToolResult:
    try:
      if not isinstance(page, str):
        raise WebError("bad_url", f"expected a URL (http:// or https://), got {page!r}")
      response = fetcher.get(page, accept=PAGE_TYPES)
      title, text = page_text(response)
    except WebError as e:
      counters.add(e.kind)
      return error(f"visit: {e}")
    if len(text) > budget_chars:
      text = text[:budget_chars] + " [truncated]"
    return ToolResult(ok=True, text=text, data={"url": response.url, "title": title})

  return Tool("visit", "Open a web page by URL; returns its main text (truncated).",
              {"type": "object", "properties": {"page": {"type": ["string", "integer"]}},
               "required": ["page"]}, visit)
