"""The demo learns: a shortened `configs/local_demo.py` run raises held-out accuracy by
more than its noise.

`launch/tpu_run.py --slice=all` on the symbolic world with a smaller warm start, fewer
RL steps and a greedy-only evaluation (`SHORT`): the warm-started agents, then the
M-GRPO-trained ones, answer the same held-out questions of the unseen test world. The
check is the demo's own criterion: the two 95% intervals of greedy accuracy are apart.
With the update disabled (`--config.main.optim.learning_rate=0` and the same for sub)
the weights after RL are the warm start's and the check fails (docs/RESULTS.md).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHORT = {
    "warm_start.num_questions": 1200,
    "warm_start.num_worlds": 120,
    "warm_start.epochs": 3,
    "warm_start.copy_steps": 100,
    "experiment.num_steps": 16,
    "eval.num_questions": 100,
    "eval.samples": 1,
    "eval.every": 0,
}


def run_short_demo(workdir: pathlib.Path, **overrides) -> tuple[dict, dict]:
  """(greedy summary before RL, after RL) of the shortened demo in `workdir`."""
  flags = [f"--config.{key}={value}" for key, value in {**SHORT, **overrides}.items()]
  proc = subprocess.run(
      [sys.executable, str(ROOT / "launch" / "tpu_run.py"), "--slice=all",
       "--config=configs/local_demo.py", f"--workdir={workdir}", *flags],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  summaries = [json.loads((workdir / "eval" / f"{label}.json").read_text())
               for label in ("warm_start", "final")]
  for summary in summaries:
    assert summary["num_questions"] == SHORT["eval.num_questions"]
  before, after = (summary["greedy"] for summary in summaries)
  return before, after


@pytest.mark.slow
def test_rl_raises_held_out_accuracy_beyond_its_noise(tmp_path):
  before, after = run_short_demo(tmp_path)
  low_after = after["accuracy"] - after["accuracy_ci95"]
  high_before = before["accuracy"] + before["accuracy_ci95"]
  assert low_after > high_before, (before, after)
