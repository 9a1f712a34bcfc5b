"""The Llama-family decoder (Flax NNX): embeddings, L pre-norm blocks, final norm, LM head.

`model(tokens)` maps int32 [B, T] to float32 logits [B, T, V]. An optional
`attention_mask` [B, T] (1 = real token) handles padded batches, left or right: a
padding key is never attended to and positions count real tokens only.
`model.forward_cached(tokens, cache)` runs T new tokens against a `KVCache` and
returns the logits and the updated cache (prefill: T = prompt bucket; decode: T = 1).
`model.hidden_states(tokens)` stops before the LM head ([B, T, D], final norm applied) and
`model.logits_from_hidden(h)` applies it, so a caller can project a few positions at a
time (`logprobs.token_logprobs`); `hidden_states` can rematerialize each block in the
backward pass (`REMAT_POLICIES`).

With `config.scan_layers`, the blocks' parameters are stacked on a leading `layers`
axis and run by one `jax.lax.scan` (compile time independent of depth); the math is
the same as the unrolled loop.
"""

from __future__ import annotations

from collections.abc import Callable

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

# How a block's activations are kept for the backward pass (`jax.checkpoint` policies):
# "none" runs the block as is (no checkpoint: autodiff keeps what it needs); "full" keeps
# only the block's input and recomputes the rest; "dots" also keeps
# the results of the weight matmuls (those without a batch dimension: the projections,
# not the attention scores), so the backward pass recomputes the cheap elementwise work
# and the attention scores, whose memory grows with T^2.
REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


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
    return self.logits_from_hidden(self.hidden_states(tokens, attention_mask, positions))

  def hidden_states(self, tokens: jax.Array, attention_mask: jax.Array | None = None,
                    positions: jax.Array | None = None, remat: str = "none") -> jax.Array:
    """The final-normed hidden states of a full (uncached) forward pass.

    Args:
      tokens, attention_mask, positions: as for `__call__`.
      remat: a name in `REMAT_POLICIES`, what each block keeps for the backward pass
        (the values are the same whichever it is).

    Returns:
      [B, T, D] in the activation dtype; `logits_from_hidden` maps them to the logits.
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
    x, _ = self._decode(tokens, positions, mask, None, remat)
    return self.final_norm(x)

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
    return self.logits_from_hidden(self.final_norm(x)), new_cache

  def _decode(self, tokens: jax.Array, positions: jax.Array, mask: jax.Array,
              slots: KVSlots | None, remat: str = "none"
              ) -> tuple[jax.Array, KVSlots | None]:
    c = self.config
    x = jnp.take(self.embedding[...], tokens, axis=0).astype(c.dtype)
    inv_freq = rope_inverse_frequencies(c.head_dim, c.rope_theta, c.rope_scaling)
    cos, sin = rope_angles(positions, inv_freq)
    if not c.scan_layers:
      for i, block in enumerate(self.layers):
        if remat == "none":
          x = block(x, cos, sin, mask, slots, i)
        else:
          graphdef, state = nnx.split(block)
          x = _remat_block(graphdef, remat)(state, x, cos, sin, mask)
      return x, slots

    graphdef, stacked = nnx.split(self.blocks)
    apply_block = _remat_block(graphdef, remat)

    def body(carry, layer_state_and_index):
      layer_state, i = layer_state_and_index
      h, kv = carry
      if kv is None:
        return (apply_block(layer_state, h, cos, sin, mask), None), None
      layer_slots = KVSlots(kv[0], kv[1], slots.write_index)
      h = nnx.merge(graphdef, layer_state)(h, cos, sin, mask, layer_slots, i)
      return (h, (layer_slots.k, layer_slots.v)), None

    kv0 = None if slots is None else (slots.k, slots.v)
    (x, kv), _ = jax.lax.scan(body, (x, kv0), (stacked, jnp.arange(c.num_layers)))
    if slots is not None:
      slots = KVSlots(kv[0], kv[1], slots.write_index)
    return x, slots

  def logits_from_hidden(self, h: jax.Array) -> jax.Array:
    """LM head: final-normed hidden states [..., D] -> float32 logits [..., V]."""
    if self.lm_head is None:
      logits = jnp.dot(h, self.embedding[...].astype(h.dtype).T)
    else:
      logits = self.lm_head(h)
    return logits.astype(jnp.float32)


def _remat_block(graphdef: nnx.GraphDef, remat: str) -> Callable[..., jax.Array]:
  """apply(block_state, x, cos, sin, mask) -> the block's output [B, T, D], uncached.

  Args:
    graphdef: the block's graph definition (`nnx.split`).
    remat: a name in `REMAT_POLICIES`; unless "none", the block runs under
      `jax.checkpoint` with that policy.
  """
  if remat not in REMAT_POLICIES:
    raise ValueError(f"remat must be one of {tuple(REMAT_POLICIES)}, got {remat!r}")

  def apply(state: nnx.State, x: jax.Array, cos: jax.Array, sin: jax.Array,
            mask: jax.Array) -> jax.Array:
    return nnx.merge(graphdef, state)(x, cos, sin, mask)

  if remat == "none":
    return apply
  return jax.checkpoint(apply, policy=REMAT_POLICIES[remat])
