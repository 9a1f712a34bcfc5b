"""The frozen reference policy: never updated, and the KL term uses it."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from mgrpo_jax.core.losses import kl_divergence
from mgrpo_jax.models import get_config, init_model, token_logprobs
from mgrpo_jax.training import (
    LossConfig,
    MeshConfig,
    OptimizerConfig,
    TokenSequence,
    UpdateConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
    make_update_fn,
    pack_sequences,
)

N = 8
logprobs = nnx.jit(token_logprobs)


def _batch():
  rng = np.random.default_rng(2)
  sequences = []
  for length in rng.integers(2, 15, N):
    mask = (rng.random(length) < 0.7).astype(np.float32)
    mask[0] = 0.0
    sequences.append(TokenSequence(ids=rng.integers(0, 256, length), loss_mask=mask,
                                   logp=-5.0 + rng.standard_normal(length)))
  return pack_sequences(sequences, rng.standard_normal(N), buckets=(16,))


def test_reference_policy_stays_frozen_and_feeds_the_kl():
  mesh = create_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
  optimizer = make_optimizer(OptimizerConfig(learning_rate=1e-3))
  state, layout = create_train_state(init_model(get_config("tiny"), seed=4), optimizer, mesh,
                                     seed=0, with_reference=True)
  initial = jax.tree.map(np.asarray, state.params)
  config = UpdateConfig(loss=LossConfig(kl_coef=0.5, aggregation="token_mean"))
  update = make_update_fn(layout, config, N)
  batch = _batch()
  state, first = update(state, batch)
  assert float(first["kl"]) == 0.0  # pi_theta == pi_ref before the first step
  state, _ = update(state, batch)
  on = batch.loss_mask > 0
  logp = np.asarray(logprobs(layout.model(state), batch.ids))
  ref_logp = np.asarray(logprobs(layout.reference_model(state), batch.ids))
  expected_kl = np.asarray(kl_divergence(logp, ref_logp, estimator="k3"))[on].mean()
  state, third = update(state, batch)
  assert expected_kl > 1e-6
  np.testing.assert_allclose(third["kl"], expected_kl, rtol=1e-4)
  np.testing.assert_allclose(third["loss"] - third["pg_loss"], 0.5 * expected_kl, rtol=1e-4)
  for ref, init, sharding in zip(jax.tree.leaves(state.ref_params), jax.tree.leaves(initial),
                                 jax.tree.leaves(layout.shardings.params), strict=True):
    assert np.array_equal(np.asarray(ref), init)
    assert ref.sharding.is_equivalent_to(sharding, ref.ndim)
  moved = max(float(np.max(np.abs(np.asarray(p) - i)))
              for p, i in zip(jax.tree.leaves(state.params), jax.tree.leaves(initial),
                              strict=True))
  assert moved > 1e-3
