"""The main slice as two JAX processes x 4 CPU devices equals one process x 8 devices.

`launch/tpu_run.py --slice=main` in `experiment.mode=shared_policy` (no sub slice) runs
2 steps on a (2, 2, 2) mesh, once as one process with 8 devices and once as two
processes with 4 devices each, joined through `--coordinator_address` on loopback. The
rollouts of each query depend only on the query (`RequestKeyedMix` below keys every
turn by the request, not by its position in a batch), so both runs sample the same
trajectories, although in the two-process run each process samples only its own query
and its rollouts come from a replica of M on its own devices. Then:
- the final M parameters (the collective orbax checkpoint) agree: 99.9% of the
  elements within 1e-6 and 99.95% within 1e-5, while the second update moved most of
  them by more than 1e-5. (The samplers' log-probs, pi_old of the loss, come from
  differently sharded copies of M and differ in the last bits. Adam divides each
  element's step by its gradient's own scale, so where a gradient is near 0 those bits
  can move the element by up to the learning rate per step: one element in 164k
  differed by 1.5e-4 on one CPU, 1e-5 on another. Every element is therefore held
  within LEARNING_RATE x NUM_STEPS, and the fractions catch wrong or duplicated rows,
  which move nearly every element.)
- exactly one metrics.jsonl with a provisional and a full line per step (process 0
  alone writes it, and
  one TensorBoard event file), whose rewards, token counts and loss equal the
  single-process run's;
- the store holds the same records, byte for byte but for the digests of S's calls in
  the outcomes (they hash S's sampled log-probs too, which differ in the last bits as
  above; their number per rollout is the same); process 1 runs with its own
  `store.uri`, which must stay empty, and prints no log lines.
Imported through gin by the launched processes, this module provides the policy wrapper.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import gin
import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
NUM_STEPS = 2
LEARNING_RATE = 1e-3
OVERRIDES = [
    f"--config.experiment.num_steps={NUM_STEPS}", "--config.experiment.mode=shared_policy",
    f"--config.main.optim.learning_rate={LEARNING_RATE}",
    "--config.mgrpo.queries_per_step=2", "--config.mgrpo.rollouts_per_query=2",
    "--config.mgrpo.aligned_sub_calls=2", "--config.mgrpo.max_sub_calls=2",
    "--config.main.mesh.data=2", "--config.main.mesh.fsdp=2", "--config.main.mesh.tensor=2",
    "--config.main.sampling.max_new_tokens=96", "--config.sub.sampling.max_new_tokens=96",
    "--config.main.limits.max_turns=3", "--config.sub.limits.max_turns=3",
]
GIN = """import mgrpo_jax.training.agent_setup
import test_scale_multihost_trainer
mgrpo_jax.training.rollout_policy.wrapper = @test_scale_multihost_trainer.RequestKeyedMix
"""
COMPARED_METRICS = ("main/reward_mean", "main/correct_mean", "main/format_ok_mean",
                    "main/sampled_tokens", "sub/reward_mean", "sub/calls",
                    "shared/main_tokens", "shared/sub_tokens", "main/update/num_tokens")


class _PerRequest:
  """Calls `inner` once per request with a key derived from the request alone."""

  def __init__(self, inner):
    self.inner = inner

  @property
  def version(self) -> int:
    return self.inner.version

  def generate(self, requests, max_new_tokens, key):
    del key  # the batch's key: its rows would depend on the batch's composition
    outputs = []
    for request in requests:
      text = f"{request.key}/{len(request.history)}/{self.version}".encode()
      seed = int.from_bytes(hashlib.sha256(text).digest()[:4], "big") & 0x7FFFFFFF
      outputs += self.inner.generate([request], max_new_tokens, jax.random.key(seed))
    return outputs


@gin.configurable
def RequestKeyedMix(model_policy, tokenizer, role: str):  # noqa: N802 (gin name)
  """`trainer_policy_mix.ThinkingOracle`, each turn sampled on its own (module docstring)."""
  from tests.support import trainer_policy_mix

  return _PerRequest(trainer_policy_mix.ThinkingOracle(model_policy, tokenizer, role))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _command(workdir: pathlib.Path, *extra: str) -> list[str]:
  gin_path = workdir.parent / "keyed.gin"
  gin_path.write_text(GIN)
  return [sys.executable, str(ROOT / "launch" / "tpu_run.py"), "--slice=main",
          "--config=" + str(ROOT / "tests" / "support" / "plumbing_config.py"),
          f"--workdir={workdir}",
          f"--gin_file={gin_path}", *OVERRIDES, *extra]


def _env(devices: int) -> dict[str, str]:
  env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(
                 [str(ROOT / "tests" / "integration"), str(ROOT)]))
  env.pop("MGRPO_FAULT", None)
  return env


def _run_all(commands: list[tuple[list[str], dict[str, str]]], timeout: float) -> list[str]:
  procs = [subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True) for argv, env in commands]
  try:
    outputs = [p.communicate(timeout=timeout)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for p, out in zip(procs, outputs, strict=True):
    assert p.returncode == 0, out[-4000:]
  return outputs


def _flat_params(workdir: pathlib.Path, step: int) -> dict[str, np.ndarray]:
  import orbax.checkpoint as ocp

  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  with ocp.CheckpointManager(workdir / "checkpoints" / "main",
                             item_handlers={"state": ocp.StandardCheckpointHandler()}
                             ) as manager:
    saved = manager.item_metadata(step)["state"]  # saved on 1 or 2 processes' devices
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                          saved)
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target)))
  assert int(restored.state["step"]) == step
  return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf
          in jax.tree_util.tree_leaves_with_path(restored.state["params"])}


def _store_records(uri: pathlib.Path) -> dict[str, bytes]:
  from mgrpo_jax.store import open_store

  store = open_store(str(uri))
  return {key: store.get(key) for key in store.list()}


def _without_digests(records: dict[str, bytes]) -> dict[str, object]:
  """Store records with each rollout's sub-call digests replaced by their count."""
  out: dict[str, object] = {}
  for key, data in records.items():
    if not key.endswith("/outcomes"):
      out[key] = data
      continue
    record = json.loads(data)
    for query in record["queries"]:
      for rollout in query["rollouts"]:
        rollout["sub_calls"] = len(rollout["sub_calls"])
    out[key] = record
  return out


