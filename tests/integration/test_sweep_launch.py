"""launch/sweep.py end to end: real launcher children, N at a time, logs, done markers,
skipping, failures, exit codes, sweep_status.json, and SIGTERM/SIGINT stopping the children.

The runs pass `--launcher_flags=--dry_run` (or `--print_config`), so each child is the
real launch/tpu_run.py command of the run that plans memory (or prints its config) in a
second or two instead of training; a run with an unknown model preset is rejected by the
launcher's dry run with exit status 2.
"""

from __future__ import annotations

import json
import pathlib
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from mgrpo_jax.config import apply_overrides
from mgrpo_jax.config.sweep import load_config_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
SWEEP = ROOT / "launch" / "sweep.py"

PLAN_A = {"experiment.name": "a b: 'c'", "experiment.seed": 1,
          "main.optim.learning_rate": 3e-4, "logging.tensorboard": False,
          "experiment.run_id": "plan-a"}
RUNS = {
    "plan-a": PLAN_A,
    "plan-b": {"experiment.seed": 2, "experiment.run_id": "plan-b"},
    "bad-model": {"main.model.preset": "no_such_model"},
}


def write_sweep(folder: pathlib.Path, runs: dict) -> pathlib.Path:
  path = folder / "tiny_sweep.py"
  path.write_text(textwrap.dedent(f"""
      from mgrpo_jax.config.sweep import Run, Sweep

      def get_sweep():
        return Sweep("tiny", "configs/local_demo.py",
                     tuple(Run(name, overrides) for name, overrides in {runs!r}.items()))
      """))
  return path


def sweep(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, str(SWEEP), *args], capture_output=True, text=True,
                        cwd=ROOT, timeout=120)


def read_status(workdir: pathlib.Path) -> dict:
  return json.loads((workdir / "sweep_status.json").read_text())


def by_name(status: dict) -> dict:
  return {run["name"]: run for run in status["runs"]}


def test_runs_two_at_a_time_marks_skips_and_reports_failures(tmp_path):
  sweep_file, workdir = write_sweep(tmp_path, RUNS), tmp_path / "work"
  args = (f"--sweep={sweep_file}", f"--workdir={workdir}", "--parallel=2",
          "--launcher_flags=--dry_run")
  first = sweep(*args)
  assert first.returncode == 1, first.stderr

  # The first two runs start before either ends; the third waits for a free slot.
  events = [line.split()[1:3] for line in first.stdout.splitlines()
            if line.startswith("[sweep]")]
  assert events[:2] == [["started", "plan-a"], ["started", "plan-b"]]
  assert events.index(["started", "bad-model"]) > min(
      i for i, event in enumerate(events) if event[0] in ("done", "failed"))

  runs = by_name(read_status(workdir))
  assert [name for name in runs] == ["plan-a", "plan-b", "bad-model"]
  assert [(r["status"], r["exit_code"]) for r in runs.values()] == [
      ("done", 0), ("done", 0), ("failed", 2)]
  assert all(r["wall_s"] > 0 for r in runs.values())
  assert (workdir / "plan-a" / "SWEEP_DONE").exists()
  assert (workdir / "plan-b" / "SWEEP_DONE").exists()
  assert not (workdir / "bad-model" / "SWEEP_DONE").exists()

  log_a = (workdir / "plan-a" / "sweep.log").read_text()
  command_a = runs["plan-a"]["command"]
  assert log_a.splitlines()[0] == "# " + shlex.join(command_a)
  assert command_a[1:] == [
      str(ROOT / "launch" / "tpu_run.py"), "--slice=all", "--config=configs/local_demo.py",
      f"--workdir={workdir}/plan-a", "--config.experiment.name=a b: 'c'",
      "--config.experiment.seed=1", "--config.main.optim.learning_rate=0.0003",
      "--config.logging.tensorboard=false", "--config.experiment.run_id=plan-a", "--dry_run"]
  assert "train peak" in log_a
  log_bad = (workdir / "bad-model" / "sweep.log").read_text()
  assert "main.model.preset: 'no_such_model' is neither a preset" in log_bad

  table = first.stdout[first.stdout.index("run "):].splitlines()
  assert table[0].split() == ["run", "status", "exit", "wall_s"]
  assert [row.split()[:3] for row in table[1:4]] == [
      ["plan-a", "done", "0"], ["plan-b", "done", "0"], ["bad-model", "failed", "2"]]

  # Again: the done runs are skipped, the failed one runs (and fails) again.
  marker = (workdir / "plan-a" / "SWEEP_DONE").read_text()
  second = sweep(*args)
  assert second.returncode == 1, second.stderr
  runs = by_name(read_status(workdir))
  assert [(r["status"], r["exit_code"]) for r in runs.values()] == [
      ("skipped", None), ("skipped", None), ("failed", 2)]
  assert (workdir / "plan-a" / "SWEEP_DONE").read_text() == marker
  assert "started plan-a" not in second.stdout and "started bad-model" in second.stdout


