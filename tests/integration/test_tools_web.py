"""The web tools against a real HTTP server on a loopback port (`tests.support.web_site`):
both search APIs, page extraction, redirects, retries, the per-host rate limit, and
every failure as an error observation counted by its kind."""

from __future__ import annotations

import dataclasses
import socket

import pytest

from mgrpo_jax.tools.web import FAILURE_KINDS, WebSettings, web_registry
from tests.support.fake_clock import FakeClock
from tests.support.web_site import API_KEY, ARTICLE, BOILERPLATE, LONG_SNIPPET, WebSite


@pytest.fixture(scope="module")
def site():
  server = WebSite()
  yield server
  server.close()



def _registry(site: WebSite, clock: FakeClock | None = None, *, top_n: int = 5,
              visit_budget: int = 2000, **settings):
  clock = clock or FakeClock()
  base = WebSettings(search_url=site.url("/searxng"), timeout_s=0.3, max_bytes=20_000,
                     retries=0, backoff_s=0.25, min_host_interval_s=0.0)
  return web_registry(dataclasses.replace(base, **settings), top_n=top_n,
                      visit_budget=visit_budget, clock=clock, sleep=clock.sleep,
                      environ={"SEARCH_KEY": API_KEY})


def test_searxng_search_lists_hits_with_urls(site):
  registry = _registry(site)
  result = registry.call("search", {"query": "varn lighthouse"})
  assert result.ok
  assert result.text.splitlines() == [  # the hit without a URL is skipped
      f"1. The Lighthouse of Varn ({site.url('/page/lighthouse')}): "
      "Built in 1854 (varn lighthouse).",
      f"2. Long ({site.url('/page/plain')}): {LONG_SNIPPET[:300]} ..."]
  assert [hit[1] for hit in result.data] == [site.url("/page/lighthouse"),
                                             site.url("/page/plain")]
  assert registry.counters.failures() == dict.fromkeys(FAILURE_KINDS, 0)
  top_one = _registry(site, search_url=site.url("/searxng/search/"), top_n=1)
  assert top_one.call("search", {"query": "x"}).text.count("\n") == 0


def test_generic_api_maps_dotted_fields_and_sends_the_key(site):
  registry = _registry(site, search_kind="http", search_url=site.url("/api/find"),
                       query_param="query", api_key_env="SEARCH_KEY",
                       api_key_header="X-Api-Key", results_field="data.items",
                       title_field="meta.name", url_field="link", snippet_field="summary",
                       search_params="count=2")
  result = registry.call("search", {"query": "Varn"})
  assert result.ok and result.data == [
      ("Varn lighthouse", site.url("/page/lighthouse"), "About Varn"),
      ("1854", site.url("/page/plain"), "")]
  assert site.headers["/api/find"]["X-Api-Key"] == API_KEY
  keyless = _registry(site, search_kind="http", search_url=site.url("/api/find"))
  refused = keyless.call("search", {"query": "Varn"})
  assert not refused.ok and refused.text == (
      f"error: search: http_4xx: {site.url('/api/find')}?q=Varn answered HTTP 401 "
      "Unauthorized")


def test_visit_keeps_the_article_and_drops_the_boilerplate(site):
  registry = _registry(site)
  result = registry.call("visit", {"page": site.url("/page/lighthouse")})
  assert result.ok and result.text.splitlines() == ["The Lighthouse of Varn", *ARTICLE]
  assert not [phrase for phrase in BOILERPLATE if phrase in result.text]
  assert result.data == {"url": site.url("/page/lighthouse"), "title": "The Lighthouse of Varn"}
  redirected = registry.call("visit", {"page": site.url("/redirect")})
  assert redirected.ok and redirected.text == result.text
  assert redirected.data["url"] == site.url("/page/lighthouse")
  cut = _registry(site, visit_budget=60).call("visit", {"page": site.url("/page/plain")})
  assert cut.text == "\n".join(ARTICLE)[:60] + " [truncated]"


