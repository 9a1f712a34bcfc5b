"""Sharded update on the 8-device CPU mesh equals the single-device update."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.training import (
    MeshConfig,
    OptimizerConfig,
    TrainBatch,
    UpdateConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
    make_update_fn,
)

N, T = 8, 16
# Adam's first step is lr * g / (|g| + eps): for coordinates with |g| near 0 it turns
# float-reassociation noise of the sharded gradient (~1e-9) into up to lr of parameter
# change. eps = 1e-4 bounds that amplification to lr * 1e-5; a real sharding error
# changes the gradient by O(1) and the parameters by O(lr) = 1e-3, far above 1e-5.
OPTIM = OptimizerConfig(learning_rate=1e-3, eps=1e-4, weight_decay=0.1, grad_clip=1.0)


def _batch() -> TrainBatch:
  rng = np.random.default_rng(0)
  mask = (rng.random((N, T)) < 0.6).astype(np.float32)
  mask[:, 0] = 0.0
  mask[5] = 0.0  # an empty row
  return TrainBatch(
      ids=rng.integers(0, 256, (N, T)).astype(np.int32), loss_mask=mask,
      old_logp=(-5.5 + 0.3 * rng.standard_normal((N, T))).astype(np.float32),
      advantages=rng.standard_normal(N).astype(np.float32),
      weights=np.array([1, 1, 2, 1, 0, 1, 1, 1], np.float32))


def _one_step(shape: tuple[int, int, int]):
  mesh = create_mesh(MeshConfig(data=shape[0], fsdp=shape[1], tensor=shape[2]))
  state, layout = create_train_state(init_model(get_config("tiny"), seed=1),
                                     make_optimizer(OPTIM), mesh, seed=0)
  initial = jax.tree.map(np.asarray, state.params)
  update = make_update_fn(layout, UpdateConfig(), N)
  new_state, metrics = update(state, _batch())
  return new_state, layout, metrics, initial


@pytest.fixture(scope="module")
def steps():
  """One update per mesh shape, computed once for the module (compiles are the cost)."""
  cache = {}

  def get(shape):
    if shape not in cache:
      cache[shape] = _one_step(shape)
    return cache[shape]

  return get


@pytest.mark.parametrize("shape", [(8, 1, 1), (2, 4, 1), (2, 2, 2)])
def test_sharded_update_equals_single_device(steps, shape):
  single, _, reference_metrics, initial = steps((1, 1, 1))
  reference = jax.tree.map(np.asarray, single.params)
  state, layout, metrics, _ = steps(shape)
  moved = [np.max(np.abs(r - i)) for r, i in
           zip(jax.tree.leaves(reference), jax.tree.leaves(initial), strict=True)]
  assert np.mean(moved) > 1e-4, "the step must move the parameters for the check to bite"
  for got, want in zip(jax.tree.leaves(state.params), jax.tree.leaves(reference), strict=True):
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5, rtol=0)
  for name in ("loss", "grad_norm", "num_tokens", "clip_frac_high", "logp_diff_mean"):
    np.testing.assert_allclose(metrics[name], reference_metrics[name], rtol=1e-5, atol=1e-6)
  # The update keeps every array in the layout's sharding.
  for array, sharding in zip(jax.tree.leaves(state), jax.tree.leaves(layout.shardings),
                             strict=True):
    assert array.sharding.is_equivalent_to(sharding, array.ndim)


def _shard_shape(array) -> tuple[int, ...]:
  return array.addressable_shards[0].data.shape


def test_params_and_moments_are_sharded_by_the_rules(steps):
  state, layout, _, _ = steps((2, 2, 2))
  params = state.params
  adam = state.opt_state[1][0]  # chain(clip, adamw): adamw = (scale_by_adam, ...)
  layer = params["layers"][0]
  # (vocab -> tensor, embed -> fsdp): [256, 64] / (2, 2)
  assert _shard_shape(params["embedding"][...]) == (128, 32)
  assert tuple(params["embedding"][...].sharding.spec) == ("tensor", "fsdp")
  # q (embed -> fsdp, heads -> tensor): [64, 128] / (2, 2); down (mlp, embed): [128, 64]
  assert _shard_shape(layer["attn"]["q_proj"]["kernel"][...]) == (32, 64)
  assert _shard_shape(layer["mlp"]["down_proj"]["kernel"][...]) == (64, 32)
  assert _shard_shape(params["final_norm"]["scale"][...]) == (64,)  # replicated
  # The Adam moments follow their parameter; the step count is replicated.
  for moments in (adam.mu, adam.nu):
    for moment, param in zip(jax.tree.leaves(moments), jax.tree.leaves(params), strict=True):
      assert moment.sharding.is_equivalent_to(param.sharding, param.ndim)
  assert _shard_shape(moments["embedding"][...]) == (128, 32)
  assert adam.count.sharding.is_fully_replicated
  assert state.step.sharding.is_fully_replicated and int(state.step) == 1
  assert layout.mesh.shape == {"data": 2, "fsdp": 2, "tensor": 2}


def test_data_parallel_axes_replicate_and_fsdp_splits(steps):
  data_only, _, _, _ = steps((8, 1, 1))
  assert data_only.params["embedding"][...].sharding.is_fully_replicated
  state, _, _, _ = steps((2, 4, 1))  # embed over fsdp = 4, vocab over tensor = 1
  assert _shard_shape(state.params["embedding"][...]) == (256, 16)
  assert _shard_shape(state.opt_state[1][0].nu["embedding"][...]) == (256, 16)
  assert _shard_shape(state.params["layers"][1]["mlp"]["up_proj"]["kernel"][...]) == (16, 128)
