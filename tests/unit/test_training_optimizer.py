"""AdamW schedule, clipping and weight-decay mask; config sections map onto the dataclasses."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mgrpo_jax.config.base import base_config
from mgrpo_jax.training import (
    CheckpointConfig,
    MeshConfig,
    OptimizerConfig,
    UpdateConfig,
    learning_rate_schedule,
    make_optimizer,
)


def test_warmup_then_constant():
  schedule = learning_rate_schedule(OptimizerConfig(learning_rate=0.4, warmup_steps=4))
  got = [float(schedule(t)) for t in range(7)]
  np.testing.assert_allclose(got, [0.1, 0.2, 0.3, 0.4, 0.4, 0.4, 0.4], rtol=1e-6)


def test_warmup_then_cosine_to_the_floor():
  config = OptimizerConfig(learning_rate=1.0, warmup_steps=2, schedule="cosine",
                           total_steps=6, final_lr_fraction=0.1)
  schedule = learning_rate_schedule(config)
  # After warm-up: 0.1 + 0.9 * (1 + cos(pi * s / 4)) / 2 for s = t - 2 in 0..4.
  expected = [0.5, 1.0] + [0.1 + 0.45 * (1 + np.cos(np.pi * s / 4)) for s in range(5)]
  np.testing.assert_allclose([float(schedule(t)) for t in range(7)], expected, rtol=1e-6)


def test_a_run_shorter_than_its_warm_up_ends_in_it():
  """A warm start of fewer optimizer steps than its warm-up (a handful of demonstrations,
  `warm_start.schedule=cosine`); the RL config's own check refuses such a run by name."""
  for total in (1, 3):
    schedule = learning_rate_schedule(OptimizerConfig(learning_rate=0.3, warmup_steps=3,
                                                      schedule="cosine", total_steps=total))
    np.testing.assert_allclose([float(schedule(t)) for t in range(total)],
                               [0.1, 0.2, 0.3][:total], rtol=1e-6)


def _params():
  return {"kernel": jnp.full((2, 2), 2.0), "scale": jnp.full((2,), 2.0)}


def test_first_step_is_clipped_adamw_with_decay_on_matrices_only():
  config = OptimizerConfig(learning_rate=0.1, weight_decay=0.5, grad_clip=1.0, eps=1e-8)
  tx = make_optimizer(config)
  params = _params()
  grads = {"kernel": jnp.full((2, 2), 3.0), "scale": jnp.full((2,), -4.0)}
  updates, _ = tx.update(grads, tx.init(params), params)
  new = optax.apply_updates(params, updates)
  # Clipping scales every gradient by the same positive factor; Adam's first step is
  # then lr * sign(g); decoupled decay lr * wd * theta applies to the matrix only.
  np.testing.assert_allclose(new["kernel"], 2.0 - 0.1 * (1.0 + 0.5 * 2.0), rtol=1e-5)
  np.testing.assert_allclose(new["scale"], 2.0 + 0.1, rtol=1e-5)


def test_clipping_bounds_the_gradient_norm_seen_by_adam():
  tx = make_optimizer(OptimizerConfig(learning_rate=1.0, grad_clip=1.0, weight_decay=0.0,
                                      b1=0.0, b2=0.0, eps=1.0))
  params = {"w": jnp.zeros((4,))}
  grads = {"w": jnp.full((4,), 10.0)}  # norm 20 -> clipped to 1: each entry 0.5
  updates, _ = tx.update(grads, tx.init(params), params)
  # b1 = b2 = 0: update = -g / (|g| + eps) = -0.5 / 1.5.
  np.testing.assert_allclose(updates["w"], -0.5 / 1.5, rtol=1e-6)
  no_clip = make_optimizer(OptimizerConfig(learning_rate=1.0, grad_clip=0.0, weight_decay=0.0,
                                           b1=0.0, b2=0.0, eps=1.0))
  updates, _ = no_clip.update(grads, no_clip.init(params), params)
  np.testing.assert_allclose(updates["w"], -10.0 / 11.0, rtol=1e-6)


def test_bad_settings_name_the_field():
  with pytest.raises(ValueError, match="optim.schedule"):
    OptimizerConfig(schedule="linear")
  with pytest.raises(ValueError, match="total_steps"):
    OptimizerConfig(schedule="cosine", warmup_steps=5, total_steps=0)
  with pytest.raises(ValueError, match="total_steps"):
    OptimizerConfig(schedule="cosine", warmup_steps=5)
  with pytest.raises(ValueError, match="optim.b1"):
    OptimizerConfig(b1=1.0)
  with pytest.raises(ValueError, match="mesh.tensor"):
    MeshConfig(tensor=0)
  with pytest.raises(ValueError, match="old_logp"):
    UpdateConfig(old_logp="cached")
  with pytest.raises(ValueError, match="checkpoint.keep"):
    CheckpointConfig(keep=0)


def test_config_sections_map_onto_the_dataclasses():
  config = base_config()
  config.sub.optim.learning_rate = 3e-6
  config.sub.optim.schedule = "cosine"
  config.sub.optim.micro_batch_size = 16
  config.sub.loss.kl_coef = 0.05
  config.sub.mesh.fsdp = 4
  optim = OptimizerConfig.from_config(config.sub.optim, total_steps=config.experiment.num_steps)
  assert (optim.learning_rate, optim.schedule, optim.total_steps) == (3e-6, "cosine", 10)
  assert (optim.b2, optim.grad_clip, optim.weight_decay) == (0.98, 1.0, 0.1)
  update = UpdateConfig.from_config(config.sub)
  assert update.micro_batch_size == 16 and update.with_reference
  assert update.loss.max_len == config.sub.limits.max_context
  assert (update.loss.clip_low, update.loss.clip_high) == (0.2, 0.28)
  assert MeshConfig.from_config(config.sub.mesh).shape == (1, 4, 1)
  assert CheckpointConfig.from_config(config.checkpoint) == CheckpointConfig(keep=3, async_save=True)
