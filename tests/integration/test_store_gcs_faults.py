"""GCSStore under faults: emulator restarts, a dead server, and lost upload responses.

All faults are real: the fake-gcs-server process is stopped and restarted on the same
port and data folder, or a TCP proxy between client and server closes the connection
after the server has answered (so the upload landed but its response was lost).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from mgrpo_jax.store import StoreConflictError, StoreUnavailableError
from mgrpo_jax.store.backoff import Backoff
from mgrpo_jax.store.emulator import FakeGcsEmulator
from mgrpo_jax.store.gcs import GCSStore
from mgrpo_jax.store.retry import RetryPolicy

FAST_BACKOFF = Backoff(initial=0.05, multiplier=2.0, maximum=0.4)


def _store(bucket: str, deadline: float) -> GCSStore:
  return GCSStore(bucket, "faults", retry_policy=RetryPolicy(
      deadline=deadline, request_timeout=5.0, backoff=FAST_BACKOFF))


def _restart_later(emulator: FakeGcsEmulator, delay: float) -> threading.Thread:
  thread = threading.Thread(target=lambda: (time.sleep(delay), emulator.start()))
  thread.start()
  return thread


def test_operations_survive_emulator_restart(restartable_gcs_emulator: FakeGcsEmulator
                                             ) -> None:
  emulator = restartable_gcs_emulator
  emulator.create_bucket("faults")
  store = _store("faults", deadline=30.0)
  store.put("before", b"kept across restarts")
  operations: list[tuple[str, Callable[[], object], object]] = [
      ("put", lambda: store.put("during", b"new"), None),
      ("get", lambda: store.get("before"), b"kept across restarts"),
      ("exists", lambda: store.exists("during"), True),
      ("list", lambda: store.list(), ["before", "during"]),
      ("reput", lambda: store.put("during", b"new"), None),
  ]
  for name, operation, expected in operations:
    emulator.stop()
    restart = _restart_later(emulator, delay=0.5)
    try:
      assert operation() == expected, name
    finally:
      restart.join()
  with pytest.raises(StoreConflictError, match="'during'"):
    store.put("during", b"different")


def test_dead_server_fails_after_deadline(restartable_gcs_emulator: FakeGcsEmulator) -> None:
  restartable_gcs_emulator.create_bucket("faults")
  store = _store("faults", deadline=1.0)
  restartable_gcs_emulator.stop()
  for operation, call in [("put", lambda: store.put("runs/r/k", b"x")),
                          ("get", lambda: store.get("runs/r/k")),
                          ("exists", lambda: store.exists("runs/r/k"))]:
    start = time.monotonic()
    with pytest.raises(StoreUnavailableError) as info:
      call()
    assert time.monotonic() - start >= 1.0
    message = str(info.value)
    assert f"GCS {operation} of 'runs/r/k' in gs://faults/faults failed after" in message
    assert "deadline 1s" in message and "ConnectionError" in message


class _DropResponseProxy:
  """TCP proxy that can close the client connection when an upload's response arrives.

  Only responses to uploads are dropped (the storage client also sends background
  bucket-metadata requests, which pass through untouched).
  """

  _REQUEST_LINES = (b"GET ", b"POST ", b"PUT ", b"PATCH ", b"DELETE ", b"HEAD ")

  def __init__(self, upstream_port: int):
    self.upstream_port = upstream_port
    self.drops_pending = 0
    self.dropped = 0
    self.uploads_seen = 0
    self._lock = threading.Lock()
    self._listener = socket.create_server(("127.0.0.1", 0))
    self.port = self._listener.getsockname()[1]
    threading.Thread(target=self._accept, daemon=True).start()

  def close(self) -> None:
    self._listener.close()

  def _accept(self) -> None:
    while True:
      try:
        client, _ = self._listener.accept()
        server = socket.create_connection(("127.0.0.1", self.upstream_port))
      except OSError:
        return
      state = {"upload": False}
      for args in ((client, server, True, state), (server, client, False, state)):
        threading.Thread(target=self._pump, args=args, daemon=True).start()

  def _pump(self, source: socket.socket, sink: socket.socket, to_server: bool,
            state: dict[str, bool]) -> None:
    try:
      while chunk := source.recv(65536):
        with self._lock:
          if to_server and chunk.startswith(self._REQUEST_LINES):
            state["upload"] = chunk.startswith(b"POST /upload/")
            self.uploads_seen += state["upload"]
          drop = not to_server and state["upload"] and self.drops_pending > 0
          if drop:
            self.drops_pending -= 1
            self.dropped += 1
        if drop:
          break
        sink.sendall(chunk)
    except OSError:
      pass
    for s in (source, sink):
      try:
        s.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass
      s.close()


@pytest.fixture
def drop_proxy(gcs_emulator: FakeGcsEmulator, gcs_bucket: str,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[_DropResponseProxy]:
  proxy = _DropResponseProxy(gcs_emulator.port)
  monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{proxy.port}")
  yield proxy
  proxy.close()


def test_lost_upload_response_is_not_a_conflict(drop_proxy: _DropResponseProxy,
                                                gcs_bucket: str) -> None:
  store = _store(gcs_bucket, deadline=20.0)
  drop_proxy.drops_pending = 1
  store.put("runs/r/step_00000000/outcomes", b"payload")  # landed; response lost; retried
  assert drop_proxy.dropped == 1
  assert drop_proxy.uploads_seen == 2
  assert store.get("runs/r/step_00000000/outcomes") == b"payload"

  drop_proxy.drops_pending = 1
  with pytest.raises(StoreConflictError, match="step_00000000/outcomes"):
    store.put("runs/r/step_00000000/outcomes", b"other payload")
  assert drop_proxy.dropped == 2
