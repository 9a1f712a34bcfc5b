"""GET over HTTP(S) within a time and a byte budget, retried with backoff, rate-limited
per host.

`HttpClient.get(url)` returns a `Response` (a 2xx answer, after at most urllib's 10
redirects) or raises `WebError` naming what went wrong (`failures.FAILURE_KINDS`): a
URL that is not http(s) with a host (`bad_url`, before any request), no complete answer
within `timeout_s` (`timeout`), a refused, reset or unresolvable connection
(`connection`), a 4xx or 5xx status (`http_4xx`, `http_5xx`), a redirect loop or a
redirect off http(s) (`redirect`), a media type outside `accept` (`content_type`, before
the body is read), a body over `max_bytes` (`too_large`, announced or read). Transient
failures (timeouts, connections, 5xx, 408, 429) are tried again `retries` times after
`backoff_s * 2**n` seconds; every attempt first waits for its host's slot
(`HostRateLimiter`).

URLs are normalized first (`normalize_url`): the host IDNA-encoded and lower-cased,
other non-ASCII characters percent-encoded, the fragment dropped; a URL with
credentials is refused.
"""

from __future__ import annotations

import dataclasses
import http.client
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Mapping

from mgrpo_jax.tools.web.failures import TRANSIENT_STATUSES, WebCounters, WebError
from mgrpo_jax.tools.web.rate_limit import HostRateLimiter

MAX_URL_CHARS = 2048
MAX_BACKOFF_S = 30.0
USER_AGENT = "mgrpo_jax-web-tools/0.1"
_CHUNK = 64 * 1024
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"


@dataclasses.dataclass(frozen=True)
class Response:
  """A 2xx answer.

  Attributes:
    url: where it came from, after redirects.
    status: the HTTP status.
    content_type: the media type, lower case without parameters ("" if none was sent).
    charset: the charset the server named ("" if none).
    body: at most the client's `max_bytes` bytes.
  """
  url: str
  status: int
  content_type: str
  charset: str
  body: bytes


@dataclasses.dataclass(frozen=True)
class HttpSettings:
  """One client's budgets (`tools.web.*`).

  Attributes:
    timeout_s: seconds one attempt may take to connect, answer and send its body.
    max_bytes: the largest body read; a larger one is a `too_large` failure.
    retries: attempts after the first, for transient failures only.
    backoff_s: the wait before the first retry; each later one doubles it (at most
      `MAX_BACKOFF_S`).
    min_host_interval_s: seconds between the starts of two requests to one host.
  """
  timeout_s: float = 10.0
  max_bytes: int = 2_000_000
  retries: int = 2
  backoff_s: float = 0.5
  min_host_interval_s: float = 1.0


def normalize_url(url: object) -> str:
  """`url` as the client requests it (module docstring); `WebError("bad_url")` naming
  what is wrong with it."""
  if not isinstance(url, str) or not url.strip():
    raise WebError("bad_url", f"expected an http(s) URL, got {url!r}")
  url = url.strip()
  if len(url) > MAX_URL_CHARS:
    raise WebError("bad_url", f"the URL has {len(url)} characters (limit {MAX_URL_CHARS})")
  if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
    raise WebError("bad_url", f"{url!r} contains whitespace or control characters")
  parts = urllib.parse.urlsplit(url)
  if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
    raise WebError("bad_url", f"{url!r} is not an http(s) URL with a host")
  if parts.username is not None or parts.password is not None:
    raise WebError("bad_url", f"{parts.scheme}://{parts.hostname}...: credentials in a URL "
                   "are refused")
  try:
    port = parts.port
    host = parts.hostname.encode("idna").decode("ascii")
  except (ValueError, UnicodeError) as e:
    raise WebError("bad_url", f"{url!r}: {e}") from None
  netloc = f"[{host}]" if ":" in host else host
  netloc += f":{port}" if port is not None else ""
  return urllib.parse.urlunsplit((parts.scheme.lower(), netloc,
                                  urllib.parse.quote(parts.path, safe=_PATH_SAFE) or "/",
                                  urllib.parse.quote(parts.query, safe=_QUERY_SAFE), ""))


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
  """urllib's redirects, refused off http(s) (urllib alone would follow ftp://)."""

  def redirect_request(self, req, fp, code, msg, headers, newurl):
    if urllib.parse.urlsplit(newurl).scheme.lower() not in ("http", "https"):
      raise WebError("redirect", f"{req.full_url} redirects to {newurl!r}, not an http(s) URL")
    return super().redirect_request(req, fp, code, msg, headers, newurl)


