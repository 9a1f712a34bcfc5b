"""S's `search` and `visit` on the web, beside the offline ones (`tools.backend=web`).

`search` asks a self-hosted SearXNG or a generic HTTP search API (`search_api`); `visit`
fetches a URL and extracts its main text with trafilatura (`visit`, `extract`). Both go
through one client (`http_client`: time and byte budgets, retries with backoff, a
per-host rate limit, `rate_limit`) behind a disk cache keyed by the request (`cache`),
which can replay a run offline exactly. Every failure is an error observation naming
its kind and a count in `WebCounters` (`failures`); nothing raises into the agent.
`registry` builds the run's tools from `WebSettings`. Standard library and trafilatura
only, like the rest of `tools`.
"""

from __future__ import annotations

from mgrpo_jax.tools.web.cache import CachedFetcher, ResponseCache, request_key
from mgrpo_jax.tools.web.failures import FAILURE_KINDS, WebCounters, WebError
from mgrpo_jax.tools.web.http_client import HttpClient, HttpSettings, Response, normalize_url
from mgrpo_jax.tools.web.registry import (
  WebSettings,
  WebToolRegistry,
  web_registry,
  web_scalars,
)
from mgrpo_jax.tools.web.search_api import (
  ResultFields,
  SearchApi,
  get_path,
  make_web_search_tool,
  parse_hits,
)
from mgrpo_jax.tools.web.visit import make_web_visit_tool

__all__ = ["FAILURE_KINDS", "CachedFetcher", "HttpClient", "HttpSettings", "Response",
           "ResponseCache", "ResultFields", "SearchApi", "WebCounters", "WebError",
           "WebSettings", "WebToolRegistry", "get_path", "make_web_search_tool",
           "make_web_visit_tool", "normalize_url", "parse_hits", "request_key",
           "web_registry", "web_scalars"]