def _metric_lines(workdir: pathlib.Path) -> list[str]:
  return (workdir / "logs" / "main" / "metrics.jsonl").read_text().splitlines()


def test_two_processes_train_the_main_slice_like_one(tmp_path):
  from mgrpo_jax.metrics.writer import read_metrics

  single = tmp_path / "single" / "run"
  single.parent.mkdir()
  _run_all([(_command(single), _env(8))], timeout=600)

  multi = tmp_path / "multi" / "run"
  multi.parent.mkdir()
  shutil.copytree(single / "data", multi / "data")  # the world and tokenizer, built once
  port = _free_port()
  other_store = tmp_path / "multi" / "process1_store"
  distributed = [f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2"]
  outputs = _run_all([
      (_command(multi, *distributed, "--process_id=0"), _env(4)),
      (_command(multi, *distributed, "--process_id=1", f"--config.store.uri={other_store}"),
       _env(4))], timeout=600)

  # Process 0 logs the run; process 1 prints no log line and writes no store record.
  assert "main slice: done" in outputs[0]
  assert "main slice" not in outputs[1] and "loss" not in outputs[1], outputs[1][-2000:]
  assert not other_store.exists() or not _store_records(other_store)

  # One metrics file written by process 0 alone: per step its provisional line (before the
  # checkpoint, no checkpoint time) then its full line; one TensorBoard event file.
  lines = [json.loads(line) for line in _metric_lines(multi)]
  assert [m["step"] for m in lines] == [s for s in range(NUM_STEPS) for _ in range(2)]
  assert [("time/checkpoint_s" in m) for m in lines] == [False, True] * NUM_STEPS
  assert len(list((multi / "logs" / "main").rglob("events.out.tfevents*"))) == 1
  want = read_metrics(single / "logs" / "main" / "metrics.jsonl")
  got = read_metrics(multi / "logs" / "main" / "metrics.jsonl")
  assert [m["step"] for m in got] == list(range(NUM_STEPS))
  assert any(m["shared/sub_tokens"] > 0 for m in want), "S must be trained for the check"
  for w, g in zip(want, got, strict=True):
    for name in COMPARED_METRICS:
      assert g[name] == w[name], (w["step"], name, g[name], w[name])
    np.testing.assert_allclose(g["main/update/loss"], w["main/update/loss"], atol=1e-5)
    assert g["time/exchange_s"] >= 0.0 and "time/exchange_s" not in w

  # The same store records (outcomes and acks of both steps), but for the digests of S's
  # calls (module docstring).
  want_store = _store_records(single / "store")
  assert len(want_store) == 2 * NUM_STEPS
  assert _without_digests(_store_records(multi / "store")) == _without_digests(want_store)

  # The final parameters agree (module docstring), and the last update moved them far
  # beyond the tolerance.
  final = _flat_params(single, NUM_STEPS)
  before = _flat_params(single, NUM_STEPS - 1)
  got_final = _flat_params(multi, NUM_STEPS)
  assert sorted(got_final) == sorted(final) and len(final) > 5
  moved = np.concatenate([np.abs(final[k] - before[k]).ravel() for k in final])
  diff = np.concatenate([np.abs(got_final[k] - final[k]).ravel() for k in final])
  assert np.mean(moved > 1e-5) > 0.5, "the last update must move most parameters"
  assert np.mean(diff <= 1e-6) >= 0.999, np.sort(diff)[-20:]
  assert np.mean(diff <= 1e-5) >= 0.9995, np.sort(diff)[-20:]
  for name, value in final.items():
    np.testing.assert_allclose(got_final[name], value, atol=LEARNING_RATE * NUM_STEPS,
                               rtol=0, err_msg=name)
