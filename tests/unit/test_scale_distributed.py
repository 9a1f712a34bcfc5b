"""Multi-host helpers in one process: flag validation, writers, rows, global batches,
the query assignment of rollouts, and the host-data exchanges (identities here).

The two-process behaviour (a global mesh over two processes, each feeding its rows) is
tested in tests/integration/test_scale_multiprocess.py.
"""

from __future__ import annotations

import jax
import ml_collections
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models.sharding import batch_sharding, make_mesh
from mgrpo_jax.scale.distributed import (
    DistributedConfig,
    allgather_bytes,
    assign_queries,
    barrier,
    broadcast_arrays,
    broadcast_bytes,
    global_batch,
    initialize,
    is_writer,
    local_replica,
    process_queries,
    process_rows,
    process_zero_only,
    rollout_queries,
    shard_host_batch,
)


@pytest.mark.parametrize("kwargs,mode", [
    ({}, "single"),
    ({"coordinator_address": "auto"}, "auto"),
    ({"coordinator_address": "10.0.0.2:8476", "num_processes": 4, "process_id": 3},
     "explicit"),
    ({"coordinator_address": "[::1]:1234", "num_processes": 2}, "explicit"),
])
def test_modes(kwargs, mode):
  assert DistributedConfig(**kwargs).mode == mode


@pytest.mark.parametrize("kwargs,message", [
    ({"num_processes": 0}, "num_processes must be >= 1, got 0"),
    ({"coordinator_address": "h:1", "num_processes": 2, "process_id": 2},
     r"process_id must be in \[0, num_processes=2\), got 2"),
    ({"num_processes": 2}, "need an explicit coordinator_address host:port"),
    ({"coordinator_address": "auto", "process_id": 0, "num_processes": 3},
     "need an explicit coordinator_address"),
    ({"coordinator_address": "localhost"}, "must be '', 'auto' or host:port, got 'localhost'"),
    ({"coordinator_address": "h:99999"}, "host:port, got 'h:99999'"),
    ({"coordinator_address": ":80"}, "host:port, got ':80'"),
    ({"initialization_timeout_s": 0}, "initialization_timeout_s must be >= 1"),
])
def test_bad_settings_are_rejected_naming_them(kwargs, message):
  with pytest.raises(ValueError, match=message):
    DistributedConfig(**kwargs)


def test_single_process_initialize_is_a_no_op_and_process_zero_writes():
  initialize(DistributedConfig())
  assert jax.process_count() == 1 and is_writer()
  barrier("single")  # returns at once with one process
  calls = []

  @process_zero_only
  def write(value: int) -> int:
    """Writes a record."""
    calls.append(value)
    return value * 2

  assert write(21) == 42 and calls == [21]
  assert write.__name__ == "write" and write.__doc__ == "Writes a record."


@pytest.mark.parametrize("shape", [(2, 2, 2), (1, 1, 8), (8, 1, 1)])
def test_one_process_holds_all_rows_and_builds_the_same_global_batch(shape):
  mesh = make_mesh(shape)
  n, t = 16, 5
  sharding = batch_sharding(mesh, n, 2)
  assert process_rows(sharding, (n, t)) == slice(0, n)
  assert process_queries(batch_sharding(mesh, n, 1), 4, 4) == slice(0, 4)
  ids = np.arange(n * t, dtype=np.int32).reshape(n, t)
  weights = np.linspace(0, 1, n, dtype=np.float32)
  batch = global_batch({"ids": ids, "weights": weights},
                       {"ids": sharding, "weights": batch_sharding(mesh, n, 1)}, n)
  np.testing.assert_array_equal(np.asarray(batch["ids"]), ids)
  np.testing.assert_array_equal(np.asarray(batch["weights"]), weights)
  assert batch["ids"].sharding.is_equivalent_to(sharding, 2)
  rows_per_device = n // (shape[0] * shape[1])
  assert batch["ids"].addressable_shards[0].data.shape == (rows_per_device, t)


