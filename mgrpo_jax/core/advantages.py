"""Group-relative advantages of M-GRPO (paper Eq. 9-13).

Main agent M (Eq. 9-10): for query q, the K rollout rewards R_M are normalized within
the query's group, A_M = (R_M - mu_{q,M}) / sigma_{q,M}.

Sub-agent S (Eq. 11-13): after alignment (`alignment.align_indices`) every rollout has D
slots; the group of query q is *all valid* [K, D] slots of that query, across its K
rollouts. A duplicated sub-trajectory counts as a full sample in mu_{q,S} and
sigma_{q,S}, as in the paper.

Conventions (paper section 3 and open question 8 of the notes):
  * sigma is the population std (divide by N) by default; `std="unbiased"` divides by
    N - 1 (the released code's torch.std). `eps` is added to sigma (the released code
    uses 1e-6; the paper none).
  * A group whose std is 0 (all valid rewards equal), that has no valid entry, or (for
    "unbiased") a single valid entry gets advantage 0: such a group carries no
    relative signal.
  * Invalid entries get exactly 0.

Rewards are shifted by a member of their group before the moments are taken, so a
group of equal rewards gives exactly zero deviations (no round-off "advantages").
All functions return float32 and run under `jax.jit` with static shapes.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from mgrpo_jax.core import _checks

STD_MODES = ("population", "unbiased")


@functools.partial(jax.jit, static_argnames=("std",))
def _group_normalize(rewards: jax.Array, valid: jax.Array | None, eps: jax.Array, *,
                     std: str) -> jax.Array:
  rewards = jnp.asarray(rewards, dtype=jnp.float32)
  if valid is None:
    valid = jnp.ones(rewards.shape, dtype=bool)
  else:
    valid = jnp.asarray(valid).astype(bool)
  n = jnp.sum(valid, axis=-1, keepdims=True)
  # Shift by the group's largest valid reward: equal rewards become exact zeros.
  shift = jnp.max(jnp.where(valid, rewards, -jnp.inf), axis=-1, keepdims=True)
  shift = jnp.where(n > 0, shift, 0.0)
  x = jnp.where(valid, rewards - shift, 0.0)
  mean = jnp.sum(x, axis=-1, keepdims=True) / jnp.maximum(n, 1)
  dev = jnp.where(valid, x - mean, 0.0)
  ddof = 1 if std == "unbiased" else 0
  dof = n - ddof
  var = jnp.sum(dev * dev, axis=-1, keepdims=True) / jnp.maximum(dof, 1)
  sigma = jnp.sqrt(var)
  informative = (dof > 0) & (sigma > 0)
  scale = jnp.where(informative, sigma + eps, 1.0)
  return jnp.where(valid & informative, dev / scale, 0.0)


def group_normalize(rewards: Any, valid: Any = None, *, std: str = "population",
                    eps: float = 0.0) -> jax.Array:
  """Normalizes rewards within groups along the last axis (Eq. 10 and Eq. 13).

  Args:
    rewards: float [..., G]; each leading index is one group of G rewards.
    valid: optional bool [..., G]; only valid entries enter mu and sigma.
    std: "population" (divide by N, the paper) or "unbiased" (divide by N - 1).
    eps: non-negative, added to sigma.

  Returns:
    float32 [..., G]: (R - mu) / (sigma + eps) at valid entries of groups with sigma > 0;
    0 at invalid entries and in groups with sigma == 0, no valid entry, or (unbiased)
    a single valid entry.
  """
  _checks.check_choice(std, "std", STD_MODES)
  rewards, valid = _checks.as_array(rewards), _checks.as_array(valid)
  shape = _checks.shape_of(rewards, "rewards")
  if len(shape) < 1:
    raise ValueError(f"rewards must have shape [..., G] with at least one axis, got {shape}")
  if valid is not None:
    _checks.check_same_shape(valid, "valid", shape, "rewards")
  if _checks.is_concrete(eps) and not float(eps) >= 0.0:
    raise ValueError(f"eps must be >= 0, got {eps}")
  return _group_normalize(rewards, valid, eps, std=std)


@functools.partial(jax.jit, static_argnames=("std",))
def _mgrpo_advantages(main_rewards: jax.Array, sub_rewards: jax.Array, sub_valid: jax.Array,
                      main_valid: jax.Array | None, eps: jax.Array, *,
                      std: str) -> tuple[jax.Array, jax.Array]:
  main_adv = _group_normalize(main_rewards, main_valid, eps, std=std)
  q, k, d = sub_rewards.shape
  flat_rewards = jnp.reshape(sub_rewards, (q, k * d))
  flat_valid = jnp.reshape(sub_valid, (q, k * d))
  sub_adv = _group_normalize(flat_rewards, flat_valid, eps, std=std)
  return main_adv, jnp.reshape(sub_adv, (q, k, d))


def mgrpo_advantages(main_rewards: Any, sub_rewards: Any, sub_valid: Any, *,
                     std: str = "population", eps: float = 0.0,
                     main_valid: Any = None) -> tuple[jax.Array, jax.Array]:
  """Advantages of both agents for one M-GRPO step (Eq. 9-13).

  Args:
    main_rewards: float [Q, K], R_M of rollout k of query q.
    sub_rewards: float [Q, K, D], R_S of aligned slot (k, i) of query q.
    sub_valid: bool [Q, K, D], False for empty slots (rollouts with no sub-agent call,
      or padding in the "mask" alignment mode).
    std: "population" (paper) or "unbiased".
    eps: added to sigma.
    main_valid: optional bool [Q, K] for M rollouts excluded from their group.

  Returns:
    (main_adv float32 [Q, K] = A_{q,M}, sub_adv float32 [Q, K, D] = A_{q,S,i}); the sub
    group of query q is all valid [K, D] slots of q, duplicates counted in full.
  """
  main_rewards, sub_rewards, sub_valid, main_valid = (
      _checks.as_array(x) for x in (main_rewards, sub_rewards, sub_valid, main_valid))
  q, k = _checks.check_ndim(main_rewards, "main_rewards", 2, "[Q, K]")
  sub_shape = _checks.check_ndim(sub_rewards, "sub_rewards", 3, "[Q, K, D]")
  if sub_shape[:2] != (q, k):
    raise ValueError(
        f"sub_rewards must have shape [Q, K, D] with [Q, K] = {(q, k)} from main_rewards, "
        f"got {sub_shape}"
    )
  _checks.check_same_shape(sub_valid, "sub_valid", sub_shape, "sub_rewards")
  if main_valid is not None:
    _checks.check_same_shape(main_valid, "main_valid", (q, k), "main_rewards")
  if _checks.is_concrete(eps) and not float(eps) >= 0.0:
    raise ValueError(f"eps must be >= 0, got {eps}")
  _checks.check_choice(std, "std", STD_MODES)
  return _mgrpo_advantages(main_rewards, sub_rewards, sub_valid, main_valid, eps, std=std)
