"""Backoff, wait_for polling, deadline-bounded retries and GCS error classification.

Time is injected (a manual clock whose `sleep` advances it), so no test sleeps.
"""

from __future__ import annotations

import random

import pytest
import requests
from google.api_core import exceptions as gexc

from mgrpo_jax.store import StoreTimeoutError, StoreUnavailableError
from mgrpo_jax.store.backoff import Backoff, wait_for_keys
from mgrpo_jax.store.gcs import is_transient, parse_gcs_uri
from mgrpo_jax.store.retry import RetryPolicy, call_with_retry


class ManualClock:
  def __init__(self):
    self.now = 0.0
    self.sleeps: list[float] = []

  def __call__(self) -> float:
    return self.now

  def sleep(self, seconds: float) -> None:
    assert seconds >= 0
    self.sleeps.append(seconds)
    self.now += seconds


def test_backoff_delays_grow_with_jitter_and_cap() -> None:
  delays = Backoff(initial=0.1, multiplier=2.0, maximum=1.0).delays(random.Random(0))
  got = [next(delays) for _ in range(8)]
  nominal = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
  for delay, cap in zip(got, nominal, strict=True):
    assert cap / 2 <= delay <= cap
  assert len(set(got)) == len(got)  # jittered, not constant
  with pytest.raises(ValueError, match="initial"):
    Backoff(initial=2.0, maximum=1.0)


def test_wait_for_keys_polls_missing_keys_until_present() -> None:
  clock = ManualClock()
  appear_at = {"a": 0.0, "b": 0.3, "c": 1.0}
  polled: list[str] = []

  def exists(key: str) -> bool:
    polled.append(key)
    return clock.now >= appear_at[key]

  wait_for_keys(exists, ["a", "b", "c", "b"], 5.0, where="here", clock=clock,
                sleep=clock.sleep, backoff=Backoff(0.1, 2.0, 0.4))
  assert 1.0 <= clock.now < 1.5
  assert polled.count("a") == 1  # found keys are not polled again
  assert polled[:3] == ["a", "b", "c"]


def test_wait_for_keys_timeout_names_missing_keys() -> None:
  clock = ManualClock()
  with pytest.raises(StoreTimeoutError, match=r"2 key\(s\) in here: 'x', 'z'") as info:
    wait_for_keys(lambda k: k == "y", ["x", "y", "z"], 2.0, where="here", clock=clock,
                  sleep=clock.sleep)
  assert info.value.missing == ("x", "z")
  assert clock.now == pytest.approx(2.0)  # never sleeps past the timeout


def _flaky(failures: list[BaseException], clock: ManualClock, timeouts: list[float]):
  def attempt(timeout: float) -> str:
    timeouts.append(timeout)
    clock.now += 0.01
    if failures:
      raise failures.pop(0)
    return "done"
  return attempt


def test_transient_errors_are_retried_until_success() -> None:
  clock = ManualClock()
  timeouts: list[float] = []
  failures = [gexc.ServiceUnavailable("busy"), gexc.TooManyRequests("slow down"),
              requests.exceptions.ConnectionError("refused")]
  result = call_with_retry(_flaky(failures, clock, timeouts),
                           policy=RetryPolicy(deadline=10.0, request_timeout=3.0),
                           is_transient=is_transient, operation="op", clock=clock,
                           sleep=clock.sleep)
  assert result == "done" and len(timeouts) == 4 and len(clock.sleeps) == 3
  assert all(t <= 3.0 for t in timeouts)


def test_permanent_errors_propagate_at_once() -> None:
  clock = ManualClock()
  timeouts: list[float] = []
  with pytest.raises(gexc.Forbidden):
    call_with_retry(_flaky([gexc.Forbidden("no")], clock, timeouts), policy=RetryPolicy(),
                    is_transient=is_transient, operation="op", clock=clock,
                    sleep=clock.sleep)
  assert len(timeouts) == 1


def test_deadline_gives_clear_error_and_caps_request_timeout() -> None:
  clock = ManualClock()
  timeouts: list[float] = []
  failures = [gexc.InternalServerError("boom")] * 1000
  policy = RetryPolicy(deadline=2.0, request_timeout=30.0, backoff=Backoff(0.1, 2.0, 0.5))
  with pytest.raises(StoreUnavailableError,
                     match=r"GCS put of 'k' failed after \d+ attempt\(s\) over 2\.\ds "
                     r"\(deadline 2s\); last error: InternalServerError: 500 boom"):
    call_with_retry(_flaky(failures, clock, timeouts), policy=policy,
                    is_transient=is_transient, operation="GCS put of 'k'", clock=clock,
                    sleep=clock.sleep)
  assert timeouts[0] == 2.0 and all(t <= 2.0 for t in timeouts)
  assert clock.now < 2.1


@pytest.mark.parametrize("error, transient", [
    (gexc.TooManyRequests(""), True), (gexc.InternalServerError(""), True),
    (gexc.BadGateway(""), True), (gexc.ServiceUnavailable(""), True),
    (gexc.GatewayTimeout(""), True), (requests.exceptions.ConnectionError(), True),
    (requests.exceptions.ReadTimeout(), True), (ConnectionResetError(), True),
    (gexc.PreconditionFailed(""), False), (gexc.NotFound(""), False),
    (gexc.Forbidden(""), False), (gexc.BadRequest(""), False), (ValueError(), False),
])
def test_gcs_error_classification(error: BaseException, transient: bool) -> None:
  assert is_transient(error) == transient


@pytest.mark.parametrize("uri, parsed", [
    ("gs://bucket", ("bucket", "")), ("gs://bucket/", ("bucket", "")),
    ("gs://my-bucket.x/a/b/", ("my-bucket.x", "a/b")), ("gs://b12/r", ("b12", "r")),
])
def test_parse_gcs_uri(uri: str, parsed: tuple[str, str]) -> None:
  assert parse_gcs_uri(uri) == parsed
