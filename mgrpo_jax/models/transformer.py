"""The Llama-family decoder (Flax NNX): embeddings, L pre-norm blocks, final norm, LM head.

`model(tokens)` maps int32 [B, T] to float32 logits [B, T, V]. An optional
`attention_mask` [B, T] (1 = real token) handles padded batches, left or right: a
padding key is never attended to and positions count real tokens only.
`model.forward_cached(tokens, cache)` runs T new tokens against a `KVCache` and
returns the logits and the updated cache (prefill: T = prompt bucket; decode: T = 1).

With `config.scan_layers`, the blocks' parameters are stacked on a leading `layers`
axis and run by one `jax.lax.scan` (compile time independent of depth); the math is
the same as the unrolled loop.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.kv_cache import KVCache, cache_positions_and_mask
from mgrpo_jax.models.layers import (
    Block,
    Dense,
    KVSlots,
    RMSNorm,
    logical_param,
    rope_angles,
    rope_inverse_frequencies,
)


def _stacked_blocks(config: ModelConfig, rngs: nnx.Rngs) -> Block:
  @nnx.split_rngs(splits=config.num_layers)
  @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
  def create(r: nnx.Rngs) -> Block:
    return Block(config, rngs=r)

  return create(rngs)


class Transformer(nnx.Module):
  """Decoder-only Llama-family language model."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    c = config
    self.config = c
    self.embedding = logical_param(rngs, nnx.initializers.variance_scaling(1.0, "fan_in", "normal",
                                                                    out_axis=0),
                            (c.vocab_size, c.hidden_size), c.param_dtype, ("vocab", "embed"))
    if c.scan_layers:
      self.blocks = _stacked_blocks(c, rngs)
    else:
      self.layers = nnx.List([Block(c, rngs=rngs) for _ in range(c.num_layers)])
    self.final_norm = RMSNorm(c.hidden_size, eps=c.rms_norm_eps, dtype=c.dtype,
                              param_dtype=c.param_dtype, rngs=rngs)
    self.lm_head = (None if c.tie_embeddings else
                    Dense(c.hidden_size, c.vocab_size, axes=("embed", "vocab"), dtype=c.dtype,
                          param_dtype=c.param_dtype, rngs=rngs))

  def __call__(self, tokens: jax.Array, attention_mask: jax.Array | None = None,
               positions: jax.Array | None = None) -> jax.Array:
    """Logits of a full (uncached) forward pass.

    Args:
      tokens: int [B, T].
      attention_mask: optional [B, T], nonzero for real tokens (any padding side).
      positions: optional int [B, T] RoPE positions; defaults to the count of real
        tokens before each slot.

    Returns:
      float32 [B, T, V] logits; rows at padding slots are meaningless.
    """
    tokens = jnp.asarray(tokens, jnp.int32)
    _, t = tokens.shape
    causal = jnp.tril(jnp.ones((t, t), jnp.bool_))[None]
    if attention_mask is None:
      mask = causal
      default_positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), tokens.shape)
    else:
      valid = jnp.asarray(attention_mask) != 0
      mask = causal & valid[:, None, :]
      default_positions = jnp.maximum(jnp.cumsum(valid, axis=1, dtype=jnp.int32) - 1, 0)
    positions = default_positions if positions is None else jnp.asarray(positions, jnp.int32)
    x, _ = self._decode(tokens, positions, mask, None)
    return self._logits(x)

  def forward_cached(self, tokens: jax.Array, cache: KVCache,
                     last_only: bool = False) -> tuple[jax.Array, KVCache]:
    """Runs T new tokens through the model, reading and extending `cache`.

    Args:
      tokens: int [B, T], written to slots [cache.index, cache.index + T).
      cache: the KV cache (see `kv_cache.py` for the left-padded layout).
      last_only: return only the last position's logits ([B, 1, V]).

    Returns:
      (float32 logits [B, T or 1, V], the cache with index advanced by T).
    """
    tokens = jnp.asarray(tokens, jnp.int32)
    positions, mask = cache_positions_and_mask(cache, tokens.shape[1])
    slots = KVSlots(cache.k, cache.v, cache.index)
    x, slots = self._decode(tokens, positions, mask, slots)
    if last_only:
      x = x[:, -1:]
    new_cache = KVCache(k=slots.k, v=slots.v, index=cache.index + tokens.shape[1],
                        start=cache.start)
    return self._logits(x), new_cache

  def _decode(self, tokens: jax.Array, positions: jax.Array, mask: jax.Array,
              slots: KVSlots | None) -> tuple[jax.Array, KVSlots | None]:
    c = self.config
    x = jnp.take(self.embedding[...], tokens, axis=0).astype(c.dtype)
    inv_freq = rope_inverse_frequencies(c.head_dim, c.rope_theta, c.rope_scaling)
    cos, sin = rope_angles(positions, inv_freq)
    if not c.scan_layers:
      for i, block in enumerate(self.layers):
        x = block(x, cos, sin, mask, slots, i)
      return x, slots

    graphdef, stacked = nnx.split(self.blocks)

    def body(carry, layer_state_and_index):
      layer_state, i = layer_state_and_index
      h, kv = carry
      layer_slots = None if kv is None else KVSlots(kv[0], kv[1], slots.write_index)
      h = nnx.merge(graphdef, layer_state)(h, cos, sin, mask, layer_slots, i)
      return (h, None if kv is None else (layer_slots.k, layer_slots.v)), None

    kv0 = None if slots is None else (slots.k, slots.v)
    (x, kv), _ = jax.lax.scan(body, (x, kv0), (stacked, jnp.arange(c.num_layers)))
    if slots is not None:
      slots = KVSlots(kv[0], kv[1], slots.write_index)
    return x, slots

  def _logits(self, x: jax.Array) -> jax.Array:
    x = self.final_norm(x)
    if self.lm_head is None:
      logits = jnp.dot(x, self.embedding[...].astype(x.dtype).T)
    else:
      logits = self.lm_head(x)
    return logits.astype(jnp.float32)