def test_every_failure_is_an_observation_counted_by_kind(site):
  registry = _registry(site)
  with socket.socket() as s:  # a port nothing listens on
    s.bind(("127.0.0.1", 0))
    refused_url = f"http://127.0.0.1:{s.getsockname()[1]}/"
  calls = [
      ("visit", site.url("/slow"), "timeout"),
      ("visit", refused_url, "connection"),
      ("visit", site.url("/missing"), "http_4xx"),
      ("visit", site.url("/busy"), "http_4xx"),
      ("visit", site.url("/broken"), "http_5xx"),
      ("visit", site.url("/pdf"), "content_type"),
      ("visit", site.url("/binary"), "content_type"),
      ("visit", site.url("/big"), "too_large"),
      ("visit", site.url("/big-stream"), "too_large"),
      ("visit", site.url("/page/empty"), "extraction_empty"),
      ("visit", site.url("/redirect-loop"), "redirect"),
      ("visit", site.url("/redirect-ftp"), "redirect"),
      ("visit", "ftp://127.0.0.1/file", "bad_url"),
      ("visit", "the lighthouse page", "bad_url"),
      ("visit", 3, "bad_url"),
      ("search", "   ", "bad_query"),
      ("search", "q" * 300, "bad_query"),
  ]
  for tool, arg, kind in calls:
    result = registry.call(tool, {"query" if tool == "search" else "page": arg})
    assert not result.ok and result.text.startswith(f"error: {tool}: {kind}: "), (arg, result)
  api = _registry(site, search_kind="http", search_url=site.url("/api/flat"),
                  results_field="data.items")
  html = _registry(site, search_kind="http", search_url=site.url("/api/html"))
  for other in (api, html):
    result = other.call("search", {"query": "x"})
    assert not result.ok and result.text.startswith("error: search: bad_response: ")
  expected = dict.fromkeys(FAILURE_KINDS, 0)
  for _, _, kind in calls:
    expected[kind] += 1
  assert registry.counters.failures() == expected
  assert html.counters.failures() == {**dict.fromkeys(FAILURE_KINDS, 0), "bad_response": 1}


def test_messages_name_what_happened(site):
  registry = _registry(site)
  texts = {path: registry.call("visit", {"page": site.url(path)}).text
           for path in ("/slow", "/missing", "/pdf", "/big", "/redirect-ftp")}
  assert texts == {
      "/slow": f"error: visit: timeout: {site.url('/slow')} gave no complete answer "
               "within 0.3 s",
      "/missing": f"error: visit: http_4xx: {site.url('/missing')} answered HTTP 404 "
                  "Not Found",
      "/pdf": f"error: visit: content_type: {site.url('/pdf')} is application/pdf, not one "
              "of application/xhtml+xml, text/html, text/plain",
      "/big": f"error: visit: too_large: {site.url('/big')} announces 50000 bytes "
              "(limit 20000)",
      "/redirect-ftp": f"error: visit: redirect: {site.url('/redirect-ftp')} redirects to "
                       "'ftp://127.0.0.1/file', not an http(s) URL"}


def test_transient_failures_are_retried_with_backoff(site):
  clock = FakeClock()
  registry = _registry(site, clock, retries=2)
  assert registry.call("visit", {"page": site.url("/flaky/a")}).ok
  assert site.hits["/flaky/a"] == 2 and clock.sleeps == [0.25]
  broken_before = site.hits["/broken"]
  result = registry.call("visit", {"page": site.url("/broken")})
  assert result.text.startswith("error: visit: http_5xx: ")
  assert site.hits["/broken"] - broken_before == 3 and clock.sleeps == [0.25, 0.25, 0.5]
  missing_before = site.hits["/missing"]
  registry.call("visit", {"page": site.url("/missing")})
  assert site.hits["/missing"] - missing_before == 1  # a 404 is not retried
  busy_before = site.hits["/busy"]
  registry.call("visit", {"page": site.url("/busy")})
  assert site.hits["/busy"] - busy_before == 3  # a 429 is
  assert {name: registry.counters.get(name) for name in ("requests", "retries")} == {
      "requests": 9, "retries": 5}
  assert registry.counters.failures() == {**dict.fromkeys(FAILURE_KINDS, 0),
                                          "http_5xx": 1, "http_4xx": 2}


def test_a_timeout_is_retried_then_reported(site):
  slow_before = site.hits["/slow"]
  registry = _registry(site, retries=1)
  result = registry.call("visit", {"page": site.url("/slow")})
  assert result.text.startswith("error: visit: timeout: ")
  assert site.hits["/slow"] - slow_before == 2
  assert registry.counters.failures()["timeout"] == 1


def test_requests_to_one_host_are_spaced_by_the_rate_limit(site):
  clock = FakeClock()
  registry = _registry(site, clock, min_host_interval_s=2.0, retries=1)
  page = site.url("/page/plain")
  for _ in range(3):
    assert registry.call("visit", {"page": page}).ok
  assert clock.sleeps == [2.0, 2.0]
  other_host = page.replace("127.0.0.1", "localhost")
  assert registry.call("visit", {"page": other_host}).ok and clock.sleeps == [2.0, 2.0]
  clock.now += 10.0  # long after the last request
  assert registry.call("visit", {"page": page}).ok and clock.sleeps == [2.0, 2.0]
  # a retry waits its backoff (0.25 s), then what is left of the host's interval
  clock.now += 10.0
  assert registry.call("visit", {"page": site.url("/flaky/rate")}).ok
  assert clock.sleeps == [2.0, 2.0, 0.25, 1.75]
