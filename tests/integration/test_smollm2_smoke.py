"""Two RL steps of configs/smollm2_deep_research.py:cpu_smoke: both slices, real RPC.

Runs `python launch/tpu_run.py --slice=all --config=configs/smollm2_deep_research.py:
cpu_smoke` as a subprocess (two SmolLM2-135M-Instruct agents, the sub-agent service on
loopback TCP, the local store, orbax checkpoints) and checks what it wrote.

An untuned 135M model never writes a well-formed protocol turn (and a 16-token turn
cannot hold a delegation), so the paper's R_M would be 0 for every rollout, the
group-normalized advantages 0 and the gradient 0: an update would be a no-op. The run
therefore binds, through the documented gin plugin `mgrpo_jax.plugins.main_reward_fn`,
`rollout_parity_reward` below (R_M[q, k] = k mod 2, independent of the text), so the
K = 2 rollouts get advantages -1 and +1 and M's two updates are real policy-gradient
steps on the tokens SmolLM2 sampled. S is never called (no delegation), so its updates
see no token: its checks are the empty-batch invariants (zero gradient, norm scales
unchanged, matrices only weight-decayed).

The GGUF comes from the `smollm2_gguf` fixture; the subprocess gets its folder as
`MGRPO_JAX_CACHE`, so `models/weights/fetch.py` finds the verified file and downloads
nothing (the file's inode and mtime are checked). The launch compiles into the test
session's shared compilation cache (`tests.support.trainer_harness`), so a later test run
loads its programs instead of compiling them again; a loaded program is the compiled
program itself.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import gin
import numpy as np
import pytest

from mgrpo_jax.metrics.writer import read_metrics
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup
from tests.support.trainer_harness import shared_cache_overrides

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIG_FILE = ROOT / "configs" / "smollm2_deep_research.py"
PRESET = "cpu_smoke"
REWARD_GIN = f"""import {pathlib.Path(__file__).stem}
mgrpo_jax.plugins.main_reward_fn.fn = @{pathlib.Path(__file__).stem}.rollout_parity_reward
"""
STEPS = 2
LEARNING_RATE = 1e-6
WEIGHT_DECAY = 0.1


@gin.configurable
def rollout_parity_reward(format_ok, correct, *, a1: float, a2: float) -> np.ndarray:
  """R_M float32 [Q, K] = k mod 2 (rollout index k), whatever the trajectories hold."""
  del correct, a1, a2
  shape = np.shape(format_ok)
  return np.broadcast_to(np.arange(shape[-1]) % 2, shape).astype(np.float32)


def _smoke_config():
  spec = importlib.util.spec_from_file_location("smollm2_deep_research", CONFIG_FILE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(PRESET)


def _metrics(workdir: pathlib.Path, slice_name: str) -> list[dict]:
  """Each step's full line (`read_metrics`), after checking that the file holds exactly
  a provisional and a full line per step."""
  path = workdir / "logs" / slice_name / "metrics.jsonl"
  raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  assert [m["step"] for m in raw[1::2]] == [m["step"] for m in raw[::2]]
  return read_metrics(path)


def _leaves(state) -> list[np.ndarray]:
  import jax

  return [np.asarray(x) for x in jax.tree.leaves(state.params)]


def _run(workdir: pathlib.Path, gin_file: pathlib.Path, cache: pathlib.Path
         ) -> subprocess.CompletedProcess:
  # The gin file imports this module (HERE), which imports `tests.support` (ROOT).
  path = (str(HERE), str(ROOT), os.environ.get("PYTHONPATH"))
  env = dict(os.environ, MGRPO_JAX_CACHE=str(cache),
             PYTHONPATH=os.pathsep.join(p for p in path if p))
  command = [sys.executable, "launch/tpu_run.py", "--slice=all",
             f"--config={CONFIG_FILE.relative_to(ROOT)}:{PRESET}", f"--workdir={workdir}",
             f"--gin_file={gin_file}", *shared_cache_overrides()]
  return subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=600)


@pytest.mark.slow
def test_cpu_smoke_trains_both_smollm2_agents_for_two_steps(smollm2_gguf, tmp_path,
                                                            monkeypatch):
  gguf = pathlib.Path(smollm2_gguf)
  before = gguf.stat()
  workdir = tmp_path / "run"
  gin_file = tmp_path / "parity_reward.gin"
  gin_file.write_text(REWARD_GIN)

  proc = _run(workdir, gin_file, gguf.parent)

  assert proc.returncode == 0, proc.stdout[-6000:]
  after = gguf.stat()
  assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
  config = _smoke_config()
  max_new = int(config.main.sampling.max_new_tokens)
  num_rollouts = int(config.mgrpo.rollouts_per_query) * int(config.mgrpo.queries_per_step)

  main = _metrics(workdir, "main")
  assert [m["step"] for m in main] == list(range(STEPS))
  for m in main:
    assert m["main/reward_mean"] == 0.5  # the parity reward over K = 2 rollouts
    assert m["main/advantage_abs_mean"] == 1.0  # group-normalized: -1 and +1
    assert m["main/sub_calls_mean"] == 0.0  # a 16-token turn cannot delegate
    sampled = m["main/sampled_tokens"]
    assert 0 < sampled <= num_rollouts * max_new
    assert m["main/update/num_tokens"] == sampled  # every sampled token is trained on
    assert math.isfinite(m["main/update/loss"])
    assert 0.0 < m["main/update/grad_norm"] < math.inf  # clipped to optim.grad_clip
    assert m["main/update/learning_rate"] == np.float32(LEARNING_RATE)
    # The sampler's and the trainer's log-probs of the same tokens agree (float32).
    assert m["main/update/logp_diff_max"] < 1e-3
    assert abs(m["main/update/ratio_mean"] - 1.0) < 1e-3

  sub = _metrics(workdir, "sub")
  assert [m["step"] for m in sub] == list(range(STEPS))
  for m in sub:
    assert m["sub/calls"] == 0.0 and m["sub/valid_slots"] == 0.0
    assert m["sub/update/num_tokens"] == 0.0 and m["sub/update/grad_norm"] == 0.0
    assert math.isfinite(m["sub/update/loss"]) and math.isfinite(m["sub/reward_mean"])

  _check_checkpoints(config, workdir, gguf.parent, monkeypatch)


def _check_checkpoints(config, workdir: pathlib.Path, cache: pathlib.Path, monkeypatch):
  """Both agents' checkpoints at step 2 against the pretrained SmolLM2 parameters."""
  from mgrpo_jax.training import agent_setup
  from mgrpo_jax.training.agent_config import AgentSetup
  from mgrpo_jax.training.checkpoint import AgentCheckpointer
  from mgrpo_jax.training.paths import RunPaths

  monkeypatch.setenv("MGRPO_JAX_CACHE", str(cache))
  paths = RunPaths.from_config(config, str(workdir))
  setup = AgentSetup.from_config(config, "main")
  model, _ = agent_setup.build_model(
      setup, functools.partial(agent_setup.world_tokenizer, paths.local,
                               TokenizerSetup.from_config(config)))
  trainer = agent_setup.create_agent_state(model, setup)
  layout, pretrained, vocab = trainer.layout, _leaves(trainer.state), model.config.vocab_size
  del model, trainer

  restored = {}
  for role, step in (("main", 1), ("main", STEPS), ("sub", STEPS)):
    with AgentCheckpointer(paths.checkpoints(role), layout) as checkpointer:
      assert checkpointer.all_steps() == list(range(1, STEPS + 1)), role
      state, metadata = checkpointer.restore(step)
    assert int(state.step) == step and metadata["steps_done"] == step, (role, metadata)
    restored[role, step] = _leaves(state)
    del state

  lr, wd = LEARNING_RATE, WEIGHT_DECAY
  for p0, p1, p2 in zip(pretrained, restored["main", 1], restored["main", STEPS],
                        strict=True):
    decay = wd if p0.ndim >= 2 else 0.0
    ulp = np.spacing(np.abs(p0))
    # Step 1 of AdamW: m_hat / sqrt(v_hat) = g / (|g| + eps), so every parameter moves
    # by at most lr besides its decay, and by lr exactly where |g| >> eps: the typical
    # move of every parameter group except the embedding table (whose rare tokens' rows
    # get gradients below eps) is lr.
    first = np.abs(p1 - p0 + lr * decay * p0)
    assert np.all(first <= lr + 2 * ulp)
    if p0.shape[0] != vocab:
      assert 0.9 * lr <= np.median(first) <= 1.01 * lr, p0.shape
    # Two steps move a parameter by at most about 2 lr (1 + decay |p|): the second
    # step's |m_hat| / sqrt(v_hat) is below 1.001 for betas (0.9, 0.98).
    assert np.all(np.abs(p2 - p0) <= 2.002 * lr * (1 + decay * np.abs(p0)) + 4 * ulp)
    assert not np.array_equal(p2, p1)
  moved = sum(int(np.sum(np.abs(p1 - p0) >= 0.5 * lr)) for p0, p1 in
              zip(pretrained, restored["main", 1], strict=True))
  assert moved > 0.5 * sum(p.size for p in pretrained)

  for p0, p2 in zip(pretrained, restored["sub", STEPS], strict=True):
    if p0.ndim < 2:  # zero gradient, no decay: Adam's update is exactly 0
      np.testing.assert_array_equal(p2, p0)
    else:  # zero gradient: two decays p <- p (1 - lr wd)
      expected = p0.astype(np.float64) * (1 - lr * wd) ** STEPS
      assert np.all(np.abs(p2 - expected) <= 2 * np.spacing(np.abs(p0)))
