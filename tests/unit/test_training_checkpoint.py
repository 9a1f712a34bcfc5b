"""Orbax checkpoints: bitwise round trip, exact resume, keep-N, restore onto another mesh."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.training import (
    AgentCheckpointer,
    CheckpointConfig,
    MeshConfig,
    OptimizerConfig,
    TrainBatch,
    UpdateConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
    make_update_fn,
    split_rng,
)

N, T = 8, 16
OPTIM = OptimizerConfig(learning_rate=1e-3, warmup_steps=3)


def _batch(seed: int) -> TrainBatch:
  rng = np.random.default_rng(seed)
  mask = (rng.random((N, T)) < 0.6).astype(np.float32)
  mask[:, 0] = 0.0
  return TrainBatch(
      ids=rng.integers(0, 256, (N, T)).astype(np.int32), loss_mask=mask,
      old_logp=(-5.5 + 0.3 * rng.standard_normal((N, T))).astype(np.float32),
      advantages=rng.standard_normal(N).astype(np.float32), weights=np.ones(N, np.float32))


def _state(shape=(2, 2, 2), seed: int = 0):
  mesh = create_mesh(MeshConfig(data=shape[0], fsdp=shape[1], tensor=shape[2]))
  return create_train_state(init_model(get_config("tiny"), seed=seed), make_optimizer(OPTIM),
                            mesh, seed=seed)


@pytest.fixture(scope="module")
def trained():
  """A layout, its update function, and the host copy of a state after two updates."""
  state, layout = _state()
  update = make_update_fn(layout, UpdateConfig(), N)
  for seed in (0, 1):
    state, _ = update(state, _batch(seed))
  state, _ = split_rng(state)
  return layout, update, jax.tree.map(np.asarray, state)


def _assert_bitwise_equal(got, want):
  got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for a, b in zip(got_leaves, want_leaves, strict=True):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


def test_round_trip_is_bitwise_and_resharded(tmp_path, trained):
  layout, update, host = trained
  state = jax.device_put(host, layout.shardings)
  metadata = {"data_iterator": {"index": 17, "seed": 3}, "policy_version": 2}
  with AgentCheckpointer(tmp_path / "main", layout) as checkpointer:
    assert checkpointer.restore() is None  # fresh start
    assert checkpointer.save(state, metadata=metadata)
    update(state, _batch(5))  # donates `state` while the async save may still be writing
  # A new process would build a fresh state (any init) and restore over it, here on a
  # different mesh shape than the one that saved.
  _, other_layout = _state(shape=(1, 8, 1), seed=9)
  with AgentCheckpointer(tmp_path / "main", other_layout) as checkpointer:
    assert checkpointer.all_steps() == [2]
    restored, restored_metadata = checkpointer.restore()
  _assert_bitwise_equal(restored, host)
  assert restored_metadata == metadata
  for array, sharding in zip(jax.tree.leaves(restored), jax.tree.leaves(other_layout.shardings),
                             strict=True):
    assert array.sharding.is_equivalent_to(sharding, array.ndim)
  assert restored.params["embedding"][...].addressable_shards[0].data.shape == (256, 8)


def test_resume_then_update_equals_uninterrupted(tmp_path, trained):
  layout, update, host = trained
  uninterrupted = jax.device_put(host, layout.shardings)
  for seed in (2, 3):
    uninterrupted, _ = update(uninterrupted, _batch(seed))

  state = jax.device_put(host, layout.shardings)
  state, _ = update(state, _batch(2))
  with AgentCheckpointer(tmp_path / "main", layout,
                         CheckpointConfig(async_save=False)) as checkpointer:
    checkpointer.save(state, metadata={"step": 3})
  del state
  # A restarted process: its own (differently initialized) state, layout and update.
  _, new_layout = _state(seed=5)
  new_update = make_update_fn(new_layout, UpdateConfig(), N)
  with AgentCheckpointer(tmp_path / "main", new_layout) as checkpointer:
    resumed, metadata = checkpointer.restore()
  assert metadata == {"step": 3} and int(resumed.step) == 3
  resumed, _ = new_update(resumed, _batch(3))
  _assert_bitwise_equal(resumed, uninterrupted)


def test_keep_and_every(tmp_path, trained):
  layout, _, host = trained
  config = CheckpointConfig(every=2, keep=2, async_save=True)
  with AgentCheckpointer(tmp_path / "sub", layout, config) as checkpointer:
    saved = []
    for step in range(1, 8):
      state = jax.device_put(host.replace(step=np.int32(step)), layout.shardings)
      saved.append(checkpointer.save(state, metadata={"step": step}))
    assert saved == [False, True, False, True, False, True, False]
    assert checkpointer.save(state, metadata={"step": 7}, force=True)
    checkpointer.wait_until_finished()
    assert checkpointer.all_steps() == [6, 7]
    _, metadata = checkpointer.restore(6)
    assert metadata == {"step": 6}
    with pytest.raises(FileNotFoundError, match="no checkpoint for step 4"):
      checkpointer.restore(4)


def test_keep_period_also_keeps_every_multiple(tmp_path, trained):
  """The held-out curve's checkpoints (`eval.every`) survive the newest-`keep` rule."""
  layout, _, host = trained
  config = CheckpointConfig(every=1, keep=2, async_save=False, keep_period=3)
  with AgentCheckpointer(tmp_path / "main", layout, config) as checkpointer:
    for step in range(0, 9):
      checkpointer.save(jax.device_put(host.replace(step=np.int32(step)), layout.shardings),
                        metadata={"step": step})
    checkpointer.wait_until_finished()
    assert checkpointer.all_steps() == [0, 3, 6, 7, 8]
  with pytest.raises(ValueError, match="checkpoint.keep_period"):
    CheckpointConfig(keep_period=-1)
