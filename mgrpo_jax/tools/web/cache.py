"""A disk cache of web answers keyed by the request, so a run can be replayed offline.

A request is its method, its normalized URL and the media types it accepts; its key is
the SHA-256 of that as canonical JSON (`request_key`). Its outcome, a `Response` or a
failure's kind and message, is one JSON file `<folder>/<key[:2]>/<key>.json`, written
to a temporary file and renamed, so threads and processes can share a folder. Request
headers are neither part of the key nor written: an API key never reaches the folder.

`CachedFetcher` puts the cache in front of an `HttpClient`:

- live: a recorded response or permanent failure (a 404, a PDF, a body over the budget)
  is answered from the cache; a miss, or a recorded transient failure (a timeout, a 503),
  goes to the network and its outcome is recorded, whatever it is;
- replay (`replay_only`): every request is answered from the cache, failures included,
  so a replayed run reads the observations the recorded run read; a miss is a
  `replay_miss` failure, never a network call.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import tempfile
from collections.abc import Collection, Mapping
from typing import Any

from mgrpo_jax.tools.web.failures import WebCounters, WebError
from mgrpo_jax.tools.web.http_client import HttpClient, Response, normalize_url

_FORMAT = 1  # bump when the record's layout changes: older records become misses


def request_key(method: str, url: str, accept: Collection[str] | None) -> str:
  """The cache key (64 hex digits) of a request: equal requests give equal keys, in
  any process; `accept` counts as a set (None: any media type)."""
  request = {"format": _FORMAT, "method": method, "url": url,
             "accept": None if accept is None else sorted(set(accept))}
  text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
  return hashlib.sha256(text.encode("ascii")).hexdigest()


def _encode(outcome: Response | WebError) -> dict[str, Any]:
  if isinstance(outcome, WebError):
    return {"failure": {"kind": outcome.kind, "message": outcome.message,
                        "transient": outcome.transient}}
  return {"response": {"url": outcome.url, "status": outcome.status,
                       "content_type": outcome.content_type, "charset": outcome.charset,
                       "body": base64.b64encode(outcome.body).decode("ascii")}}


def _decode(record: Mapping[str, Any]) -> Response | WebError:
  if "failure" in record:
    failure = record["failure"]
    return WebError(failure["kind"], failure["message"], transient=failure["transient"])
  response = record["response"]
  return Response(response["url"], response["status"], response["content_type"],
                  response["charset"], base64.b64decode(response["body"]))


class ResponseCache:
  """The outcomes of requests under `folder` (module docstring)."""

  def __init__(self, folder: str | os.PathLike):
    self.folder = pathlib.Path(folder)

  def _path(self, key: str) -> pathlib.Path:
    return self.folder / key[:2] / f"{key}.json"

  def get(self, key: str) -> Response | WebError | None:
    """The recorded outcome of request `key`; None if there is none (or an unreadable one,
    which the next live answer replaces)."""
    try:
      record = json.loads(self._path(key).read_text(encoding="utf-8"))
      return _decode(record) if record.get("format") == _FORMAT else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
      return None

  def put(self, key: str, request: Mapping[str, Any], outcome: Response | WebError) -> None:
    """Records `outcome` as the answer to request `key` (`request`: what it was, for
    people reading the folder)."""
    path = self._path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"format": _FORMAT, "request": dict(request), **_encode(outcome)}
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=path.parent)
    try:
      with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(record, f, sort_keys=True)
      os.replace(tmp, path)
    except BaseException:
      pathlib.Path(tmp).unlink(missing_ok=True)
      raise


class CachedFetcher:
  """`HttpClient.get` through a `ResponseCache` (module docstring); with no cache, the
  client alone.

  Args:
    client: the network.
    cache: the recorded answers, or None.
    counters: counts `cache_hits`.
    replay_only: answer from the cache only (needs a cache).
  """

  def __init__(self, client: HttpClient, cache: ResponseCache | None, counters: WebCounters,
               *, replay_only: bool = False):
    if replay_only and cache is None:
      raise ValueError("replay_only needs a cache folder to replay from")
    self._client = client
    self._cache = cache
    self._counters = counters
    self._replay_only = replay_only

  def get(self, url: str, *, headers: Mapping[str, str] | None = None,
          accept: Collection[str] | None = None) -> Response:
    """The answer to GET `url` (`HttpClient.get`'s arguments); raises `WebError`."""
    if self._cache is None:
      return self._client.get(url, headers=headers, accept=accept)
    url = normalize_url(url)
    key = request_key("GET", url, accept)
    recorded = self._cache.get(key)
    if recorded is not None and (self._replay_only or not (
        isinstance(recorded, WebError) and recorded.transient)):
      self._counters.add("cache_hits")
      if isinstance(recorded, WebError):
        raise recorded
      return recorded
    if self._replay_only:
      raise WebError("replay_miss", f"no recorded answer to GET {url} in {self._cache.folder}")
    request = {"method": "GET", "url": url,
               "accept": None if accept is None else sorted(set(accept))}
    try:
      response = self._client.get(url, headers=headers, accept=accept)
    except WebError as e:
      self._cache.put(key, request, e)
      raise
    self._cache.put(key, request, response)
    return response
