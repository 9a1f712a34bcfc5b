"""`tpu_run.py --dry_run`: the memory plan of Qwen2.5-7B on 64 chips from an 8-device host."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def dry_run(*args):
  return subprocess.run([sys.executable, str(ROOT / "launch" / "tpu_run.py"), "--dry_run",
                         *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def _bytes(text: str, line: str) -> int:
  match = re.search(rf"^{re.escape(line)}\s+([\d,]+)\s", text, re.MULTILINE)
  assert match, f"no {line!r} line in:\n{text}"
  return int(match.group(1).replace(",", ""))


def test_qwen2_5_7b_on_64_chips_prints_the_analytic_parameter_bytes():
  proc = dry_run("--slice=main", "--config.main.model.preset=qwen2_5_7b",
                 "--config.main.model.dtype=bfloat16", "--config.main.mesh.fsdp=16",
                 "--config.main.mesh.tensor=4", "--config.main.limits.max_context=32768",
                 "--dry_run_hbm_gib=95", "--dry_run_platform=tpu")
  assert proc.returncode == 0, proc.stderr
  out = proc.stdout
  assert "mesh data=1 fsdp=16 tensor=4 (64 devices)" in out
  assert "sub-agent S" not in out  # --slice=main plans M only
  # By hand: matrices / (fsdp * tensor), q/k/v biases / tensor, norms replicated; float32.
  v, d, layers, f, q, kv = 152064, 3584, 28, 18944, 3584, 512
  matrices = 2 * v * d + layers * (2 * d * q + 2 * d * kv + 3 * d * f)
  expected = 4 * (matrices // 64 + layers * (q + 2 * kv) // 4 + (2 * layers + 1) * d)
  assert _bytes(out, "parameters") == expected
  assert abs(expected - 7_615_616_512 * 4 / 64) / expected < 2e-3
  assert 0 <= _bytes(out, "optimizer state") - 2 * expected < 64
  # KV cache: 2 x L x (4 kv heads / 4) x 128 x 32768 slots x (16 rollouts / 16) x 2 bytes.
  assert _bytes(out, "kv cache") == 2 * 28 * 1 * 128 * 32768 * 1 * 2
  assert re.search(r"layers\.\*\.mlp\.down_proj\.kernel\s+28\s+\(18944, 3584\)\s+"
                   r"P\('tensor', 'fsdp'\)\s+\(4736, 224\)", out)
  assert re.search(r"embedding\s+1\s+\(152064, 3584\)\s+P\('tensor', 'fsdp'\)", out)
  # head_dim 128, 32768 tokens, bfloat16: splash attention on a TPU, which keeps the
  # softmax statistics of each layer, 28 x 1 row x 7 heads x 32768 float32 per device,
  # where XLA's scores would be 57 x 7 x 32768^2 x 4 bytes (about 1.7 TB).
  assert "on tpu: attention splash, remat none, log-prob chunk 64" in out
  assert _bytes(out, "attention") == 28 * 7 * 32768 * 4
  # Without rematerialisation a 32k row's saved activations alone exceed a v5p chip.
  assert _bytes(out, "activations (saved)") > 95 * 2**30
  assert re.search(r"peak vs 95 GiB HBM\s+[\d.]+%\s+does NOT fit", out)


def test_both_agents_and_a_verdict_that_does_not_fit():
  proc = dry_run("--slice=all", "--config.sub.model.preset=qwen2_5_7b",
                 "--dry_run_hbm_gib=16")
  assert proc.returncode == 0, proc.stderr
  main, sub = proc.stdout.split("sub-agent S (sub)")
  assert "main agent M (main): tiny" in main and "fits" in main
  # 7.6B float32 params + AdamW on one chip: about 85 GiB > 16 GiB.
  assert "does NOT fit" in sub and "mesh data=1 fsdp=1 tensor=1 (1 devices)" in sub
