"""The web tools' pure parts: result-field paths, the cache key and records, URL
normalization, the per-host rate limit, search request URLs, page extraction and the
settings' agreement with the config's `tools.web` keys."""

from __future__ import annotations

import dataclasses
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.config import SPEC, Field
from mgrpo_jax.tools.web import (
  FAILURE_KINDS,
  Response,
  ResponseCache,
  ResultFields,
  SearchApi,
  WebCounters,
  WebError,
  WebSettings,
  get_path,
  normalize_url,
  parse_hits,
  request_key,
)
from mgrpo_jax.tools.web.extract import page_text
from mgrpo_jax.tools.web.rate_limit import HostRateLimiter
from mgrpo_jax.tools.web.search_api import MISSING, SNIPPET_CHARS
from tests.support.fake_clock import FakeClock
from tests.support.web_site import ARTICLE, BOILERPLATE, PAGE_HTML

_NAMES = st.text(string.ascii_letters + "_", min_size=1, max_size=6)
# a dotted path: names, or list indices written as digits
_PARTS = st.lists(st.one_of(_NAMES, st.integers(0, 3)), min_size=1, max_size=4)


def _nest(parts: list, leaf):
  """A JSON value holding `leaf` at `parts` (an index i: a list with i fillers before it)."""
  value = leaf
  for part in reversed(parts):
    value = [None] * part + [value] if isinstance(part, int) else {part: value}
  return value


def _dotted(parts: list) -> str:
  return ".".join(str(p) for p in parts)


@given(_PARTS, st.one_of(st.text(), st.integers(), st.none()))
def test_get_path_finds_what_was_put_there(parts, leaf):
  assert get_path(_nest(parts, leaf), _dotted(parts)) == leaf


@given(_PARTS, _NAMES)
def test_get_path_misses_a_path_that_is_not_there(parts, extra):
  value = _nest(parts, "leaf")
  assert get_path(value, _dotted(parts) + "." + extra) is MISSING  # below a string
  assert get_path(value, "-" + extra + "." + _dotted(parts)) is MISSING  # no such key
  if isinstance(parts[-1], int):
    assert get_path(value, _dotted(parts[:-1] + [parts[-1] + 1])) is MISSING  # past the end


_FIELD_PATHS = st.lists(_NAMES, min_size=1, max_size=3).map(".".join)
_WORDS = st.text(string.ascii_letters + " \t\n", max_size=400)


@given(st.tuples(_FIELD_PATHS, _FIELD_PATHS, _FIELD_PATHS, _FIELD_PATHS).filter(
           lambda f: len({f[1].split(".")[0], f[2].split(".")[0], f[3].split(".")[0]}) == 3),
       st.lists(st.tuples(_WORDS, st.text(string.ascii_letters + ":/.", max_size=30),
                          _WORDS), max_size=6))
def test_parse_hits_maps_the_configured_fields(paths, hits):
  results, title, url, snippet = paths
  payload = _nest(results.split("."), [
      {**_nest(title.split("."), t), **_nest(url.split("."), u),
       **_nest(snippet.split("."), s)} for t, u, s in hits])
  parsed = parse_hits(payload, ResultFields(results, title, url, snippet))

  def cut(text: str) -> str:
    text = " ".join(text.split())
    return text[:SNIPPET_CHARS] + " ..." if len(text) > SNIPPET_CHARS else text

  assert parsed == [(" ".join(t.split()) or u, u, cut(s)) for t, u, s in hits if u]


def test_parse_hits_refuses_an_answer_without_a_hit_list():
  fields = ResultFields("data.items")
  for payload in ({"data": {}}, {"data": {"items": {"a": 1}}}, [], "text"):
    with pytest.raises(WebError, match="bad_response: expected a list of hits at 'data.items'"):
      parse_hits(payload, fields)
  assert parse_hits({"data": {"items": []}}, fields) == []


_REQUESTS = st.tuples(st.sampled_from(["GET", "HEAD"]), st.text(max_size=40),
                      st.one_of(st.none(), st.lists(st.sampled_from(
                          ["text/html", "text/plain", "application/json"]), max_size=3)))


@given(_REQUESTS, _REQUESTS)
def test_request_key_is_stable_and_distinct(first, second):
  method, url, accept = first
  key = request_key(method, url, accept)
  assert len(key) == 64 and set(key) <= set(string.hexdigits.lower())
  assert key == request_key(method, url, None if accept is None else list(reversed(accept)))

  def identity(request):
    return (request[0], request[1], None if request[2] is None else frozenset(request[2]))

  assert (key == request_key(*second)) == (identity(first) == identity(second))


def test_normalize_url():
  assert normalize_url("  HTTP://Example.COM:8080/a b/ü?q=ä b&x=1#frag ".replace(" b", "%20b")
                       ) == "http://example.com:8080/a%20b/%C3%BC?q=%C3%A4%20b&x=1"
  assert normalize_url("https://bücher.example/") == "https://xn--bcher-kva.example/"
  assert normalize_url("http://[::1]:9/x") == "http://[::1]:9/x"
  assert normalize_url("http://h") == "http://h/"
  for url in ("ftp://h/x", "h/x", "http:///x", "http://user:pw@h/", "http://h/a b",
              "http://h:99999/", "http://h/" + "x" * 2100, "", 7, None):
    with pytest.raises(WebError, match="^bad_url: "):
      normalize_url(url)


