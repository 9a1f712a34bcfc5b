"""Fault soak: a two-slice run on the GCS emulator survives random SIGKILLs and an
emulator restart, and ends bitwise equal to an uninterrupted run.

    .venv/bin/python tools/fault_soak.py --steps=20 --kills=6 --seed=0

Both runs are `launch/tpu_run.py --slice=all` on tests/support/plumbing_config.py (tiny
models, the trainer tests' policy mix) with a `gs://` workdir on a fake-gcs-server. The
faulted run is started again and again, each time from a fresh, empty local folder (a new
machine), and each attempt ends one of three ways:
- a SIGKILL of main's or sub's process: once the attempt has finished a step of its own,
  after a random delay of up to about one step (or, with probability 1/4, 2-15 s after
  the attempt's start, during start-up or restore);
- in one attempt, drawn at random, first the emulator is stopped for `--outage_s`
  seconds after a finished step and restarted on the same port and data (the slices
  retry, or fail and are restarted), then a SIGKILL follows;
- the attempts after `--kills` SIGKILLs run to the end (at most 3).
Then the final checkpoints of both agents must equal the reference's bitwise, and every
step's outcomes record byte for byte. Prints one line per attempt and a summary; exits 1
on any difference.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import shutil
import signal
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mgrpo_jax.store import open_store  # noqa: E402
from mgrpo_jax.store.emulator import FakeGcsEmulator  # noqa: E402
from mgrpo_jax.store.schema import outcomes_key  # noqa: E402
from tests.support import trainer_harness  # noqa: E402

RUN_ID = "local_demo"
BUCKET = "soak"


def steps_done(workdir: str, num_steps: int) -> int:
  """Steps whose main and sub acks are both in the run's store."""
  return trainer_harness.acked_steps(workdir, num_steps, RUN_ID)


class Attempt:
  """One start of the run from a fresh local folder, with its log."""

  def __init__(self, workdir: str, machine: pathlib.Path, num_steps: int):
    shutil.rmtree(machine, ignore_errors=True)
    machine.mkdir(parents=True)
    self.machine = machine
    self.log = open(machine.parent / f"{machine.name}.log", "w")  # noqa: SIM115
    self.process = trainer_harness.start(
        workdir, f"--config.experiment.num_steps={num_steps}", slice_name="all",
        cwd=machine, gin_dir=machine, stdout=self.log)

  def kill(self, victim: str) -> bool:
    """SIGKILLs `victim`'s process once it has been spawned; False when the run ended
    first."""
    pid_file = self.machine / "runs_local" / RUN_ID / "launch" / f"{victim}.pid"
    while self.process.poll() is None:
      try:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        return True
      except (FileNotFoundError, ValueError):  # not spawned yet, or being written
        time.sleep(0.1)
      except ProcessLookupError:
        return False
    return False

  def wait(self, timeout: float) -> int:
    try:
      return self.process.wait(timeout=timeout)
    finally:
      self.log.close()


def wait_for_progress(attempt: Attempt, workdir: str, num_steps: int, since: int,
                      timeout: float) -> int:
  """Polls the store until a step beyond `since` is acked or the attempt ends."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline and attempt.process.poll() is None:
    done = steps_done(workdir, num_steps)
    if done > since:
      return done
    time.sleep(0.5)
  return steps_done(workdir, num_steps)


def run_soak(args: argparse.Namespace, root: pathlib.Path) -> bool:
  rng = random.Random(args.seed)
  emulator = FakeGcsEmulator(root / "gcs")
  emulator.start()
  os.environ.update(emulator.env())
  emulator.create_bucket(BUCKET)
  try:
    reference = f"gs://{BUCKET}/reference"
    started = time.monotonic()
    status = Attempt(reference, root / "reference", args.steps).wait(timeout=args.timeout_s)
    step_s = (time.monotonic() - started) / args.steps
    print(f"reference: status {status}, {time.monotonic() - started:.0f} s "
          f"({step_s:.1f} s per step with start-up)", flush=True)
    if status != 0:
      return False

    workdir = f"gs://{BUCKET}/faulted"
    outage_at = rng.randrange(args.kills + 1)
    counts = {"kills": 0, "kills_landed": 0, "emulator_restarts": 0, "attempts": 0}
    for index in range(args.kills + 4):  # the faults, then up to 3 plain attempts
      before = steps_done(workdir, args.steps)
      if before == args.steps:
        break
      attempt = Attempt(workdir, root / f"machine_{index}", args.steps)
      counts["attempts"] += 1
      actions = []
      if index == outage_at:
        wait_for_progress(attempt, workdir, args.steps, before, args.timeout_s)
        time.sleep(rng.uniform(0.0, step_s))
        emulator.stop()
        time.sleep(args.outage_s)
        emulator.start()
        counts["emulator_restarts"] += 1
        actions.append(f"emulator down {args.outage_s:.0f} s")
      if counts["kills"] < args.kills:
        victim = rng.choice(["main", "sub"])
        if index != outage_at and rng.random() < 0.25:
          time.sleep(rng.uniform(2.0, 15.0))
          when = "early (start-up or restore)"
        else:
          wait_for_progress(attempt, workdir, args.steps, steps_done(workdir, args.steps),
                            args.timeout_s)
          time.sleep(rng.uniform(0.0, step_s))
          when = "mid-step"
        landed = attempt.kill(victim)
        counts["kills"] += 1
        counts["kills_landed"] += landed
        actions.append(f"SIGKILL {victim} {when}" + ("" if landed else " (run had ended)"))
      action = ", then ".join(actions) or "run to the end"
      status = attempt.wait(timeout=args.timeout_s)
      after = steps_done(workdir, args.steps)
      print(f"attempt {index}: {action}; status {status}; steps done {before} -> {after}",
            flush=True)

    same = steps_done(workdir, args.steps) == args.steps
    if same:
      try:
        trainer_harness.assert_same_final_checkpoints(reference, workdir)
      except AssertionError as e:
        print(f"checkpoints differ: {e}")
        same = False
    ref_store, got_store = open_store(f"{reference}/store"), open_store(f"{workdir}/store")
    differing = [t for t in range(args.steps)
                 if got_store.get(outcomes_key(RUN_ID, t)) != ref_store.get(
                     outcomes_key(RUN_ID, t))] if same else []
    same = same and not differing
    print(f"summary: {counts['attempts']} attempts, {counts['kills']} SIGKILLs "
          f"({counts['kills_landed']} landed), {counts['emulator_restarts']} emulator "
          f"restart; final checkpoints and outcomes records "
          f"{'bitwise equal to' if same else 'DIFFERENT from'} the uninterrupted run's"
          + (f" (outcomes differ at steps {differing})" if differing else ""), flush=True)
    return same
  finally:
    emulator.stop()


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--kills", type=int, default=6)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--outage_s", type=float, default=5.0)
  parser.add_argument("--timeout_s", type=float, default=1200.0,
                      help="Longest one attempt may run.")
  parser.add_argument("--out", default="", help="Folder for the runs' local folders, "
                      "logs and the emulator's data (default: a temporary one, removed).")
  args = parser.parse_args()
  if args.out:
    ok = run_soak(args, pathlib.Path(args.out).resolve())
  else:
    with tempfile.TemporaryDirectory() as folder:
      ok = run_soak(args, pathlib.Path(folder))
  sys.exit(0 if ok else 1)


if __name__ == "__main__":
  main()
