"""Trajectory alignment of M-GRPO: a fixed D sub-agent slots per rollout (paper section 4.1).

Rollout k of query q made c = counts[q, k] sub-agent calls. Alignment maps them onto D
slots, so the sub-agent batch of a step has the static shape [Q, K, D] whatever the
calls were (paper Fig. 4; D = d = D_max = 8, chosen so that P(c <= D) ~ 0.99):

  "duplicate_drop" (the paper):
    c >= D      a uniform random subset of D distinct calls (every subset equally likely;
                the kept calls are listed in ascending call order).
    0 < c < D   slots 0..c-1 hold every call once, in call order; slots c..D-1 hold
                D - c independent uniform draws, with replacement, from the same
                rollout's c calls (the paper's duplication; originals come first).
    c == 0      D invalid slots (index 0). Nothing is borrowed from other rollouts.
  "mask" (the paper's masking alternative):
    c >= D      the same drop as above.
    c < D       slots 0..c-1 hold the calls, slots c..D-1 are invalid (index 0).

Any count works: the distinct subset comes from Floyd's sampling algorithm, which draws D
numbers whatever c is, so no static bound on c exists (c up to 2**31 - 1). Negative
counts are rejected for concrete inputs and treated as 0 under tracing.

Everything is drawn from one PRNG key, vectorized over [Q, K] (no loop over queries).
The draws of a rollout depend on its position, so the same key and counts give the same
result; callers fold the step into the key to vary it between steps.

New modes can be added with `MODES.register(name)`; a mode is
`fn(counts int32 [Q, K], d_max: int, key) -> (index int32 [Q, K, D], valid bool [Q, K, D])`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mgrpo_jax.core import _checks
from mgrpo_jax.core._registry import Registry

MODES = Registry("alignment mode")

_INT32_MAX = np.iinfo(np.int32).max


def _draws(key: jax.Array, counts: jax.Array, d_max: int) -> jax.Array:
  """The random integers of one alignment, from a single `randint` call: int32 [Q, K, D].

  Where c >= D, draw j is uniform on [0, c - D + j] (Floyd's algorithm); where
  0 < c < D, it is uniform on [0, c) (slots j >= c use it as a duplicate).
  """
  step = jnp.arange(d_max, dtype=jnp.int32)
  c = counts[..., None]
  upper = jnp.where(c >= d_max, c - d_max + step + 1, c)
  return jax.random.randint(key, upper.shape, 0, jnp.maximum(upper, 1), dtype=jnp.int32)


def _distinct_subset(counts: jax.Array, floyd_draws: jax.Array, d_max: int) -> jax.Array:
  """Uniform D-subsets of [0, c) per rollout, ascending; meaningful where c >= D.

  Floyd's algorithm: for j = c - D, ..., c - 1 draw t uniform on [0, j]; keep t unless
  already kept, else keep j. Every D-subset comes out with probability 1 / C(c, D).
  """
  step = jnp.arange(d_max, dtype=jnp.int32)
  last = counts[..., None] - d_max + step  # j of draw i, [Q, K, D]

  def keep_one(i: jax.Array, kept: jax.Array) -> jax.Array:
    t = floyd_draws[..., i]
    already = jnp.any((kept == t[..., None]) & (step < i), axis=-1)
    return kept.at[..., i].set(jnp.where(already, last[..., i], t))

  kept = jax.lax.fori_loop(0, d_max, keep_one, jnp.zeros(last.shape, jnp.int32))
  return jnp.sort(kept, axis=-1)


@MODES.register("duplicate_drop")
def _duplicate_drop(counts: jax.Array, d_max: int, key: jax.Array
                    ) -> tuple[jax.Array, jax.Array]:
  draws = _draws(key, counts, d_max)
  step = jnp.arange(d_max, dtype=jnp.int32)
  c = counts[..., None]
  subset = _distinct_subset(counts, draws, d_max)
  filled = jnp.where(step < c, step, draws)
  index = jnp.where(c >= d_max, subset, filled)
  valid = jnp.broadcast_to(c > 0, index.shape)
  return jnp.where(valid, index, 0), valid


@MODES.register("mask")
def _mask(counts: jax.Array, d_max: int, key: jax.Array) -> tuple[jax.Array, jax.Array]:
  draws = _draws(key, counts, d_max)
  step = jnp.arange(d_max, dtype=jnp.int32)
  c = counts[..., None]
  subset = _distinct_subset(counts, draws, d_max)
  valid = (c >= d_max) | (step < c)
  index = jnp.where(c >= d_max, subset, step)
  return jnp.where(valid, index, 0), valid


@functools.partial(jax.jit, static_argnames=("d_max", "mode"))
def _align(counts: jax.Array, key: jax.Array, *, d_max: int, mode: str
           ) -> tuple[jax.Array, jax.Array]:
  counts = jnp.maximum(jnp.asarray(counts).astype(jnp.int32), 0)
  index, valid = MODES.get(mode)(counts, d_max, key)
  return index.astype(jnp.int32), valid.astype(bool)


def _check_counts(counts: Any) -> None:
  _checks.check_ndim(counts, "counts", 2, "[Q, K]")
  dtype = getattr(counts, "dtype", None)
  dtype = np.asarray(counts).dtype if dtype is None else np.dtype(dtype)
  if not np.issubdtype(dtype, np.integer):
    raise ValueError(f"counts must be an integer array (calls per rollout), got dtype {dtype}")
  if _checks.is_concrete(counts):
    values = np.asarray(counts)
    if values.size and values.min() < 0:
      raise ValueError(f"counts must be >= 0, got {values.min()}")
    if values.size and values.max() > _INT32_MAX:
      raise ValueError(f"counts must be <= {_INT32_MAX}, got {values.max()}")


def _check_key(key: Any) -> None:
  dtype = getattr(key, "dtype", None)
  if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
    return
  shape = _checks.shape_of(key, "key")
  if dtype is None or shape != (2,) or np.dtype(dtype) != np.uint32:
    raise ValueError(
        f"key must be a jax PRNG key (jax.random.key or jax.random.PRNGKey), "
        f"got {type(key).__name__} with shape {shape}"
    )


def align_indices(counts: Any, d_max: int, key: Any, *, mode: str = "duplicate_drop"
                  ) -> tuple[jax.Array, jax.Array]:
  """Aligns a variable number of sub-agent calls per rollout to D slots.

  Args:
    counts: int [Q, K], c = number of sub-agent calls of rollout k of query q (d_k).
    d_max: D (the paper's d = D_max), a positive Python int (static).
    key: one jax PRNG key for every random choice of the call.
    mode: "duplicate_drop" (paper), "mask", or a name registered in `MODES`.

  Returns:
    index int32 [Q, K, D]: slot (q, k, j) holds call index[q, k, j] of rollout (q, k),
      in [0, counts[q, k]) where valid, 0 where not.
    valid bool [Q, K, D]: whether slot (q, k, j) holds a call.
  """
  if isinstance(d_max, bool) or not isinstance(d_max, (int, np.integer)) or d_max < 1:
    raise ValueError(f"d_max must be a positive int, got {d_max!r}")
  counts = _checks.as_array(counts)
  _check_counts(counts)
  _check_key(key)
  MODES.get(mode)
  return _align(counts, key, d_max=int(d_max), mode=mode)


@functools.partial(jax.jit, static_argnames=("d_max",))
def _alignment_stats(counts: jax.Array, *, d_max: int) -> dict[str, jax.Array]:
  counts = jnp.maximum(jnp.asarray(counts).astype(jnp.int32), 0)
  return {
      "dropped_calls": jnp.sum(jnp.maximum(counts - d_max, 0)),
      "filled_slots": jnp.sum(jnp.where(counts > 0, jnp.maximum(d_max - counts, 0), 0)),
      "empty_rollouts": jnp.sum(counts == 0),
      "frac_rollouts_within_d": jnp.mean(counts <= d_max),
  }


def alignment_stats(counts: Any, d_max: int) -> dict[str, jax.Array]:
  """Logging statistics of an alignment (to re-check the P(c <= D) ~ 0.99 rule).

  Args:
    counts: int [Q, K] sub-agent calls per rollout.
    d_max: D.

  Returns:
    dict of scalars: dropped_calls (calls beyond D), filled_slots (slots of rollouts with
    0 < c < D beyond their calls: duplicates in "duplicate_drop", padding in "mask"),
    empty_rollouts (c == 0), frac_rollouts_within_d (fraction with c <= D).
  """
  if isinstance(d_max, bool) or not isinstance(d_max, (int, np.integer)) or d_max < 1:
    raise ValueError(f"d_max must be a positive int, got {d_max!r}")
  counts = _checks.as_array(counts)
  _check_counts(counts)
  return _alignment_stats(counts, d_max=int(d_max))
