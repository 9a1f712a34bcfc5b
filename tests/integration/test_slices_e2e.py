"""Two-process training through `launch/tpu_run.py --slice=all`, and exact resume after SIGKILL.

The slices run the tiny models of tests/support/plumbing_config.py with a policy mix
(`trainer_policy_mix.ThinkingOracle`: model-sampled thinking, oracle actions) so that M
delegates, S reports and rewards and advantages are not all 0. The resumed run is
killed at named points of the step protocol (`MGRPO_FAULT`: during M's rollouts, after
outcomes, during S's update), and separately at seeded random times (either slice), and
restarted with the same command each time; its final checkpoints must equal the
uninterrupted run's bitwise.
"""

from __future__ import annotations

import math
import os
import pathlib
import random
import signal
import time

import pytest

from mgrpo_jax.metrics.writer import read_metrics
from mgrpo_jax.store import open_store
from mgrpo_jax.store.schema import MainOutcomes, SliceAck, ack_key, outcomes_key
from tests.support import trainer_harness

NUM_STEPS = 3
RUN_ID = "local_demo"


def launch(workdir, fault=None):
  return trainer_harness.launch(workdir, f"--config.experiment.num_steps={NUM_STEPS}",
                                fault=fault)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("reference") / "run"
  result = launch(workdir)
  assert result.returncode == 0, result.stdout[-4000:]
  return workdir, result.stdout


def test_two_slices_complete_every_step(reference):
  workdir, output = reference
  store = open_store(str(workdir / "store"))
  delegations = 0
  for step in range(NUM_STEPS):
    outcomes = MainOutcomes.from_bytes(outcomes_key(RUN_ID, step),
                                       store.get(outcomes_key(RUN_ID, step)))
    assert outcomes.shape == (1, 3)
    delegations += int(outcomes.to_arrays()["num_sub_calls"].sum())
    for name in ("main", "sub"):
      ack = SliceAck.from_bytes(ack_key(RUN_ID, step, name),
                                store.get(ack_key(RUN_ID, step, name)))
      assert ack.weight_version == step + 1
  assert delegations > 0
  for role in ("main", "sub"):
    step, arrays = trainer_harness.checkpoint_arrays(workdir, role)
    assert step == NUM_STEPS and int(arrays["/step"]) == NUM_STEPS
  main = read_metrics(workdir / "logs" / "main" / "metrics.jsonl")
  sub = read_metrics(workdir / "logs" / "sub" / "metrics.jsonl")
  assert [m["step"] for m in main] == [m["step"] for m in sub] == list(range(NUM_STEPS))
  for record in main:
    for phase in ("rollout", "sub_calls", "scoring", "store", "update", "checkpoint"):
      assert record[f"time/{phase}_s"] >= 0
    assert record["throughput/main_tokens_per_s"] > 0
  for record in sub:
    for name in ("sub/update/loss", "sub/update/grad_norm", "sub/advantage_std",
                 "sub/reward_mean"):
      assert math.isfinite(record[name])
  assert any(m["sub/advantage_abs_mean"] > 0 for m in sub)
  assert any(m["main/advantage_abs_mean"] > 0 for m in main)
  assert "[main] step 3/3" in output and "[sub] step 3/3" in output
  # Step 0's trajectory page (`logging.trajectory_every` = 10): the query's K rollouts with
  # A_M, every S call with R_S and either A_S and its slots or its drop.
  page = (workdir / "report" / "trajectories_step0.html").read_text()
  calls = int(MainOutcomes.from_bytes(outcomes_key(RUN_ID, 0), store.get(
      outcomes_key(RUN_ID, 0))).to_arrays()["num_sub_calls"].sum())
  assert page.count('<article class="rollout') == page.count("A_M ") == 3
  assert page.count('data-call="') == page.count("R_S ") == calls
  assert page.count("A_S ") + page.count("dropped (") == calls
  assert not (workdir / "report" / "trajectories_step1.html").exists()
  # The caches of the steps after the oldest of the 3 kept checkpoints (steps_done 1..3).
  assert sorted(p.name for p in (workdir / "main" / "cache").glob("step_*")) == [
      "step_00000001.json", "step_00000002.json"]
  assert {p.name for p in (workdir / "sub" / "cache").glob("step_*")} <= {
      "step_00000001", "step_00000002"}
  # The run's persistent compilation cache holds the slices' compiled programs.
  assert any(p.name.startswith("jit_") for p in (workdir / "jax_cache").iterdir())


def test_resume_after_sigkill_equals_uninterrupted_run(reference, tmp_path):
  workdir = tmp_path / "run"
  store = open_store(str(workdir / "store"))
  for fault in ("main:outcomes:0", "sub:loaded:1", "main:rollout:2"):
    result = launch(workdir, fault=fault)
    assert result.returncode != 0, f"fault {fault} did not fire:\n{result.stdout[-3000:]}"
    assert "exited with status -9" in result.stdout, result.stdout[-3000:]
  assert store.exists(outcomes_key(RUN_ID, 1)) and not store.exists(ack_key(RUN_ID, 2, "main"))
  result = launch(workdir)
  assert result.returncode == 0, result.stdout[-4000:]
  trainer_harness.assert_same_final_checkpoints(reference[0], workdir)
  for step in range(NUM_STEPS):
    assert store.get(outcomes_key(RUN_ID, step)) == open_store(
        str(reference[0] / "store")).get(outcomes_key(RUN_ID, step))


def _kill_one_slice_at(workdir, delay_s: float, victim: str) -> int:
  """Starts the run, SIGKILLs `victim`'s process after `delay_s`; returns the parent's status."""
  parent = trainer_harness.start(workdir, f"--config.experiment.num_steps={NUM_STEPS}",
                                 slice_name="all")
  pid_file = pathlib.Path(workdir) / "launch" / f"{victim}.pid"
  deadline = time.monotonic() + delay_s
  while time.monotonic() < deadline and parent.poll() is None:
    time.sleep(0.1)
  if parent.poll() is None and pid_file.exists():
    try:
      os.kill(int(pid_file.read_text()), signal.SIGKILL)
    except ProcessLookupError:  # the slice had just finished
      pass
  parent.communicate(timeout=300)
  return parent.returncode


def test_resume_after_sigkill_at_random_times_equals_uninterrupted_run(reference, tmp_path):
  workdir = tmp_path / "run"
  rng = random.Random(20261129)
  statuses = [_kill_one_slice_at(workdir, rng.uniform(8.0, 40.0), rng.choice(["main", "sub"]))
              for _ in range(2)]
  result = launch(workdir)
  assert result.returncode == 0, result.stdout[-4000:]
  assert any(status != 0 for status in statuses), "no kill landed before the run finished"
  trainer_harness.assert_same_final_checkpoints(reference[0], workdir)


def test_the_evaluation_runs_in_its_own_child_process(reference):
  """A rerun with the evaluation on: RL is done, so only the `eval_after` stage runs, as
  a `[eval]` child (`--slice=all --stage=eval_after`); the parent computes nothing."""
  workdir, _ = reference
  result = trainer_harness.launch(
      workdir, f"--config.experiment.num_steps={NUM_STEPS}", "--config.eval.enabled=True",
      "--config.eval.num_questions=4", "--config.eval.samples=1",
      "--config.eval.viewer_questions=0")
  assert result.returncode == 0, result.stdout[-4000:]
  assert "[eval] eval final: accuracy" in result.stdout
  assert (workdir / "eval" / "final.json").exists()
  assert (workdir / "launch" / "eval.pid").exists()
  assert "held-out accuracy" in result.stdout  # the report's table, from the child's summary
