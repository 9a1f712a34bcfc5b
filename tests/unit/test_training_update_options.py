"""Update options: recomputed old log-probs; right padding is inert."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import get_config, init_model, token_logprobs
from mgrpo_jax.training import (
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
logprobs = nnx.jit(token_logprobs)  # the eager model is slow to dispatch op by op
OPTIM = OptimizerConfig(learning_rate=1e-3, eps=1e-4)  # eps: see test_training_sharding.py


def _sequences(seed: int) -> list[TokenSequence]:
  rng = np.random.default_rng(seed)
  out = []
  for length in rng.integers(2, 15, N):
    mask = (rng.random(length) < 0.7).astype(np.float32)
    mask[0] = 0.0
    out.append(TokenSequence(ids=rng.integers(0, 256, length),
                             loss_mask=mask, logp=-5.0 + rng.standard_normal(length)))
  return out


def _advantages(seed: int) -> np.ndarray:
  return np.random.default_rng(seed + 100).standard_normal(N).astype(np.float32)


@pytest.fixture(scope="module")
def mesh():
  return create_mesh(MeshConfig(data=2, fsdp=2, tensor=2))


def _state(mesh, with_reference: bool = False):
  return create_train_state(init_model(get_config("tiny"), seed=4), make_optimizer(OPTIM),
                            mesh, seed=0, with_reference=with_reference)


def _assert_trees_close(a, b, atol):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


@pytest.fixture(scope="module")
def sampler_update(mesh):
  _, layout = _state(mesh)
  return make_update_fn(layout, UpdateConfig(), N)


def test_recomputed_old_logp_equals_passing_the_trainers_logp(mesh, sampler_update):
  batch = pack_sequences(_sequences(0), _advantages(0), buckets=(16,))
  state, layout = _state(mesh)
  trainer_logp = np.asarray(logprobs(layout.model(state), batch.ids))
  recompute = make_update_fn(layout, UpdateConfig(old_logp="recompute"), N)
  new_state, metrics = recompute(state, batch)

  reference_state, _ = _state(mesh)
  on_policy = batch.replace(old_logp=np.where(batch.loss_mask > 0, trainer_logp, 0.0))
  expected_state, expected = sampler_update(reference_state, on_policy)
  _assert_trees_close(new_state.params, expected_state.params, atol=1e-6)
  np.testing.assert_allclose(metrics["loss"], expected["loss"], rtol=1e-5)
  assert float(metrics["ratio_mean"]) == 1.0 and float(metrics["ratio_max"]) == 1.0
  assert float(metrics["clip_frac_low"]) == 0.0 and float(metrics["clip_frac_high"]) == 0.0
  # The diagnostics still compare the trainer with the sampler's reported log-probs.
  on = batch.loss_mask > 0
  np.testing.assert_allclose(metrics["logp_diff_mean"],
                             np.abs(trainer_logp - batch.old_logp)[on].mean(), rtol=1e-5)


def test_right_padding_is_inert(mesh, sampler_update):
  sequences, advantages = _sequences(1), _advantages(1)
  short = pack_sequences(sequences, advantages, buckets=(16,))
  long = pack_sequences(sequences, advantages, buckets=(48,))
  long.ids[:, 16:] = 7  # padding content must not matter either
  assert short.shape == (N, 16) and long.shape == (N, 48)
  results = []
  for batch in (short, long):
    state, _ = _state(mesh)
    results.append(sampler_update(state, batch))
  (state_short, metrics_short), (state_long, metrics_long) = results
  _assert_trees_close(state_short.params, state_long.params, atol=1e-6)
  for name in ("loss", "num_tokens", "ratio_max", "logp_diff_mean"):
    np.testing.assert_allclose(metrics_short[name], metrics_long[name], rtol=1e-5)
