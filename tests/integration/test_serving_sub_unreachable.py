"""The main slice against an unreachable sub-agent service: retry, then fail naming it.

Down at start: a fixed `serving.port` where nothing listens; the main slice's first
delegation retries for `serving.deadline_s` and fails with the address in the message.
Dying mid-run: the sub slice is SIGKILLed after its step-0 checkpoint (before its ack);
the main slice, waiting for that ack, keeps checking the service and fails within its
deadline naming the address the sub slice had published.
"""

from __future__ import annotations

import json
import socket

from tests.support import trainer_harness


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_main_fails_naming_the_address_when_the_service_never_starts(tmp_path):
  port = _free_port()
  result = trainer_harness.launch(
      tmp_path / "run", "--config.experiment.num_steps=1", f"--config.serving.port={port}",
      "--config.serving.deadline_s=3", slice_name="main", timeout=180)
  assert result.returncode != 0
  assert "ServiceUnavailableError" in result.stdout, result.stdout[-3000:]
  assert f"127.0.0.1:{port} is unreachable" in result.stdout


def test_main_fails_naming_the_address_when_the_sub_slice_dies(tmp_path):
  workdir = tmp_path / "run"
  extra = ("--config.experiment.num_steps=3", "--config.serving.deadline_s=3")
  sub = trainer_harness.start(workdir, *extra, slice_name="sub", fault="sub:checkpoint:0")
  main = trainer_harness.start(workdir, *extra, slice_name="main")
  try:
    sub_out, _ = sub.communicate(timeout=180)
    main_out, _ = main.communicate(timeout=60)
  finally:
    for process in (sub, main):
      if process.poll() is None:
        process.kill()
        process.wait()
  assert sub.returncode == -9, sub_out[-3000:]
  address = json.loads((workdir / "sub" / "service.json").read_text())
  assert main.returncode != 0
  assert f"{address['host']}:{address['port']} is unreachable" in main_out, main_out[-3000:]
  assert "step 1/3" in main_out and "step 2/3" not in main_out
