"""Orbax checkpoints of a train state on `gs://`, through the fake-gcs-server emulator."""

from __future__ import annotations

import jax
import numpy as np
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.training import (
    AgentCheckpointer,
    CheckpointConfig,
    MeshConfig,
    OptimizerConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
    split_rng,
)


def _state(seed: int):
  mesh = create_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
  return create_train_state(init_model(get_config("tiny"), seed=seed),
                            make_optimizer(OptimizerConfig()), mesh, seed=seed,
                            with_reference=True)


def test_gcs_round_trip_keep_and_resume(gcs_bucket):
  directory = f"gs://{gcs_bucket}/runs/r1/checkpoints/sub"
  state, layout = _state(seed=0)
  config = CheckpointConfig(keep=2, async_save=True)
  snapshots = {}
  with AgentCheckpointer(directory, layout, config) as checkpointer:
    assert checkpointer.restore() is None
    for step in (1, 2, 3):
      state, _ = split_rng(state.replace(step=state.step + 1))
      snapshots[step] = jax.tree.map(np.asarray, state)
      assert checkpointer.save(state, metadata={"policy_version": step})
  _, other_layout = _state(seed=1)
  with AgentCheckpointer(directory, other_layout) as checkpointer:
    assert checkpointer.all_steps() == [2, 3]
    restored, metadata = checkpointer.restore()
  assert metadata == {"policy_version": 3}
  for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(snapshots[3]), strict=True):
    assert np.asarray(got).tobytes() == want.tobytes()
  assert int(restored.step) == 3
  # The objects are really in the bucket (not in a local folder named "gs:").
  client = storage.Client(credentials=AnonymousCredentials(), project="test")
  names = [blob.name for blob in client.list_blobs(gcs_bucket, prefix="runs/r1/checkpoints/sub/")]
  steps = {name.split("/")[4] for name in names}
  assert {"2", "3"} <= steps and "1" not in steps, sorted(steps)
