"""Next-token selection: temperature, top-k, top-p (nucleus) and greedy, all traced values.

Order of operations (as in Hugging Face `generate`): divide the logits by the
temperature, keep the top-k, then keep the smallest prefix of the remaining tokens
(sorted by probability, renormalized) whose mass reaches top_p. Tokens tied with the
last kept value are kept too. temperature == 0 means greedy (argmax of the raw
logits). top_k == 0 and top_p == 1 disable their filters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf


def filter_logits(scaled: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
  """Sets to -inf every logit outside the top-k / top-p set; scaled [B, V]."""
  vocab = scaled.shape[-1]
  sorted_desc = -jnp.sort(-scaled, axis=-1)
  k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
  rank = jnp.arange(vocab)
  in_top_k = rank[None, :] < k
  probs = jax.nn.softmax(jnp.where(in_top_k, sorted_desc, NEG_INF), axis=-1)
  mass_before = jnp.cumsum(probs, axis=-1) - probs
  keep = in_top_k & (mass_before < top_p)
  count = jnp.maximum(jnp.sum(keep, axis=-1, keepdims=True), 1)
  threshold = jnp.take_along_axis(sorted_desc, count - 1, axis=-1)
  return jnp.where(scaled >= threshold, scaled, NEG_INF)


def sampling_logits(logits: jax.Array, temperature: jax.Array, top_k: jax.Array,
                    top_p: jax.Array, filtering: bool) -> jax.Array:
  """The logits of the distribution actually sampled from (temperature > 0)."""
  scaled = logits.astype(jnp.float32) / jnp.maximum(temperature, 1e-6)
  return filter_logits(scaled, top_k, top_p) if filtering else scaled


def choose_tokens(key: jax.Array, logits: jax.Array, temperature: jax.Array, top_k: jax.Array,
                  top_p: jax.Array, filtering: bool) -> tuple[jax.Array, jax.Array]:
  """Picks one token per row.

  Args:
    key: PRNG key for this step.
    logits: float [B, V] raw model logits.
    temperature, top_k, top_p: scalars (traced: changing them does not recompile).
    filtering: static; False skips the sort that top-k / top-p need.

  Returns:
    (ids int32 [B], log-prob float32 [B] of each id under the sampled distribution;
    0 for greedy, whose distribution is a point mass).
  """
  def sample():
    processed = sampling_logits(logits, temperature, top_k, top_p, filtering)
    ids = jax.random.categorical(key, processed, axis=-1).astype(jnp.int32)
    log_probs = jax.nn.log_softmax(processed, axis=-1)
    return ids, jnp.take_along_axis(log_probs, ids[:, None], axis=-1)[:, 0]

  def greedy():  # no random draws, no sort: the cheap path of greedy decoding
    return (jnp.argmax(logits, axis=-1).astype(jnp.int32),
            jnp.zeros(logits.shape[:1], jnp.float32))

  return jax.lax.cond(temperature > 0, sample, greedy)
