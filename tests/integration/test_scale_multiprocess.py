"""Two local processes with 4 CPU devices each form one 8-device mesh and run one update.

Each process joins through `jax.distributed` on loopback, builds the tiny model's train
state on the global (2, 2, 2) mesh, feeds only its own rows of the batch
(`process_rows` + `global_batch`; whole query groups by `process_queries`) and runs `make_update_fn`'s step. The updated
parameters must equal those of the same step in this (single) process on its 8 devices.
Run as a script, this file is one worker process.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
N, T = 8, 16
MESH_SHAPE = (2, 2, 2)
NUM_PROCESSES = 2


def _batch():
  from mgrpo_jax.training import TrainBatch

  rng = np.random.default_rng(0)
  mask = (rng.random((N, T)) < 0.6).astype(np.float32)
  mask[:, 0] = 0.0
  return TrainBatch(
      ids=rng.integers(0, 256, (N, T)).astype(np.int32), loss_mask=mask,
      old_logp=(-5.5 + 0.3 * rng.standard_normal((N, T))).astype(np.float32),
      advantages=rng.standard_normal(N).astype(np.float32),
      weights=np.array([1, 1, 2, 1, 0, 1, 1, 1], np.float32))


def _setup():
  """(train state, layout, update fn) of the tiny model on the global (2, 2, 2) mesh."""
  from mgrpo_jax.models import get_config, init_model
  from mgrpo_jax.training import (
    MeshConfig,
    OptimizerConfig,
    UpdateConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
    make_update_fn,
  )

  optim = OptimizerConfig(learning_rate=1e-3, eps=1e-4, weight_decay=0.1, grad_clip=1.0)
  mesh = create_mesh(MeshConfig(data=MESH_SHAPE[0], fsdp=MESH_SHAPE[1], tensor=MESH_SHAPE[2]))
  state, layout = create_train_state(init_model(get_config("tiny"), seed=1),
                                     make_optimizer(optim), mesh, seed=0)
  return state, layout, make_update_fn(layout, UpdateConfig(), N)


def _flat(params) -> dict[str, np.ndarray]:
  import jax

  return {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(params)}


def worker(port: int, process_id: int, out_dir: str) -> None:
  """One process of the two: joins, updates, and (process 0) writes the params."""
  import jax
  from jax.experimental import multihost_utils

  from mgrpo_jax.scale.distributed import (
    DistributedConfig,
    global_batch,
    initialize,
    is_writer,
    process_queries,
    process_rows,
    process_zero_only,
  )
  from mgrpo_jax.training import batch_shardings

  initialize(DistributedConfig(coordinator_address=f"127.0.0.1:{port}",
                               num_processes=NUM_PROCESSES, process_id=process_id,
                               initialization_timeout_s=60))
  assert jax.process_count() == NUM_PROCESSES and len(jax.local_devices()) == 4
  state, layout, update = _setup()
  shardings = batch_shardings(layout, N)
  rows = process_rows(shardings.ids, (N, T))
  full = _batch()
  local = jax.tree.map(lambda x: x[rows], full)
  new_state, metrics = update(state, global_batch(local, shardings, N))
  params = multihost_utils.process_allgather(new_state.params, tiled=True)
  loss = float(metrics["loss"].addressable_shards[0].data)  # replicated scalar

  @process_zero_only
  def write() -> str:
    path = pathlib.Path(out_dir) / "params.npz"
    np.savez(path, **_flat(params), __loss__=np.float32(loss))
    return str(path)

  written = write()
  assert (written is not None) == is_writer()
  queries = process_queries(shardings.advantages, 2, 4)  # B=2 queries x K=4 rollouts
  try:
    process_queries(shardings.advantages, 1, 8)          # one group of 8 over 2 processes
    split_error = ""
  except ValueError as e:
    split_error = str(e)
  (pathlib.Path(out_dir) / f"rows_{process_id}.txt").write_text(
      f"{rows.start} {rows.stop} {queries.start} {queries.stop}\n{split_error}")
  jax.distributed.shutdown()


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_form_one_mesh_and_match_the_single_process_update(tmp_path):
  import jax

  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
             JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
  port = _free_port()
  procs = [subprocess.Popen([sys.executable, __file__, str(port), str(i), str(tmp_path)],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
           for i in range(NUM_PROCESSES)]
  try:
    outputs = [p.communicate(timeout=300)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for p, out in zip(procs, outputs, strict=True):
    assert p.returncode == 0, out[-3000:]

  # Batch rows split over (data, fsdp) = 4 ways; process 0 holds devices 0-3 = data 0.
  # Queries: B=2 x K=4 gives each process one whole group; K=8 would split the group.
  reports = [(tmp_path / f"rows_{i}.txt").read_text().split("\n", 1)
             for i in range(NUM_PROCESSES)]
  assert [r[0].split() for r in reports] == [["0", "4", "0", "1"], ["4", "8", "1", "2"]]
  for _, split_error in reports:
    assert "split the groups of K=8" in split_error
  got = dict(np.load(tmp_path / "params.npz"))
  assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".npz") == ["params.npz"]

  assert len(jax.devices()) == 8
  state, _, update = _setup()
  initial = _flat(state.params)
  reference_state, reference_metrics = update(state, _batch())
  reference = _flat(reference_state.params)
  assert set(got) - {"__loss__"} == set(reference)
  moved = np.mean([np.max(np.abs(reference[k] - initial[k])) for k in reference])
  assert moved > 1e-4, "the step must move the parameters for the comparison to bite"
  for name, want in reference.items():
    np.testing.assert_allclose(got[name], want, atol=1e-6, rtol=0, err_msg=name)
  np.testing.assert_allclose(got["__loss__"], reference_metrics["loss"], rtol=1e-6)


if __name__ == "__main__":
  worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
