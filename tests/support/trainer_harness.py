"""Runs `launch/tpu_run.py` for trainer tests (plumbing_config.py, small B/K/D, policy mix)
and reads the runs' final checkpoints."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import orbax.checkpoint as ocp

ROOT = pathlib.Path(__file__).resolve().parents[2]
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


def command(workdir, *extra, slice_name="all", fault=None, gin_dir=None):
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
          f"--gin_file={gin_path}", *OVERRIDES, *extra]
  return argv, env


def launch(workdir, *extra, slice_name="all", fault=None, timeout=240, cwd=ROOT, gin_dir=None):
  """Runs tpu_run.py to its end in `cwd` (where a `gs://` run keeps its local folder
  `runs_local/`); returns the CompletedProcess (output in .stdout)."""
  argv, env = command(workdir, *extra, slice_name=slice_name, fault=fault, gin_dir=gin_dir)
  return subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=timeout)


def start(workdir, *extra, slice_name, fault=None):
  """Starts tpu_run.py in the background; returns the Popen (output in .stdout)."""
  argv, env = command(workdir, *extra, slice_name=slice_name, fault=fault)
  return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


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
