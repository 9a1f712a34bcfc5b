"""What can go wrong on the web, as an error the tools turn into an observation, and the
run's counters of it.

Every failure has a kind from `FAILURE_KINDS`; a tool reports it to the agent as
`ToolResult(ok=False, text="error: <tool>: <kind>: ...")` and adds one to its kind's
counter, so a run can log how often each went wrong (`WebCounters.scalars`).
"""

from __future__ import annotations

import collections
import threading

FAILURE_KINDS = (
  "bad_url",  # not an http(s) URL with a host, or too long
  "bad_query",  # an empty or too long search query
  "timeout",  # no complete answer within the time budget
  "connection",  # refused, reset, unknown host, cut short
  "http_4xx",  # the server refused the request (404, 403, 429, ...)
  "http_5xx",  # the server failed (500, 503, ...)
  "redirect",  # a redirect loop, or a redirect off http(s)
  "content_type",  # not a page (a PDF, an image, a binary)
  "too_large",  # a body over the byte budget
  "extraction_empty",  # a page with no main text
  "bad_response",  # a search answer that is not JSON or has no result list
  "replay_miss",  # replay mode, and the cache holds no answer to the request
)
# Kinds a later attempt may not repeat: retried with backoff, and tried again by a live
# run even when the cache recorded them.
TRANSIENT_KINDS = frozenset({"timeout", "connection", "http_5xx"})
TRANSIENT_STATUSES = frozenset({408, 429})  # 4xx answers that mean "try again later"


class WebError(Exception):
  """A failed web request or page: `kind` (one of `FAILURE_KINDS`) and what happened.

  `transient` marks a failure a retry may cure (`TRANSIENT_KINDS`, 408 and 429).
  """

  def __init__(self, kind: str, message: str, *, transient: bool | None = None):
    if kind not in FAILURE_KINDS:
      raise ValueError(f"unknown web failure kind {kind!r}; expected one of {FAILURE_KINDS}")
    super().__init__(f"{kind}: {message}")
    self.kind = kind
    self.message = message
    self.transient = kind in TRANSIENT_KINDS if transient is None else transient


class WebCounters:
  """Thread-safe counts of one set of web tools since they were made: failed calls per
  kind, network attempts (`requests`), retried attempts (`retries`) and answers read
  from the cache (`cache_hits`)."""

  def __init__(self):
    self._lock = threading.Lock()
    self._counts: collections.Counter[str] = collections.Counter()

  def add(self, name: str) -> None:
    with self._lock:
      self._counts[name] += 1

  def failures(self) -> dict[str, int]:
    """{kind: failed calls} over every kind of `FAILURE_KINDS` (zeros included)."""
    with self._lock:
      return {kind: self._counts[kind] for kind in FAILURE_KINDS}

  def get(self, name: str) -> int:
    with self._lock:
      return self._counts[name]

  def scalars(self) -> dict[str, float]:
    """The counts as metrics: `tools/web/failures/<kind>`, `tools/web/requests`,
    `tools/web/retries`, `tools/web/cache_hits`."""
    with self._lock:
      out = {f"tools/web/failures/{kind}": float(self._counts[kind]) for kind in FAILURE_KINDS}
      out.update({f"tools/web/{name}": float(self._counts[name])
                  for name in ("requests", "retries", "cache_hits")})
    return out
