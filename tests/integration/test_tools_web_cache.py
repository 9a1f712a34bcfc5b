"""The web tools' disk cache against a real HTTP server: a recorded run replayed with the
server gone gives byte-identical observations, a replay miss is an observation, a live
run answers recorded pages from the cache and asks again after a transient failure, and
no API key reaches the cache folder."""

from __future__ import annotations

import dataclasses

import pytest

from mgrpo_jax.tools.web import FAILURE_KINDS, WebSettings, web_registry
from tests.support.web_site import API_KEY, WebSite


@pytest.fixture
def site():
  server = WebSite()
  yield server
  server.close()


def _registry(cache_dir, **settings):
  base = WebSettings(search_url="http://unused.invalid", cache_dir=str(cache_dir),
                     timeout_s=0.3, max_bytes=20_000, retries=0, min_host_interval_s=0.0)
  return web_registry(dataclasses.replace(base, **settings), top_n=3, visit_budget=500,
                      environ={"SEARCH_KEY": API_KEY})


def _script(site: WebSite) -> list[tuple[str, dict]]:
  """A run's calls: searches, visits, and visits that fail in every recorded way."""
  return [("search", {"query": "varn lighthouse"}),
          ("search", {"query": "keepers"}),
          *(("visit", {"page": site.url(path)}) for path in (
              "/page/lighthouse", "/page/plain", "/redirect", "/missing", "/broken", "/slow",
              "/pdf", "/big", "/page/empty", "/redirect-loop")),
          ("visit", {"page": "not a url"})]


def test_a_recorded_run_replays_byte_identically_without_the_server(site, tmp_path):
  live = _registry(tmp_path, search_url=site.url("/searxng"))
  calls = _script(site)
  recorded = [live.call(name, args) for name, args in calls]
  assert sum(r.ok for r in recorded) == 5 and not recorded[-2].ok
  site.close()
  replay = _registry(tmp_path, search_url=site.url("/searxng"), replay_only=True)
  replayed = [replay.call(name, args) for name, args in calls]
  assert [(r.ok, r.text.encode(), r.data) for r in replayed] == [
      (r.ok, r.text.encode(), r.data) for r in recorded]
  assert replay.counters.failures() == live.counters.failures()
  assert replay.counters.get("requests") == 0
  assert replay.counters.get("cache_hits") == len(calls) - 1  # the bad URL is never asked
  missed = replay.call("visit", {"page": site.url("/page/never-visited")})
  assert not missed.ok and missed.text == (
      f"error: visit: replay_miss: no recorded answer to GET "
      f"{site.url('/page/never-visited')} in {tmp_path}")
  assert replay.counters.failures()["replay_miss"] == 1


def test_a_live_run_reads_recorded_pages_and_asks_again_after_a_transient_failure(
    site, tmp_path):
  live = _registry(tmp_path)
  page = {"page": site.url("/page/lighthouse")}
  first, second = live.call("visit", page), live.call("visit", page)
  assert first.text == second.text and site.hits["/page/lighthouse"] == 1
  for _ in range(2):
    live.call("visit", {"page": site.url("/missing")})
  assert site.hits["/missing"] == 1  # a 404 is a recorded answer too
  flaky = {"page": site.url("/flaky/once")}
  assert live.call("visit", flaky).text.startswith("error: visit: http_5xx: ")
  assert live.call("visit", flaky).ok and site.hits["/flaky/once"] == 2
  assert {name: live.counters.get(name) for name in ("requests", "cache_hits")} == {
      "requests": 4, "cache_hits": 2}
  assert live.counters.failures() == {**dict.fromkeys(FAILURE_KINDS, 0), "http_4xx": 2,
                                      "http_5xx": 1}
  replay = _registry(tmp_path, replay_only=True)
  assert replay.call("visit", flaky).ok  # the latest answer is the one recorded


def test_the_api_key_never_reaches_the_cache(site, tmp_path):
  registry = _registry(tmp_path, search_kind="http", search_url=site.url("/api/find"),
                       query_param="query", api_key_env="SEARCH_KEY",
                       api_key_header="X-Api-Key", results_field="data.items",
                       title_field="meta.name", url_field="link", snippet_field="summary")
  assert registry.call("search", {"query": "Varn"}).ok
  files = list(tmp_path.rglob("*.json"))
  assert len(files) == 1 and API_KEY.encode() not in files[0].read_bytes()
  replay = _registry(tmp_path, search_kind="http", search_url=site.url("/api/find"),
                     query_param="query", replay_only=True, results_field="data.items",
                     title_field="meta.name", url_field="link", snippet_field="summary")
  assert replay.call("search", {"query": "Varn"}).data[0][0] == "Varn lighthouse"
