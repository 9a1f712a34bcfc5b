"""Runs `launch/tpu_run.py` for trainer tests (plumbing_config.py, small B/K/D, policy mix)
and reads the runs' final checkpoints.

Every launch compiles the same few programs (one config, one set of shapes), so the
launches of a test session share one persistent compilation cache: the folder named by
`MGRPO_TESTS_COMPILATION_CACHE` (tests/integration/conftest.py sets it), passed as
`experiment.compilation_cache_dir`. A cached program is the compiled program itself, so
every result is bitwise what a cold compile gives; a launch with `shared_cache=False`
keeps the default a user gets (`jax_cache` beside the workdir).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time

import filelock
import numpy as np
import orbax.checkpoint as ocp

from mgrpo_jax.store import open_store
from mgrpo_jax.store.schema import ack_key

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED_CACHE_ENV = "MGRPO_TESTS_COMPILATION_CACHE"
MIX_GIN = """import mgrpo_jax.training.agent_setup
import tests.support.trainer_policy_mix
mgrpo_jax.training.rollout_policy.wrapper = @trainer_policy_mix.ThinkingOracle
"""
OVERRIDES = [
    "--config.mgrpo.queries_per_step=1", "--config.mgrpo.rollouts_per_query=3",
    "--config.mgrpo.aligned_sub_calls=2",
    "--config.main.sampling.max_new_tokens=96", "--config.sub.sampling.max_new_tokens=96",
    "--config.main.limits.max_turns=4", "--config.sub.limits.max_turns=3",
]


def shared_cache_overrides() -> list[str]:
  """The override that points a launch at the session's compilation cache, if any."""
  folder = os.environ.get(SHARED_CACHE_ENV)
  return [f"--config.experiment.compilation_cache_dir={folder}"] if folder else []


def command(workdir, *extra, slice_name="all", fault=None, gin_dir=None, shared_cache=True):
  """(argv, env) of one tpu_run.py call with the policy mix bound through gin (in
  `gin_dir`, default the workdir's parent; a `gs://` workdir needs one)."""
  gin_path = pathlib.Path(gin_dir or pathlib.Path(workdir).parent) / "mix.gin"
  gin_path.write_text(MIX_GIN)
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("MGRPO_FAULT", None)
  if fault:
    env["MGRPO_FAULT"] = fault
  argv = [sys.executable, str(ROOT / "launch" / "tpu_run.py"), f"--slice={slice_name}",
          "--config=" + str(ROOT / "tests" / "support" / "plumbing_config.py"),
          f"--workdir={workdir}",
          f"--gin_file={gin_path}", *OVERRIDES,
          *(shared_cache_overrides() if shared_cache else []), *extra]
  return argv, env


def launch(workdir, *extra, slice_name="all", fault=None, timeout=600, cwd=ROOT, gin_dir=None,
           shared_cache=True):
  """Runs tpu_run.py to its end in `cwd` (where a `gs://` run keeps its local folder
  `runs_local/`); returns the CompletedProcess (output in .stdout). `timeout` guards
  against a hang; it is no time limit (a launch that compiles cold on a loaded machine
  takes minutes)."""
  argv, env = command(workdir, *extra, slice_name=slice_name, fault=fault, gin_dir=gin_dir,
                      shared_cache=shared_cache)
  return subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=timeout)


def share_compiled_programs(cache_folder: pathlib.Path) -> None:
  """Copies the programs in `cache_folder` (a launch's own persistent cache) that the
  session's shared cache lacks into it, so later launches load them instead of compiling
  them again.

  The shared cache may have a size cap (`make test` sets one), under which JAX keeps a
  `<key>-atime` file beside each `<key>-cache` file and locks `.lockfile` while it reads
  or writes: the copy takes that lock and writes the access time first, then the program
  under a temporary name renamed into place, as JAX's own writes leave the folder.
  """
  shared = os.environ.get(SHARED_CACHE_ENV)
  if not shared:
    return
  target = pathlib.Path(shared)
  target.mkdir(parents=True, exist_ok=True)
  with filelock.FileLock(target / ".lockfile"):
    for source in sorted(cache_folder.glob("*-cache")):
      if (target / source.name).exists():
        continue
      key = source.name.removesuffix("-cache")
      (target / f"{key}-atime").write_bytes(time.time_ns().to_bytes(8, "little"))
      partial = target / f".{source.name}.partial"
      shutil.copyfile(source, partial)
      os.replace(partial, target / source.name)


def start(workdir, *extra, slice_name, fault=None, cwd=ROOT, gin_dir=None,
          stdout=subprocess.PIPE):
  """Starts tpu_run.py in the background in `cwd`; returns the Popen (output in .stdout,
  or where `stdout` says)."""
  argv, env = command(workdir, *extra, slice_name=slice_name, fault=fault, gin_dir=gin_dir)
  return subprocess.Popen(argv, env=env, cwd=cwd, stdout=stdout,
                          stderr=subprocess.STDOUT, text=True)


def acked_steps(workdir, num_steps: int, run_id: str, slices=("main", "sub")) -> int:
  """How many of the run's steps every slice in `slices` has acknowledged in its store."""
  store = open_store(f"{workdir}/store")
  return sum(all(store.exists(ack_key(run_id, t, name)) for name in slices)
             for t in range(num_steps))


def checkpoint_arrays(workdir, role):
  """(step, {path: array}) of the latest checkpoint's train state of one agent of the run
  in `workdir` (a folder or `gs://`)."""
  directory = f"{workdir}/checkpoints/{role}"
  if "://" not in directory:
    directory = pathlib.Path(directory)
  with ocp.CheckpointManager(directory) as manager:
    step = manager.latest_step()
    state = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore())).state
  flat = {}

  def visit(prefix, node):
    if isinstance(node, dict):
      for key, value in node.items():
        visit(f"{prefix}/{key}", value)
    elif isinstance(node, list | tuple):
      for i, value in enumerate(node):
        visit(f"{prefix}/{i}", value)
    elif node is not None:
      flat[prefix] = np.asarray(node)

  visit("", state)
  return step, flat


def assert_same_final_checkpoints(reference_workdir, workdir, roles=("main", "sub")):
  """The runs' latest checkpoints hold the same step and bitwise equal arrays."""
  for role in roles:
    ref_step, ref = checkpoint_arrays(reference_workdir, role)
    step, got = checkpoint_arrays(workdir, role)
    assert step == ref_step and sorted(got) == sorted(ref), (role, step, ref_step)
    for name in ref:
      np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{role} {name}")
