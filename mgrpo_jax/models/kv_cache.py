"""A preallocated, functional KV cache for left-padded batches.

The cache is a pytree passed into and returned from the model (never mutated in
place). Layout: a batch of prompts of different lengths is **left-padded** so that
every row's last prompt token sits in the same slot; row b's real tokens occupy slots
[start[b], index). Each forward call writes its T new keys/values at slots
[index, index + T) of every row (one `dynamic_update_slice`), and row b's token in
slot s has RoPE position s - start[b]. Attention lets slot t see slots s with
start[b] <= s <= t.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from mgrpo_jax.models.config import ModelConfig


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
  """Keys and values of every layer.

  Attributes:
    k: [L, B, S, K, H] keys (RoPE applied).
    v: [L, B, S, K, H] values.
    index: int32 scalar, the next slot to write (same for all rows).
    start: int32 [B], the first slot holding a real token of each row.
  """

  k: jax.Array
  v: jax.Array
  index: jax.Array
  start: jax.Array

  @property
  def capacity(self) -> int:
    """S, the number of slots."""
    return self.k.shape[2]


def init_cache(config: ModelConfig, batch_size: int, capacity: int,
               start: jax.Array | None = None, dtype: Any = None) -> KVCache:
  """An empty cache of `capacity` slots; `start` int [B] defaults to zeros."""
  shape = (config.num_layers, batch_size, capacity, config.num_kv_heads, config.head_dim)
  dtype = dtype or config.dtype
  if start is None:
    start = jnp.zeros((batch_size,), jnp.int32)
  return KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype),
                 index=jnp.zeros((), jnp.int32), start=jnp.asarray(start, jnp.int32))


def extend_cache(cache: KVCache, capacity: int) -> KVCache:
  """`cache` with empty slots appended up to `capacity` slots (k, v [L, B, capacity, K, H]).

  Attention never reads a slot at or past `index`, so a decode on the extended cache
  computes what it would on a cache preallocated at `capacity` from the start.
  """
  grow = capacity - cache.capacity
  if grow < 0:
    raise ValueError(f"cannot shrink a cache of {cache.capacity} slots to {capacity}")
  if grow == 0:
    return cache
  pad = ((0, 0), (0, 0), (0, grow), (0, 0), (0, 0))
  return dataclasses.replace(cache, k=jnp.pad(cache.k, pad), v=jnp.pad(cache.v, pad))


def cache_positions_and_mask(cache: KVCache, num_new: int) -> tuple[jax.Array, jax.Array]:
  """RoPE positions [B, T] and attention mask bool [B, T, S] for `num_new` new slots."""
  slots = cache.index + jnp.arange(num_new, dtype=jnp.int32)
  positions = jnp.maximum(slots[None, :] - cache.start[:, None], 0)
  keys = jnp.arange(cache.capacity, dtype=jnp.int32)
  mask = (keys[None, None, :] >= cache.start[:, None, None]) & (
      keys[None, None, :] <= slots[None, :, None])
  return positions, mask