@pytest.mark.parametrize("rows,k,want", [
    # (2, 2, 2) over 2 processes: each holds its own rows -> its own queries.
    ([slice(0, 4), slice(4, 8)], 2, [slice(0, 2), slice(2, 4)]),
    # Batch replicated over all 3 processes: 6 queries shared out 2 / 2 / 2.
    ([slice(0, 12)] * 3, 2, [slice(0, 2), slice(2, 4), slice(4, 6)]),
    # 4 processes, data=2 spans process pairs: pairs share their 3 queries 1 / 2.
    ([slice(0, 12), slice(0, 12), slice(12, 24), slice(12, 24)], 4,
     [slice(0, 1), slice(1, 3), slice(3, 4), slice(4, 6)]),
])
def test_each_query_is_rolled_out_by_exactly_one_process(rows, k, want):
  got = [assign_queries(rows, p, k) for p in range(len(rows))]
  assert got == want
  covered = [q for part in got for q in range(part.start, part.stop)]
  assert covered == list(range(max(r.stop for r in rows) // k))


@pytest.mark.parametrize("rows,k,message", [
    ([slice(0, 3), slice(3, 6)], 2, r"holds rollouts \[0, 3\), which split the groups of K=2"),
    ([slice(0, 4)] * 3, 2, r"queries \[0, 2\) are held by processes \[0, 1, 2\]"),
])
def test_query_assignments_that_cannot_work_are_rejected(rows, k, message):
  with pytest.raises(ValueError, match=message):
    assign_queries(rows, 0, k)


def test_one_process_rolls_out_every_query_and_exchanges_are_identities():
  mesh = make_mesh((2, 2, 2))
  assert rollout_queries(batch_sharding(mesh, 8, 1), 4, 2) == slice(0, 4)
  with pytest.raises(ValueError, match="has no device of process 1"):
    process_rows(batch_sharding(mesh, 8, 1), (8,), process_index=1)
  assert allgather_bytes(b"records") == [b"records"]
  assert broadcast_bytes(b"cache") == b"cache" and broadcast_bytes(None) == b""
  arrays = {"ids": np.arange(6, dtype=np.int32).reshape(2, 3),
            "weights": np.array([0.5, 1.0], np.float32)}
  got = broadcast_arrays(arrays)
  assert sorted(got) == ["ids", "weights"]
  for name, value in arrays.items():
    np.testing.assert_array_equal(got[name], value)
    assert got[name].dtype == value.dtype


def test_host_batch_and_local_replica_keep_values_and_take_the_given_shardings():
  mesh = make_mesh((2, 2, 2))
  n, t = 8, 3
  full = {"ids": np.arange(n * t, dtype=np.int32).reshape(n, t),
          "advantages": np.linspace(-1, 1, n, dtype=np.float32)}
  shardings = {"ids": batch_sharding(mesh, n, 2), "advantages": batch_sharding(mesh, n, 1)}
  batch = shard_host_batch(full, shardings)
  for name, value in full.items():
    np.testing.assert_array_equal(np.asarray(batch[name]), value)
    assert batch[name].sharding == shardings[name]
  params = {"w": jax.device_put(np.arange(16, dtype=np.float32).reshape(4, 4),
                                jax.sharding.NamedSharding(
                                    mesh, jax.sharding.PartitionSpec("fsdp", "tensor")))}
  local = jax.sharding.SingleDeviceSharding(jax.devices()[3])
  copy = local_replica(params, {"w": local})
  np.testing.assert_array_equal(np.asarray(copy["w"]), np.asarray(params["w"]))
  assert copy["w"].sharding == local


def test_slice_helpers_with_one_process_are_the_single_process_code(tmp_path):
  from mgrpo_jax.metrics import MetricsWriter
  from mgrpo_jax.models import get_config, init_model
  from mgrpo_jax.scale.multihost import device_batch, rollout_model, servable_params
  from mgrpo_jax.scale.writers import metrics_writer
  from mgrpo_jax.training import MeshConfig, create_mesh, create_train_state
  from mgrpo_jax.training.batching import TrainBatch
  from mgrpo_jax.training.optimizer import OptimizerConfig, make_optimizer
  from mgrpo_jax.training.paths import RunPaths

  state, layout = create_train_state(init_model(get_config("tiny"), seed=0),
                                     make_optimizer(OptimizerConfig()),
                                     create_mesh(MeshConfig(fsdp=2, tensor=2)), seed=0)
  state_leaves = jax.tree.leaves(state.params)
  model_leaves = jax.tree.leaves(nnx.state(rollout_model(layout, state)))
  assert all(a is b for a, b in zip(model_leaves, state_leaves, strict=True))
  copies = jax.tree.leaves(servable_params(layout, state))
  for copy, leaf in zip(copies, state_leaves, strict=True):
    assert copy is not leaf and copy.sharding == leaf.sharding
    np.testing.assert_array_equal(np.asarray(copy), np.asarray(leaf))
  batch = TrainBatch(ids=np.zeros((4, 3), np.int32), loss_mask=np.zeros((4, 3), np.float32),
                     old_logp=np.zeros((4, 3), np.float32),
                     advantages=np.zeros(4, np.float32), weights=np.ones(4, np.float32))
  assert device_batch(layout, batch) is batch

  paths = RunPaths(workdir=str(tmp_path), local=tmp_path, store_uri=str(tmp_path / "store"))
  writer = metrics_writer(paths, "main",
                          ml_collections.ConfigDict({"logging": {
                              "tensorboard": False, "wandb": {"enabled": False}}}))
  assert isinstance(writer, MetricsWriter)  # process 0 writes
  writer.write(0, {"main/reward_mean": 0.5})
  writer.close()
  assert (tmp_path / "logs" / "main" / "metrics.jsonl").read_text().count("\n") == 1
