r"""Runs a named sweep (configs/sweeps/<name>.py) locally, or prints its launch commands.

  python launch/sweep.py --sweep=configs/sweeps/paper_comparison.py --parallel=2
  python launch/sweep.py --sweep=configs/sweeps/paper_comparison.py --only=mgrpo-s0,mgrpo-s1
  python launch/sweep.py --sweep=configs/sweeps/paper_comparison.py --print_commands \
      --workdir=gs://bucket/sweeps/paper_comparison

Each run is one launcher command,
  python launch/tpu_run.py --slice=all --config=<base> --workdir=<workdir>/<run> \
      --config.<key>=<value> ...
printed shell-quoted with --print_commands (for a cluster), else run here as a child
process, --parallel at a time, its output in <workdir>/<run>/sweep.log. A run that exits 0
leaves <workdir>/<run>/SWEEP_DONE and is skipped by later sweeps unless --rerun. A failed
run does not stop the others. <workdir>/sweep_status.json holds this invocation's runs
(status, exit code, wall seconds, pid, log, command), rewritten as each run starts and
exits; at the end the same is printed as a table. Exit status: 0 when every run is done
(or skipped), 1 when any failed, 2 for a bad flag or sweep (one line naming it),
128 + signal after SIGINT/SIGTERM, which stop the children.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from typing import NoReturn

from absl import app, flags

from mgrpo_jax.config.sweep import (
  Run,
  Sweep,
  SweepError,
  launch_command,
  load_config_file,
  load_sweep,
)
from mgrpo_jax.utils import cli

_LAUNCHER = pathlib.Path(__file__).resolve().parent / "tpu_run.py"
DONE_MARKER = "SWEEP_DONE"
LOG_NAME = "sweep.log"
STATUS_NAME = "sweep_status.json"
_POLL_S = 0.2
_STOP_GRACE_S = 10.0

_SWEEP = flags.DEFINE_string(
    "sweep", None, "Sweep file defining get_sweep(), e.g. configs/sweeps/paper_comparison.py.")
_WORKDIR = flags.DEFINE_string(
    "workdir", "", "Folder of the sweep's runs, one subfolder each (a local path; with "
    "--print_commands also gs://bucket/prefix). Empty: runs/<sweep name>.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at a time.", lower_bound=1)
_ONLY = flags.DEFINE_list("only", [], "Run only these runs (comma-separated names).")
_PRINT_COMMANDS = flags.DEFINE_bool(
    "print_commands", False, "Print one shell-quoted launch command per run and exit.")
_SLICE = flags.DEFINE_enum("slice", "all", ["main", "sub", "all"],
                           "The launcher's --slice for every run.")
_RERUN = flags.DEFINE_bool("rerun", False, f"Also run runs that have a {DONE_MARKER} marker.")
_LAUNCHER_FLAGS = flags.DEFINE_string(
    "launcher_flags", "", "Extra launcher flags appended to every run's command, shell-split, "
    "e.g. '--dry_run' (plan every run's memory) or '--gin_file=my.gin'.")


class _Interrupted(Exception):

  def __init__(self, signum: int):
    super().__init__(signal.Signals(signum).name)
    self.signum = signum


@dataclasses.dataclass
class RunState:
  """One run's progress. status: pending, running, done, failed, skipped, interrupted."""

  run: Run
  command: list[str]
  folder: pathlib.Path
  status: str = "pending"
  exit_code: int | None = None
  wall_s: float | None = None
  process: subprocess.Popen | None = None
  started: float = 0.0


def _fail(message: str) -> NoReturn:
  sys.stderr.write(f"sweep.py: error: {' '.join(message.split())}\n")
  sys.exit(2)


def _say(message: str) -> None:
  sys.stdout.write(f"[sweep] {message}\n")
  sys.stdout.flush()