def _status_error(url: str, status: int, reason: str) -> WebError:
  if 300 <= status < 400:
    return WebError("redirect", f"{url} answered HTTP {status} {reason}".rstrip())
  kind = "http_5xx" if status >= 500 else "http_4xx"
  return WebError(kind, f"{url} answered HTTP {status} {reason}".rstrip(),
                  transient=status >= 500 or status in TRANSIENT_STATUSES)


def _network_error(url: str, exc: BaseException, timeout_s: float) -> WebError:
  """The `WebError` of an exception raised while connecting or reading."""
  reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
  if isinstance(reason, TimeoutError):
    return WebError("timeout", f"{url} gave no complete answer within {timeout_s:g} s")
  if isinstance(reason, socket.gaierror):
    return WebError("connection", f"{url}: cannot resolve the host ({reason})")
  if isinstance(reason, ConnectionRefusedError):
    return WebError("connection", f"{url}: connection refused")
  if isinstance(reason, ssl.SSLCertVerificationError):
    return WebError("connection", f"{url}: TLS certificate rejected ({reason})",
                    transient=False)
  return WebError("connection", f"{url}: {type(reason).__name__}: {reason}")


class HttpClient:
  """The module docstring's GET, shared by the threads of a run.

  Args:
    settings: the budgets.
    counters: counts `requests` (attempts) and `retries`.
    clock, sleep: of the rate limit and the backoff (injectable for tests); the time
      budget of an attempt is measured on the real monotonic clock.
  """

  def __init__(self, settings: HttpSettings, counters: WebCounters, *,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep):
    self.settings = settings
    self._counters = counters
    self._sleep = sleep
    self._limiter = HostRateLimiter(settings.min_host_interval_s, clock=clock, sleep=sleep)
    self._opener = urllib.request.build_opener(_RedirectHandler)

  def get(self, url: str, *, headers: Mapping[str, str] | None = None,
          accept: Collection[str] | None = None) -> Response:
    """The answer to GET `url` (module docstring); `accept`: the media types allowed
    (None: any; a response without a media type always passes)."""
    url = normalize_url(url)
    host = urllib.parse.urlsplit(url).netloc
    attempt = 0
    while True:
      self._limiter.wait(host)
      self._counters.add("requests")
      try:
        return self._attempt(url, headers or {}, accept)
      except WebError as e:
        if not e.transient or attempt == self.settings.retries:
          raise
      self._counters.add("retries")
      self._sleep(min(self.settings.backoff_s * 2 ** attempt, MAX_BACKOFF_S))
      attempt += 1

  def _attempt(self, url: str, headers: Mapping[str, str],
               accept: Collection[str] | None) -> Response:
    timeout = self.settings.timeout_s
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **headers})
    try:
      with self._opener.open(request, timeout=timeout) as answer:
        media = (answer.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if accept is not None and media and media not in accept:
          raise WebError("content_type", f"{answer.geturl()} is {media}, not one of "
                         f"{', '.join(sorted(accept))}")
        body = self._read(answer, deadline)
        return Response(answer.geturl(), answer.status, media,
                        answer.headers.get_content_charset() or "", body)
    except urllib.error.HTTPError as e:
      e.close()
      raise _status_error(url, e.code, str(e.reason)) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
      raise _network_error(url, e, timeout) from None

  def _read(self, answer: http.client.HTTPResponse, deadline: float) -> bytes:
    """The body, within the byte budget and the attempt's deadline."""
    limit, url = self.settings.max_bytes, answer.geturl()
    announced = answer.headers.get("Content-Length", "")
    if announced.isdigit() and int(announced) > limit:
      raise WebError("too_large", f"{url} announces {int(announced)} bytes "
                     f"(limit {limit})")
    chunks, size = [], 0
    while chunk := answer.read1(_CHUNK):
      size += len(chunk)
      if size > limit:
        raise WebError("too_large", f"{url} sent more than {limit} bytes")
      if time.monotonic() > deadline:
        raise WebError("timeout", f"{url} gave no complete answer within "
                       f"{self.settings.timeout_s:g} s")
      chunks.append(chunk)
    return b"".join(chunks)