def test_rerun_of_one_run_round_trips_its_overrides_through_the_launcher(tmp_path):
  sweep_file, workdir = write_sweep(tmp_path, RUNS), tmp_path / "work"
  (workdir / "plan-a").mkdir(parents=True)
  (workdir / "plan-a" / "SWEEP_DONE").write_text("{}\n")
  proc = sweep(f"--sweep={sweep_file}", f"--workdir={workdir}", "--only=plan-a", "--rerun",
               "--launcher_flags=--print_config")
  assert proc.returncode == 0, proc.stderr
  assert [(r["name"], r["status"]) for r in read_status(workdir)["runs"]] == [
      ("plan-a", "done")]
  assert json.loads((workdir / "plan-a" / "SWEEP_DONE").read_text())["exit_code"] == 0

  # The launcher's printed config is the base config with exactly the run's overrides.
  log = (workdir / "plan-a" / "sweep.log").read_text()
  printed = yaml.safe_load(log.split("\n# gin bindings\n")[0])
  expected = load_config_file("configs/local_demo.py", ROOT)
  apply_overrides(expected, PLAN_A)
  assert printed == expected.to_dict()


def test_print_commands_prints_one_quoted_command_per_run_and_runs_nothing(tmp_path):
  sweep_file = write_sweep(tmp_path, RUNS)
  proc = sweep(f"--sweep={sweep_file}", "--only=bad-model,plan-a", "--slice=main",
               "--print_commands")
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.splitlines() == [
      "python launch/tpu_run.py --slice=main --config=configs/local_demo.py "
      "--workdir=runs/tiny/plan-a '--config.experiment.name=a b: '\"'\"'c'\"'\"'' "
      "--config.experiment.seed=1 --config.main.optim.learning_rate=0.0003 "
      "--config.logging.tensorboard=false --config.experiment.run_id=plan-a",
      "python launch/tpu_run.py --slice=main --config=configs/local_demo.py "
      "--workdir=runs/tiny/bad-model --config.main.model.preset=no_such_model"]
  assert not (ROOT / "runs" / "tiny").exists()


def test_a_typo_in_a_sweep_exits_2_before_running_anything(tmp_path):
  sweep_file = write_sweep(tmp_path, {"ok": {}, "typo": {"experiment.sed": 1}})
  proc = sweep(f"--sweep={sweep_file}", f"--workdir={tmp_path / 'work'}")
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      f"sweep.py: error: {sweep_file}: run 'typo': override 'experiment.sed': config key "
      "'experiment.sed' is not a known setting"]
  assert not (tmp_path / "work").exists()


def _alive(pid: int) -> bool:
  try:
    state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
  except FileNotFoundError:
    return False
  return state != "Z"


def _wait_for(predicate, timeout_s: float):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    value = predicate()
    if value:
      return value
    time.sleep(0.2)
  raise AssertionError(f"timed out after {timeout_s} s")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_running_runs_and_their_slices(tmp_path, signum):
  # RL straight away (no warm start, no evaluation): the slices start within seconds.
  rl_only = {"warm_start.enabled": False, "eval.enabled": False}
  sweep_file, workdir = write_sweep(tmp_path, {"train": rl_only}), tmp_path / "work"
  proc = subprocess.Popen([sys.executable, str(SWEEP), f"--sweep={sweep_file}",
                           f"--workdir={workdir}"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  try:
    # Wait until the run (a real training run) has started both of its slices.
    launch = workdir / "train" / "launch"
    pid_files = _wait_for(lambda: sorted(launch.glob("*.pid")) if launch.exists() and len(
        list(launch.glob("*.pid"))) == 2 else None, timeout_s=90)
    child = read_status(workdir)["runs"][0]["pid"]
    slices = [int(p.read_text()) for p in pid_files]
    assert all(_alive(pid) for pid in (child, *slices))
    proc.send_signal(signum)
    stdout, _ = proc.communicate(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  assert proc.returncode == 128 + signum
  run = read_status(workdir)["runs"][0]
  assert run["status"] == "interrupted" and run["exit_code"] is not None
  assert not (workdir / "train" / "SWEEP_DONE").exists()
  assert f"{signal.Signals(signum).name}: stopping the running runs" in stdout
  for pid in (child, *slices):
    assert not _alive(pid), pid
