"""Each jitted core function compiles once for a given set of shapes and options.

Shapes here are unusual on purpose (not used by other tests), so the first call in the
scope is a fresh compilation in any test order.
"""

from __future__ import annotations

import jax
import numpy as np

from mgrpo_jax.core import advantages, alignment, losses, rewards
from mgrpo_jax.utils.compile_counter import CompileCounter

Q, K, D, T = 3, 5, 7, 11


def _compiles(fn, *args, **kwargs) -> int:
  with CompileCounter() as counter:
    jax.block_until_ready(fn(*args, **kwargs))
    jax.block_until_ready(fn(*args, **kwargs))
  return counter.count


def test_advantages_compile_once():
  rng = np.random.default_rng(0)
  main = rng.random((Q, K)).astype(np.float32)
  sub = rng.random((Q, K, D)).astype(np.float32)
  valid = rng.random((Q, K, D)) < 0.5
  assert _compiles(advantages.group_normalize, sub, valid, std="unbiased", eps=1e-6) == 1
  assert _compiles(advantages.mgrpo_advantages, main, sub, valid) == 1


def test_alignment_compiles_once_per_mode():
  counts = np.arange(Q * K, dtype=np.int32).reshape(Q, K)
  key = jax.random.key(0)
  assert _compiles(alignment.align_indices, counts, D, key) == 1
  assert _compiles(alignment.align_indices, counts, D, key, mode="mask") == 1
  assert _compiles(alignment.alignment_stats, counts, D) == 1
  # A new key of the same type reuses the compiled program.
  other = jax.random.key(1)
  with CompileCounter() as counter:
    jax.block_until_ready(alignment.align_indices(counts, D, other))
  assert counter.count == 0


def test_policy_loss_compiles_once_and_not_per_hyperparameter_value():
  rng = np.random.default_rng(1)
  n = Q * K * D
  logp = np.log(rng.uniform(0.1, 1, (n, T))).astype(np.float32)
  old = logp + 0.01
  ref = logp - 0.02
  adv = rng.normal(size=n).astype(np.float32)
  mask = rng.random((n, T)) < 0.8
  assert _compiles(losses.policy_loss, logp, old, adv, mask) == 1
  surrogate = losses.Surrogate(ratio="sequence", aggregation="token_mean", kl_coef=0.1,
                               clip_ratio_c=3.0)
  assert _compiles(losses.policy_loss, logp, old, adv, mask, surrogate=surrogate,
                   ref_logp=ref) == 1
  with CompileCounter() as counter:  # new clip values reuse the compiled program
    jax.block_until_ready(losses.policy_loss(
        logp, old, adv, mask, surrogate=losses.Surrogate(clip_low=0.1, clip_high=0.3)))
  assert counter.count == 0
  assert _compiles(losses.loss_normalizer, mask, aggregation="token_mean") == 1
  assert _compiles(losses.kl_divergence, logp, ref, estimator="k2") == 1


def test_user_jitted_train_step_compiles_once():
  rng = np.random.default_rng(2)
  logp = np.log(rng.uniform(0.1, 1, (Q * K, T + 2))).astype(np.float32)
  adv = rng.normal(size=Q * K).astype(np.float32)
  mask = rng.random((Q * K, T + 2)) < 0.8

  @jax.jit
  def step(lp, old, a, m):
    return jax.value_and_grad(lambda x: losses.policy_loss(x, old, a, m)[0])(lp)

  assert _compiles(step, logp, logp, adv, mask) == 1


def test_rewards_compile_once():
  fmt = np.ones((Q, K, D + 1), bool)
  correct = np.zeros((Q, K, D + 1), np.float32)
  expert = np.full((Q, K, D + 1), 0.5, np.float32)
  assert _compiles(rewards.main_reward, fmt, correct) == 1
  assert _compiles(rewards.sub_reward, fmt, correct, expert) == 1
  assert _compiles(rewards.sub_reward_released, fmt[:1], correct[:1]) == 1
