"""Per-token log-probabilities of given sequences: the trainer's scoring function.

`token_logprobs(model, ids)[b, t] = log p(ids[b, t] | ids[b, :t])` under the model's
softmax at `temperature` (default 1: the unmodified model distribution, the same
quantity the sampler reports by default). Position 0, padding positions, and the first
real token of a left-padded row have no context and get 0.

With `chunk` = c > 0 the LM head runs over c positions at a time (a `lax.scan` over the
time axis), under `jax.checkpoint`: only one chunk's float32 logits [B, c, V] exist at
once, in the forward pass and again in the backward pass (which recomputes them from the
hidden states, keeping only each position's logsumexp), so memory does not grow with
T x V. The values are those of the unchunked path.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from mgrpo_jax.models.transformer import Transformer

# Positions per LM-head chunk in the trainer's log-probs (`token_logprobs(chunk=...)`).
DEFAULT_CHUNK = 64
_LOGSUMEXP = "logprobs_logsumexp"


def logprobs_from_logits(logits: jax.Array, targets: jax.Array,
                         temperature: float | jax.Array = 1.0) -> jax.Array:
  """log softmax(logits / temperature)[targets]; logits [..., V], targets int [...]."""
  scaled = logits.astype(jnp.float32) / temperature
  picked = jnp.take_along_axis(scaled, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
  lse = checkpoint_name(jax.nn.logsumexp(scaled, axis=-1), _LOGSUMEXP)
  return picked - lse


def entropy_from_logits(logits: jax.Array, temperature: float | jax.Array = 1.0) -> jax.Array:
  """H = -sum_v p_v log p_v of softmax(logits / temperature); logits [..., V] -> [...]."""
  scaled = logits.astype(jnp.float32) / temperature
  lse = checkpoint_name(jax.nn.logsumexp(scaled, axis=-1), _LOGSUMEXP)
  return lse - jnp.sum(jax.nn.softmax(scaled, axis=-1) * scaled, axis=-1)


def _scores(logits: jax.Array, targets: jax.Array, temperature: float | jax.Array,
            with_entropy: bool) -> jax.Array | tuple[jax.Array, jax.Array]:
  """Log-probs of `targets`, and with `with_entropy` the entropies of the distributions."""
  logp = logprobs_from_logits(logits, targets, temperature)
  return (logp, entropy_from_logits(logits, temperature)) if with_entropy else logp


def _chunked_logprobs(model: Transformer, hidden: jax.Array, targets: jax.Array,
                      temperature: float | jax.Array, chunk: int, with_entropy: bool = False
                      ) -> jax.Array | tuple[jax.Array, jax.Array]:
  """Log-probs of `targets` [B, S] after the final-normed `hidden` [B, S, D], c at a time
  (and their distributions' entropies [B, S] with `with_entropy`).

  S is padded up to a multiple of c (the padded positions are dropped); each chunk's
  logits are recomputed in the backward pass, its logsumexp [B, c] is kept.
  """
  b, s = targets.shape
  count = -(-s // chunk)
  pad = count * chunk - s
  hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
  targets = jnp.pad(targets, ((0, 0), (0, pad)))
  # [B, count * c, ...] -> [count, B, c, ...]: the scan runs over the leading axis.
  hidden = jnp.swapaxes(hidden.reshape(b, count, chunk, -1), 0, 1)
  targets = jnp.swapaxes(targets.reshape(b, count, chunk), 0, 1)

  @functools.partial(jax.checkpoint,
                     policy=jax.checkpoint_policies.save_only_these_names(_LOGSUMEXP))
  def one_chunk(h_and_t: tuple[jax.Array, jax.Array]):
    h, t = h_and_t  # [B, c, D], [B, c]
    return _scores(model.logits_from_hidden(h), t, temperature, with_entropy)

  scores = jax.lax.map(one_chunk, (hidden, targets))  # [count, B, c] (each)
  return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(b, count * chunk)[:, :s], scores)


def token_logprobs(model: Transformer, ids: jax.Array, attention_mask: jax.Array | None = None,
                   temperature: float | jax.Array = 1.0, *, chunk: int = DEFAULT_CHUNK,
                   remat: str = "none", with_entropy: bool = False
                   ) -> jax.Array | tuple[jax.Array, jax.Array]:
  """Log-probability of each token given the tokens before it.

  Args:
    model: the policy.
    ids: int [B, T] sequences (prompt + completion), left- or right-padded.
    attention_mask: optional [B, T], nonzero at real tokens.
    temperature: logits are divided by it before the softmax.
    chunk: positions per LM-head chunk (0: all T at once, the full logits [B, T, V]).
    remat: what each decoder block keeps for the backward pass
      (`transformer.REMAT_POLICIES`).
    with_entropy: also return the entropy of each position's distribution.

  Returns:
    float32 [B, T]; entry t is log p(ids[t] | ids[<t]); 0 where there is no context
    (t = 0, padding, or the first real token). With `with_entropy`, (that, entropy
    [B, T]) where entropy[t] = H(p(. | ids[<t])), the distribution ids[t] was drawn
    from (0 where there is no context).
  """
  if chunk < 0:
    raise ValueError(f"chunk must be >= 0 (0: no chunking), got {chunk}")
  ids = jnp.asarray(ids, jnp.int32)
  hidden = model.hidden_states(ids, attention_mask, remat=remat)[:, :-1]
  if chunk:
    scores = _chunked_logprobs(model, hidden, ids[:, 1:], temperature, chunk, with_entropy)
  else:
    scores = _scores(model.logits_from_hidden(hidden), ids[:, 1:], temperature, with_entropy)

  def aligned(x: jax.Array) -> jax.Array:
    if attention_mask is not None:
      valid = jnp.asarray(attention_mask) != 0
      x = jnp.where(valid[:, 1:] & valid[:, :-1], x, 0.0)
    return jnp.concatenate([jnp.zeros_like(x[:, :1]), x], axis=1)

  return jax.tree.map(aligned, scores)
