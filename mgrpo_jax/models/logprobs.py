"""Per-token log-probabilities of given sequences: the trainer's scoring function.

`token_logprobs(model, ids)[b, t] = log p(ids[b, t] | ids[b, :t])` under the model's
softmax at `temperature` (default 1: the unmodified model distribution, the same
quantity the sampler reports by default). Position 0, padding positions, and the first
real token of a left-padded row have no context and get 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mgrpo_jax.models.transformer import Transformer


def logprobs_from_logits(logits: jax.Array, targets: jax.Array,
                         temperature: float | jax.Array = 1.0) -> jax.Array:
  """log softmax(logits / temperature)[targets]; logits [..., V], targets int [...]."""
  scaled = logits.astype(jnp.float32) / temperature
  picked = jnp.take_along_axis(scaled, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
  return picked - jax.nn.logsumexp(scaled, axis=-1)


def token_logprobs(model: Transformer, ids: jax.Array, attention_mask: jax.Array | None = None,
                   temperature: float | jax.Array = 1.0) -> jax.Array:
  """Log-probability of each token given the tokens before it.

  Args:
    model: the policy.
    ids: int [B, T] sequences (prompt + completion), left- or right-padded.
    attention_mask: optional [B, T], nonzero at real tokens.
    temperature: logits are divided by it before the softmax.

  Returns:
    float32 [B, T]; entry t is log p(ids[t] | ids[<t]); 0 where there is no context
    (t = 0, padding, or the first real token).
  """
  ids = jnp.asarray(ids, jnp.int32)
  logits = model(ids, attention_mask)
  lp = logprobs_from_logits(logits[:, :-1], ids[:, 1:], temperature)
  if attention_mask is not None:
    valid = jnp.asarray(attention_mask) != 0
    lp = jnp.where(valid[:, 1:] & valid[:, :-1], lp, 0.0)
  return jnp.concatenate([jnp.zeros_like(lp[:, :1]), lp], axis=1)
