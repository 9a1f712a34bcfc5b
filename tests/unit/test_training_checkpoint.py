"""Orbax checkpoints: bitwise round trip, exact resume, keep-N, restore onto another mesh."""

from __future__ import annotations

import re
import threading

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


def test_keep(tmp_path, trained):
  layout, _, host = trained
  config = CheckpointConfig(keep=2, async_save=True)
  with AgentCheckpointer(tmp_path / "sub", layout, config) as checkpointer:
    saved = []
    for step in (2, 4, 6):
      state = jax.device_put(host.replace(step=np.int32(step)), layout.shardings)
      saved.append(checkpointer.save(state, metadata={"step": step}))
    assert saved == [True, True, True]
    state = jax.device_put(host.replace(step=np.int32(7)), layout.shardings)
    assert checkpointer.save(state, metadata={"step": 7}, force=True)
    checkpointer.wait_until_finished()
    assert checkpointer.all_steps() == [6, 7]
    _, metadata = checkpointer.restore(6)
    assert metadata == {"step": 6}
    with pytest.raises(FileNotFoundError, match="no checkpoint for step 4"):
      checkpointer.restore(4)


def test_two_threads_saving_at_once_keep_every_checkpoint_whole(tmp_path, trained):
  """`--slice=both` saves M's and S's checkpoints from two threads of one process; orbax's
  process-wide save state once let them finalise each other's folders ("File exists",
  a missing `metadata`). Every save of both threads must land whole."""
  layout, _, host = trained
  steps = range(1, 16)
  errors: list[BaseException] = []

  def save_all(name: str) -> None:
    try:
      with AgentCheckpointer(tmp_path / name, layout, CheckpointConfig(keep=2)) as checkpointer:
        for step in steps:
          state = jax.device_put(host.replace(step=np.int32(step)), layout.shardings)
          checkpointer.save(state, force=True, metadata={"who": name, "step": step})
          checkpointer.wait_until_finished()
    except BaseException as e:  # noqa: BLE001 (re-raised by the assertion below)
      errors.append(e)

  threads = [threading.Thread(target=save_all, args=(name,)) for name in ("main", "sub")]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert not errors, errors
  for name in ("main", "sub"):
    with AgentCheckpointer(tmp_path / name, layout) as checkpointer:
      assert checkpointer.all_steps() == [steps[-2], steps[-1]]
      state, metadata = checkpointer.restore()
    assert metadata == {"who": name, "step": steps[-1]}
    _assert_bitwise_equal(jax.tree.map(np.asarray, state.params), host.params)


def test_keep_period_also_keeps_every_multiple(tmp_path, trained):
  """The held-out curve's checkpoints (`eval.every`) survive the newest-`keep` rule."""
  layout, _, host = trained
  config = CheckpointConfig(keep=2, async_save=False, keep_period=3)
  with AgentCheckpointer(tmp_path / "main", layout, config) as checkpointer:
    for step in range(0, 9):
      checkpointer.save(jax.device_put(host.replace(step=np.int32(step)), layout.shardings),
                        metadata={"step": step})
    checkpointer.wait_until_finished()
    assert checkpointer.all_steps() == [0, 3, 6, 7, 8]
  with pytest.raises(ValueError, match="checkpoint.keep_period"):
    CheckpointConfig(keep_period=-1)


def _garbage_arrays(folder):
  for path in (folder / "state" / "ocdbt.process_0" / "d").iterdir():
    path.write_bytes(b"\x00garbage" * 10)


def _garbage_metadata(folder):
  (folder / "metadata" / "metadata").write_bytes(b"{not json")


def _no_tree_metadata(folder):
  (folder / "state" / "_METADATA").unlink()


@pytest.mark.parametrize("corrupt", [_garbage_arrays, _garbage_metadata, _no_tree_metadata])
def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, trained, corrupt,
                                                                    caplog):
  layout, _, host = trained
  config = CheckpointConfig(async_save=False)
  with AgentCheckpointer(tmp_path / "main", layout, config) as checkpointer:
    for step in (1, 2, 3):
      checkpointer.save(jax.device_put(host.replace(step=np.int32(step)), layout.shardings),
                        metadata={"steps_done": step})
  corrupt(tmp_path / "main" / "3")
  with AgentCheckpointer(tmp_path / "main", layout, config) as checkpointer:
    with caplog.at_level("WARNING"):
      state, metadata = checkpointer.restore()
    assert metadata == {"steps_done": 2} and int(state.step) == 2
    _assert_bitwise_equal(state.params, host.params)
    assert checkpointer.all_steps() == [1, 2]
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert f"{tmp_path / 'main' / '3'} (step 3) cannot be restored" in warning
    assert "falling back to step 2" in warning
    assert (tmp_path / "main" / "3.corrupt" / "state").is_dir()  # kept for inspection
    # the resumed run saves step 3 afresh, and a later restore reads it
    assert checkpointer.save(jax.device_put(host.replace(step=np.int32(3)), layout.shardings),
                             metadata={"steps_done": 3})
  with AgentCheckpointer(tmp_path / "main", layout, config) as checkpointer:
    assert checkpointer.restore()[1] == {"steps_done": 3}


def test_no_restorable_checkpoint_is_an_error_naming_the_folder(tmp_path, trained):
  layout, _, host = trained
  config = CheckpointConfig(async_save=False)
  with AgentCheckpointer(tmp_path / "sub", layout, config) as checkpointer:
    for step in (1, 2):
      checkpointer.save(jax.device_put(host.replace(step=np.int32(step)), layout.shardings))
  for step in (1, 2):
    _garbage_metadata(tmp_path / "sub" / str(step))
  with AgentCheckpointer(tmp_path / "sub", layout, config) as checkpointer:
    with pytest.raises(RuntimeError, match=re.escape(
        f"no checkpoint in {tmp_path / 'sub'} can be restored (steps [2, 1]); the newest, "
        f"{tmp_path / 'sub'}/2: JSONDecodeError")):
      checkpointer.restore()
    assert checkpointer.all_steps() == [1, 2]  # nothing moved when nothing can replace it
    with pytest.raises(ValueError):  # an explicit step is not replaced by another
      checkpointer.restore(2)


def test_orbax_does_not_report_the_callers_own_wait_for_a_save(caplog):
  """A slice waits for every save (its ack promises a durable checkpoint); orbax would
  report that wait at the next save as a warning. Its other warnings still show."""
  from absl import logging as absl_logging

  import mgrpo_jax.training.checkpoint  # noqa: F401 (installs the filter)

  with caplog.at_level("WARNING"):
    absl_logging.warning("Waiting for previous save to complete took %f seconds. If this "
                         "number is high, consider checkpointing less frequently.", 2.5)
    absl_logging.warning("Something else took %f seconds.", 2.5)
  assert [r.getMessage() for r in caplog.records] == ["Something else took 2.500000 seconds."]