def _start(state: RunState) -> None:
  state.folder.mkdir(parents=True, exist_ok=True)
  (state.folder / DONE_MARKER).unlink(missing_ok=True)
  with open(state.folder / LOG_NAME, "w") as log:
    log.write(f"# {shlex.join(state.command)}\n")
    log.flush()
    state.started = time.monotonic()
    state.process = subprocess.Popen(
        state.command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
  state.status = "running"


def _finish(state: RunState, exit_code: int) -> None:
  state.exit_code = exit_code
  state.wall_s = time.monotonic() - state.started
  state.status = "done" if exit_code == 0 else "failed"
  if exit_code == 0:
    marker = {"exit_code": 0, "wall_s": round(state.wall_s, 3), "command": state.command}
    (state.folder / DONE_MARKER).write_text(json.dumps(marker) + "\n")


def _group_running(pgid: int) -> bool:
  """Whether a process of group `pgid` still runs (zombies count as stopped; Linux /proc)."""
  for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
    try:
      state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
    except (OSError, ValueError):
      continue  # the process exited while being read
    if int(group) == pgid and state != "Z":
      return True
  return False


def _wait_until_group_stopped(pgid: int, timeout_s: float = _STOP_GRACE_S) -> None:
  """After the SIGKILL: the slices (grandchildren) take a moment to die; wait for them."""
  deadline = time.monotonic() + timeout_s
  while _group_running(pgid) and time.monotonic() < deadline:
    time.sleep(0.05)


def _stop(state: RunState) -> None:
  """SIGTERM to the run's launcher (it stops its slices), then SIGKILL to what is left of
  its process group (its own session: pgid == pid) after a grace period."""
  process = state.process
  if process.poll() is None:
    process.send_signal(signal.SIGTERM)
    try:
      process.wait(timeout=_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
      pass
  try:
    os.killpg(process.pid, signal.SIGKILL)
  except ProcessLookupError:
    pass  # the whole group has exited
  process.wait()
  _wait_until_group_stopped(process.pid)
  state.exit_code = process.returncode
  state.wall_s = time.monotonic() - state.started
  state.status = "interrupted"


def _run_queue(states: list[RunState], parallel: int, on_change) -> None:
  """Runs the pending states, `parallel` at a time, until all have exited.

  `on_change()` is called after each start and each exit.
  """
  pending = deque(s for s in states if s.status == "pending")
  running: list[RunState] = []
  total = len(pending)
  while pending or running:
    while pending and len(running) < parallel:
      state = pending.popleft()
      _start(state)
      running.append(state)
      _say(f"started {state.run.name} ({total - len(pending)}/{total}), "
           f"log: {state.folder / LOG_NAME}")
      on_change()
    for state in list(running):
      exit_code = state.process.poll()
      if exit_code is not None:
        _finish(state, exit_code)
        running.remove(state)
        _say(f"{state.status} {state.run.name} (exit {exit_code}, {state.wall_s:.1f} s)")
        on_change()
    time.sleep(_POLL_S)


def format_table(states: list[RunState]) -> str:
  """The end-of-sweep table: run, status, exit code, wall seconds."""
  rows = [("run", "status", "exit", "wall_s")]
  for s in states:
    rows.append((s.run.name, s.status, "-" if s.exit_code is None else str(s.exit_code),
                 "-" if s.wall_s is None else f"{s.wall_s:.1f}"))
  widths = [max(len(row[i]) for row in rows) for i in range(4)]
  return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  "
                   f"{r[3]:>{widths[3]}}" for r in rows)


def _write_status(path: pathlib.Path, sweep: Sweep, sweep_file: str,
                  states: list[RunState]) -> None:
  status = {
      "sweep": sweep.name,
      "sweep_file": sweep_file,
      "base_config": sweep.base_config,
      "runs": [{"name": s.run.name, "status": s.status, "exit_code": s.exit_code,
                "wall_s": None if s.wall_s is None else round(s.wall_s, 3),
                "pid": None if s.process is None else s.process.pid,
                "log": str(s.folder / LOG_NAME), "command": s.command} for s in states],
  }
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(status, indent=2) + "\n")
  os.replace(tmp, path)


def _commands(sweep: Sweep, runs: tuple[Run, ...], workdir: str, python: str,
              launcher: str) -> list[list[str]]:
  try:
    base = load_config_file(sweep.base_config)
    extra = shlex.split(_LAUNCHER_FLAGS.value)
    return [launch_command(sweep, run, base, workdir, slice_name=_SLICE.value, python=python,
                           launcher=launcher, extra_flags=extra) for run in runs]
  except ValueError as e:  # a SweepError, or unbalanced quotes in --launcher_flags
    _fail(f"{_SWEEP.value}: {e}")
  raise AssertionError("unreachable")


def _raise_interrupted(signum: int, frame) -> None:
  del frame
  raise _Interrupted(signum)


def _run_locally(sweep: Sweep, runs: tuple[Run, ...], workdir: str) -> int:
  if "://" in workdir:
    _fail(f"--workdir={workdir}: local runs need a local folder (use --print_commands "
          "for a cluster)")
  commands = _commands(sweep, runs, workdir, sys.executable, str(_LAUNCHER))
  root = pathlib.Path(workdir)
  states = [RunState(run, command, root / run.name)
            for run, command in zip(runs, commands, strict=True)]
  for state in states:
    if not _RERUN.value and (state.folder / DONE_MARKER).exists():
      state.status = "skipped"
  root.mkdir(parents=True, exist_ok=True)
  status_path = root / STATUS_NAME
  write_status = functools.partial(_write_status, status_path, sweep, _SWEEP.value, states)
  write_status()
  handlers = {sig: signal.signal(sig, _raise_interrupted)
              for sig in (signal.SIGINT, signal.SIGTERM)}
  interrupted = None
  try:
    _run_queue(states, _PARALLEL.value, write_status)
  except _Interrupted as e:
    interrupted = e.signum
    _say(f"{e}: stopping the running runs")
  finally:
    for sig in handlers:
      signal.signal(sig, signal.SIG_IGN)
    for state in states:
      if state.process is not None and state.status not in ("done", "failed"):
        _stop(state)
    for sig, handler in handlers.items():
      signal.signal(sig, handler)
  write_status()
  sys.stdout.write(format_table(states) + "\n")
  sys.stdout.write(f"status: {status_path}\n")
  if interrupted is not None:
    return 128 + interrupted
  return 1 if any(s.status == "failed" for s in states) else 0


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    _fail(f"unexpected arguments: {' '.join(argv[1:])}")
  if not _SWEEP.value:
    _fail("--sweep is required (a file of configs/sweeps/)")
  try:
    sweep = load_sweep(_SWEEP.value)
    runs = sweep.select(_ONLY.value) if _ONLY.value else sweep.runs
  except SweepError as e:
    _fail(str(e))
  workdir = _WORKDIR.value or f"runs/{sweep.name}"
  if _PRINT_COMMANDS.value:
    for command in _commands(sweep, runs, workdir, "python", "launch/tpu_run.py"):
      sys.stdout.write(shlex.join(command) + "\n")
    return
  sys.exit(_run_locally(sweep, runs, workdir))


def _parse_flags(argv: list[str]) -> list[str]:
  return cli.parse_flags(argv, _fail)


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_flags)
