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
  rows = [[c.strip() for c in line.split("|")[1:-1]]
          for line in table.read_text().splitlines() if line.startswith("| tiny")]
  assert [r[1] for r in rows] == [
      "train 4x32", "train 4x32 (attention xla)",
      "train 4x32 (remat full, micro-batch 2), scanned layers", "decode 4x8 (prompt 8)"]
  for row in rows:
    assert float(row[2]) > 0 and float(row[4].replace(",", "")) > 0  # step s, tok/s
    assert row[-1].startswith("ok:"), row
  train, xla_train, memory, _ = rows
  # Model FLOP/s as a share of the matmul peer; the same loss whichever attention kernel.
  assert float(train[7].rstrip("%")) > 0 and float(xla_train[7].rstrip("%")) > 0
  assert train[-1] == xla_train[-1]
  assert memory[9] == ""  # the CPU backend keeps no allocator statistics
  assert "device: cpu; matmul peer (bf16, same run)" in proc.stdout


def test_a_row_that_raises_is_reported_failed_and_the_run_fails(tmp_path):
  """cuDNN attention on a CPU raises: its row says so and the script exits 1."""
  sys.path.insert(0, str(ROOT / "benchmarks"))
  try:
    import device_check
  finally:
    sys.path.pop(0)
  case = device_check.TrainCase("tiny", 4, 32, attention="cudnn", micro_batch=2)
  assert device_check.TrainCase.decode(case.encode()) == case
  row = device_check.guarded(case.model, case.label(), device_check.check_memory, case,
                             "bfloat16", 1)
  assert row["ok"] is False and "cuDNN" in row["check"], row
  table = device_check.format_table([row], 1e12, "cpu")
  assert "| tiny | train 4x32 (attention cudnn, micro-batch 2) |  |  |  |" in table
  assert "FAILED: RuntimeError: memory case exited 1" in table
