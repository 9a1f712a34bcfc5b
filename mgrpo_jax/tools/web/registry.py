"""The web tools of a run from its `tools.web.*` settings: `search`, `visit` and the
offline `reason`, sharing one client, cache and set of counters.

`WebSettings` has one field per `tools.web` key (same names, same defaults; a unit test
checks them against the config's declaration), so `WebSettings(**config.tools.web)`
is the whole translation.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping

from mgrpo_jax.tools.base import Tool, ToolRegistry
from mgrpo_jax.tools.reason import DEFAULT_LIMITS, Limits, make_reason_tool
from mgrpo_jax.tools.web.cache import CachedFetcher, ResponseCache
from mgrpo_jax.tools.web.failures import WebCounters
from mgrpo_jax.tools.web.http_client import HttpClient, HttpSettings
from mgrpo_jax.tools.web.search_api import ResultFields, SearchApi, make_web_search_tool
from mgrpo_jax.tools.web.visit import make_web_visit_tool


@dataclasses.dataclass(frozen=True)
class WebSettings:
  """The web tools' settings: the meaning of each is its `tools.web.<name>` key's."""
  search_kind: str = "searxng"
  search_url: str = ""
  search_params: str = ""
  query_param: str = "q"
  api_key_env: str = ""
  api_key_header: str = "Authorization"
  results_field: str = "results"
  title_field: str = "title"
  url_field: str = "url"
  snippet_field: str = "content"
  timeout_s: float = 10.0
  max_bytes: int = 2_000_000
  retries: int = 2
  backoff_s: float = 0.5
  min_host_interval_s: float = 1.0
  cache_dir: str = ""
  replay_only: bool = False

  def search_api(self, environ: Mapping[str, str] = os.environ) -> SearchApi:
    """The search endpoint, its key read from `environ[api_key_env]` (a ValueError naming
    the variable when it is unset or empty; replay sends nothing, so needs no key)."""
    key = ""
    if self.api_key_env and not self.replay_only:
      key = environ.get(self.api_key_env, "")
      if not key:
        raise ValueError(f"the search API key's environment variable {self.api_key_env!r} "
                         "is unset or empty")
    return SearchApi(self.search_kind, self.search_url, self.search_params, self.query_param,
                     ResultFields(self.results_field, self.title_field, self.url_field,
                                  self.snippet_field),
                     self.api_key_header, key)

  def http(self) -> HttpSettings:
    return HttpSettings(self.timeout_s, self.max_bytes, self.retries, self.backoff_s,
                        self.min_host_interval_s)


class WebToolRegistry(ToolRegistry):
  """A `ToolRegistry` whose web tools count into `counters` (`WebCounters.scalars` are
  the metrics a run logs)."""

  def __init__(self, tools: list[Tool], counters: WebCounters):
    super().__init__(tools)
    self.counters = counters


def web_registry(settings: WebSettings, *, top_n: int = 5, visit_budget: int = 1500,
                 limits: Limits = DEFAULT_LIMITS,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 environ: Mapping[str, str] = os.environ) -> WebToolRegistry:
  """search (`top_n` hits), visit (`visit_budget` characters) and reason over the web of
  `settings`; `clock`/`sleep` drive the rate limit and the backoff, `environ` holds the
  API key."""
  counters = WebCounters()
  client = HttpClient(settings.http(), counters, clock=clock, sleep=sleep)
  cache = ResponseCache(settings.cache_dir) if settings.cache_dir else None
  fetcher = CachedFetcher(client, cache, counters, replay_only=settings.replay_only)
  return WebToolRegistry(
      [make_web_search_tool(fetcher, settings.search_api(environ), counters, top_n=top_n),
       make_web_visit_tool(fetcher, counters, budget_chars=visit_budget),
       make_reason_tool(limits)], counters)


def web_scalars(registry: object) -> dict[str, float]:
  """The web counters' metrics of `registry` ({} for a registry without web tools)."""
  return registry.counters.scalars() if isinstance(registry, WebToolRegistry) else {}
