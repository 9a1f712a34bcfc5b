"""Multi-host helpers in one process: flag validation, writers, rows, global batches.

The two-process behaviour (a global mesh over two processes, each feeding its rows) is
tested in tests/integration/test_scale_multiprocess.py.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from mgrpo_jax.models.sharding import batch_sharding, make_mesh
from mgrpo_jax.training.distributed import (
    DistributedConfig,
    barrier,
    global_batch,
    initialize,
    is_writer,
    process_queries,
    process_rows,
    process_zero_only,
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
