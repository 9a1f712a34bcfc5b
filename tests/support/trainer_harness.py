"""Runs `launch/tpu_run.py` for trainer tests: plumbing_config.py, small B/K/D, policy mix."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

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


def command(workdir, *extra, slice_name="all", fault=None):
  """(argv, env) of one tpu_run.py call with the policy mix bound through gin."""
  gin_path = pathlib.Path(workdir).parent / "mix.gin"
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


def launch(workdir, *extra, slice_name="all", fault=None, timeout=240):
  """Runs tpu_run.py to its end; returns the CompletedProcess (output in .stdout)."""
  argv, env = command(workdir, *extra, slice_name=slice_name, fault=fault)
  return subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=timeout)


def start(workdir, *extra, slice_name, fault=None):
  """Starts tpu_run.py in the background; returns the Popen (output in .stdout)."""
  argv, env = command(workdir, *extra, slice_name=slice_name, fault=fault)
  return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
