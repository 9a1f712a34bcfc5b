"""benchmarks/device_check.sh: its shell syntax, and its Python part on CPU (--smoke)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_check.sh"


def test_script_parses():
  proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr


def test_smoke_run_checks_pass_and_write_the_table(tmp_path):
  table = tmp_path / "table.md"
  env = dict(os.environ, PYTHON=sys.executable)
  proc = subprocess.run(["bash", str(SCRIPT), "--smoke", "--out", str(table)], env=env,
                        capture_output=True, text=True, cwd=tmp_path, timeout=240)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  rows = [line for line in table.read_text().splitlines() if line.startswith("| tiny")]
  assert len(rows) == 2, table.read_text()
  train, decode = (r.split("|")[1:-1] for r in rows)
  assert train[1].strip() == "train 4x32" and decode[1].strip() == "decode 4x8 (prompt 8)"
  for row in (train, decode):
    assert float(row[2]) > 0 and float(row[4].replace(",", "")) > 0  # step s, tok/s
    assert row[-1].strip().startswith("ok:"), row
  assert float(train[7].rstrip("% ")) > 0  # model FLOP/s as a share of the matmul peer
  assert "device: cpu; matmul peer (bf16, same run)" in proc.stdout