@given(st.text(string.ascii_letters + string.digits + "/%?=&._~-ü ", max_size=30))
def test_normalize_url_is_idempotent(tail):
  try:
    once = normalize_url("http://h.example/" + tail.strip())
  except WebError:
    return  # whitespace inside: refused, which is tested above
  assert normalize_url(once) == once



def test_rate_limit_spaces_one_host_and_leaves_others_alone():
  clock = FakeClock(now=100.0)
  limiter = HostRateLimiter(2.0, clock=clock, sleep=clock.sleep)
  waits = [limiter.wait("a"), limiter.wait("a"), limiter.wait("b"), limiter.wait("a")]
  assert waits == [0.0, 2.0, 0.0, 2.0] and clock.sleeps == [2.0, 2.0]
  clock.now += 0.5  # some of the interval passed doing other work
  assert limiter.wait("a") == 1.5
  clock.now += 10
  assert limiter.wait("a") == 0.0 and clock.sleeps == [2.0, 2.0, 1.5]
  assert HostRateLimiter(0.0, clock=clock, sleep=clock.sleep).wait("a") == 0.0


def test_search_request_urls():
  searxng = SearchApi("searxng", "http://localhost:8888", params="language=en")
  assert searxng.request_url("a b&c") == ("http://localhost:8888/search?q=a+b%26c&format=json"
                                          "&language=en")
  assert SearchApi("searxng", "http://s/x/search/").request_url("q").startswith(
      "http://s/x/search?q=q&")
  generic = SearchApi("http", "https://api.example/v1/find?v=2", query_param="query",
                      api_key_header="X-Key", api_key="k")
  assert generic.request_url("x") == "https://api.example/v1/find?v=2&query=x"
  assert generic.headers() == {"X-Key": "k"} and SearchApi("http", "http://a").headers() == {}
  with pytest.raises(ValueError, match="kind must be one of"):
    SearchApi("bing", "http://a")


def test_cache_records_round_trip(tmp_path):
  cache = ResponseCache(tmp_path)
  response = Response("http://h/x", 200, "text/html", "utf-8", bytes(range(256)))
  failure = WebError("http_5xx", "http://h/y answered HTTP 503", transient=True)
  cache.put("a" * 64, {"url": "http://h/x"}, response)
  cache.put("b" * 64, {"url": "http://h/y"}, failure)
  assert cache.get("a" * 64) == response
  got = cache.get("b" * 64)
  assert (got.kind, got.message, got.transient) == ("http_5xx", failure.message, True)
  assert cache.get("c" * 64) is None
  (tmp_path / "aa" / ("a" * 64 + ".json")).write_text("{not json")
  assert cache.get("a" * 64) is None  # unreadable: a miss the next live answer replaces


def test_extraction_keeps_the_article_and_drops_the_boilerplate():
  title, text = page_text(Response("http://h/p", 200, "text/html", "utf-8", PAGE_HTML))
  assert title == "The Lighthouse of Varn"
  assert all(paragraph in text for paragraph in ARTICLE)
  assert not [phrase for phrase in BOILERPLATE if phrase in text]
  plain = Response("http://h/t", 200, "text/plain", "", b" line one\nline two \n")
  assert page_text(plain) == ("", "line one\nline two")
  empty = Response("http://h/e", 200, "text/html", "", b"<html><body><script>x</script>")
  with pytest.raises(WebError, match=r"^extraction_empty: http://h/e: no main text"):
    page_text(empty)


def test_failures_and_counters():
  with pytest.raises(ValueError, match="unknown web failure kind 'oops'"):
    WebError("oops", "x")
  assert WebError("timeout", "x").transient and not WebError("http_4xx", "x").transient
  assert WebError("http_4xx", "429", transient=True).transient
  counters = WebCounters()
  counters.add("timeout")
  counters.add("timeout")
  counters.add("requests")
  assert counters.failures() == {kind: 2 * (kind == "timeout") for kind in FAILURE_KINDS}
  scalars = counters.scalars()
  assert scalars["tools/web/failures/timeout"] == 2.0 and scalars["tools/web/requests"] == 1.0
  assert len(scalars) == len(FAILURE_KINDS) + 3


def test_settings_match_the_config_keys():
  """`WebSettings(**config.tools.web)` is the whole translation: same names, same
  defaults."""
  spec = SPEC["tools"]["web"]
  assert all(isinstance(field, Field) for field in spec.values())
  assert {f.name: f.default for f in dataclasses.fields(WebSettings)} == {
      name: field.default for name, field in spec.items()}
  assert SPEC["tools"]["web"]["search_kind"].choices == ("searxng", "http")


def test_settings_read_the_api_key_from_the_environment():
  settings = WebSettings(search_kind="http", search_url="http://a", api_key_env="MY_KEY",
                         api_key_header="X-Key")
  assert settings.search_api({"MY_KEY": "k"}).headers() == {"X-Key": "k"}
  with pytest.raises(ValueError, match="environment variable 'MY_KEY' is unset or empty"):
    settings.search_api({})
  replay = dataclasses.replace(settings, replay_only=True, cache_dir="c")
  assert replay.search_api({}).headers() == {}  # a replay sends nothing: no key needed
