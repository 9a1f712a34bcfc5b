"""Clipped policy-gradient objective of M-GRPO for one agent (paper Eq. 14-19).

Each agent minimizes -J(theta) of its own batch (Eq. 18-19: M and S are optimized
separately): N sequences (M: N = Q*K; S: the Q*K*D aligned slots, duplicates included,
each distinct call one row weighted by its slots) with per-sequence advantages A [N]
broadcast to every action token (Eq. 10, 13).

Per token t of sequence i, with rho the likelihood ratio pi_theta / pi_old:
  l_{i,t} = max(-A_i * rho, -A_i * clip(rho, 1 - clip_low, 1 + clip_high))
            [dual clip, A_i < 0 only: min(l_{i,t}, -A_i * clip_ratio_c)]
            + kl_coef * KL_t(pi_theta || pi_ref)                       [optional]

Ratio granularity (`ratio=`):
  "token"       rho_{i,t} = exp(logp - old_logp) per token (the released code; default).
  "sequence"    GSPO: rho_i = exp(masked mean of the token log-ratios of sequence i).
  "trajectory"  the paper's Eq. 14/16 as written: rho_i = exp(masked sum), a product of
                token ratios over the trajectory (it overflows on long sequences far from
                pi_old; with A < 0 only the dual clip bounds the loss then).
  The two sequence-level variants are applied per token as
  stop_gradient(rho_i) * exp(logp_t - stop_gradient(logp_t)): the value is rho_i and
  the whole sequence is clipped together, while the gradient flows per token.

Reductions (`aggregation=`), each a (numerator, denominator) pair so micro-batches
add up exactly; w_i are optional per-row weights (default 1), n_i = sum_t m_{i,t}:
  "token_mean"               sum_i w_i sum_t m l / sum_i w_i n_i
  "seq_mean_token_mean"      sum_i w_i (sum_t m l / n_i) / sum_{i: n_i > 0} w_i   (default)
  "seq_mean_token_sum"       sum_i w_i sum_t m l / sum_{i: n_i > 0} w_i
  "seq_mean_token_sum_norm"  sum_i w_i sum_t m l / (max_len * sum_{i: n_i > 0} w_i)
                             (Dr. GRPO: a constant length instead of n_i)
Weights act as multiplicities: integer weight w gives the loss of a batch with the row
repeated w times. Rows with an all-zero mask (empty alignment slots) add nothing and are
not counted. "seq_mean_token_mean" with K rows per query is the paper's 1/K (M) and
1/(dK) (S) average of Eq. 14 and 16.

The settings above (clip_low, clip_high, clip_ratio_c, kl_coef, ratio, aggregation,
kl_estimator, max_len) travel together as one `Surrogate`.

Micro-batching: `loss_normalizer` gives the denominator of the full batch; passing it as
`normalizer=` to every micro-batch makes the micro-batch losses (and their gradients)
sum exactly to the full-batch ones. New reductions: `AGGREGATIONS.register(name)`, a
function `(token_loss [N, T], mask [N, T], weights [N], max_len) -> (numerator,
denominator)` where token_loss is already zero off the mask.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mgrpo_jax.core import _checks
from mgrpo_jax.core._registry import Registry

RATIO_MODES = ("token", "sequence", "trajectory")
KL_ESTIMATORS = ("k1", "k2", "k3")
AGGREGATIONS = Registry("loss aggregation")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, kw_only=True)
class Surrogate:
  """The settings of the clipped surrogate (module docstring), `policy_loss`'s `surrogate`.

  A pytree: the four numbers are its leaves, traced under jit (a new value reuses the
  compiled program); the choices are static (hashed into the jit cache key).

  Attributes:
    clip_low: epsilon_low, the ratio is clipped below at 1 - clip_low (in [0, 1)).
    clip_high: epsilon_high, the ratio is clipped above at 1 + clip_high (>= 0).
    clip_ratio_c: optional dual-clip bound c > 1; for A < 0 the token loss is capped at
      -A * c.
    kl_coef: beta, weight of the KL penalty; it applies only with reference log-probs.
    ratio: "token" (default), "sequence" (GSPO) or "trajectory" (Eq. 14 as written).
    aggregation: a name in `AGGREGATIONS`.
    kl_estimator: "k1", "k2" or "k3" (see `kl_divergence`).
    max_len: the constant length of "seq_mean_token_sum_norm" (default T).
  """

  clip_low: Any = 0.2
  clip_high: Any = 0.28
  clip_ratio_c: Any = None
  kl_coef: Any = 0.0
  ratio: str = dataclasses.field(default="token", metadata={"static": True})
  aggregation: str = dataclasses.field(default="seq_mean_token_mean",
                                       metadata={"static": True})
  kl_estimator: str = dataclasses.field(default="k3", metadata={"static": True})
  max_len: int | None = dataclasses.field(default=None, metadata={"static": True})


class _Tokens(NamedTuple):
  """Per-token quantities [N, T] of one loss call: the mask, rho, log(pi_theta / pi_old),
  the clipped policy-gradient loss and the KL estimate (None without a reference)."""

  mask: jax.Array
  rho: jax.Array
  log_ratio: jax.Array
  pg: jax.Array
  kl: jax.Array | None


def _counted_rows(mask: jax.Array, weights: jax.Array) -> jax.Array:
  return jnp.sum(jnp.where(jnp.sum(mask, axis=-1) > 0, weights, 0.0))


@AGGREGATIONS.register("token_mean")
def _token_mean(token_loss: jax.Array, mask: jax.Array, weights: jax.Array,
                max_len: int) -> tuple[jax.Array, jax.Array]:
  del max_len
  numerator = jnp.sum(weights * jnp.sum(token_loss * mask, axis=-1))
  return numerator, jnp.sum(weights * jnp.sum(mask, axis=-1))


@AGGREGATIONS.register("seq_mean_token_mean")
def _seq_mean_token_mean(token_loss: jax.Array, mask: jax.Array, weights: jax.Array,
                         max_len: int) -> tuple[jax.Array, jax.Array]:
  del max_len
  n = jnp.sum(mask, axis=-1)
  per_row = jnp.sum(token_loss * mask, axis=-1) / jnp.where(n > 0, n, 1.0)
  return jnp.sum(weights * per_row), _counted_rows(mask, weights)


@AGGREGATIONS.register("seq_mean_token_sum")
def _seq_mean_token_sum(token_loss: jax.Array, mask: jax.Array, weights: jax.Array,
                        max_len: int) -> tuple[jax.Array, jax.Array]:
  del max_len
  per_row = jnp.sum(token_loss * mask, axis=-1)
  return jnp.sum(weights * per_row), _counted_rows(mask, weights)


@AGGREGATIONS.register("seq_mean_token_sum_norm")
def _seq_mean_token_sum_norm(token_loss: jax.Array, mask: jax.Array, weights: jax.Array,
                             max_len: int) -> tuple[jax.Array, jax.Array]:
  per_row = jnp.sum(token_loss * mask, axis=-1) / max_len
  return jnp.sum(weights * per_row), _counted_rows(mask, weights)


def _kl(logp: jax.Array, ref_logp: jax.Array, estimator: str) -> jax.Array:
  log_ref_ratio = ref_logp - logp  # log(pi_ref / pi) at tokens sampled from pi
  if estimator == "k1":
    return -log_ref_ratio
  if estimator == "k2":
    return 0.5 * jnp.square(log_ref_ratio)
  return jnp.exp(log_ref_ratio) - 1.0 - log_ref_ratio


@functools.partial(jax.jit, static_argnames=("estimator",))
def _kl_divergence(logp: jax.Array, ref_logp: jax.Array, *, estimator: str) -> jax.Array:
  return _kl(jnp.asarray(logp, jnp.float32), jnp.asarray(ref_logp, jnp.float32), estimator)


def kl_divergence(logp: Any, ref_logp: Any, *, estimator: str = "k3") -> jax.Array:
  """Per-token estimates of KL(pi_theta || pi_ref) from tokens sampled from pi_theta.

  With log r = ref_logp - logp (Schulman's estimators; k1 and k3 are unbiased):
    k1 = -log r,   k2 = (log r)^2 / 2,   k3 = r - 1 - log r  (non-negative).

  Args:
    logp: float [...], log pi_theta of the sampled tokens.
    ref_logp: float [...], log pi_ref of the same tokens.
    estimator: "k1", "k2" or "k3".

  Returns:
    float32 [...].
  """
  _checks.check_choice(estimator, "kl_estimator", KL_ESTIMATORS)
  logp, ref_logp = _checks.as_array(logp), _checks.as_array(ref_logp)
  _checks.check_same_shape(ref_logp, "ref_logp", _checks.shape_of(logp, "logp"), "logp")
  return _kl_divergence(logp, ref_logp, estimator=estimator)


def _token_log_ratio(logp: jax.Array, log_ratio: jax.Array, mask: jax.Array,
                     ratio: str) -> jax.Array:
  """log rho per token [N, T] for the chosen ratio granularity (module docstring)."""
  if ratio == "token":
    return log_ratio
  row_sum = jnp.sum(log_ratio * mask, axis=-1)
  if ratio == "sequence":
    n = jnp.sum(mask, axis=-1)
    row_sum = row_sum / jnp.where(n > 0, n, 1.0)
  sequence = jax.lax.stop_gradient(row_sum)[:, None]
  return sequence + logp - jax.lax.stop_gradient(logp)


@jax.jit
def _policy_loss(logp: jax.Array, old_logp: jax.Array, advantages: jax.Array,
                 loss_mask: jax.Array, ref_logp: jax.Array | None, weights: jax.Array | None,
                 normalizer: jax.Array | None, surrogate: Surrogate
                 ) -> tuple[jax.Array, dict[str, jax.Array]]:
  mask = jnp.asarray(loss_mask).astype(jnp.float32)
  present = mask > 0
  # Padding may hold anything (even -inf): zero it so values and gradients stay finite.
  logp = jnp.where(present, jnp.asarray(logp, jnp.float32), 0.0)
  old_logp = jnp.where(present, jnp.asarray(old_logp, jnp.float32), 0.0)
  adv = jnp.asarray(advantages, jnp.float32)[:, None]
  log_ratio = logp - old_logp
  rho = jnp.exp(_token_log_ratio(logp, log_ratio, mask, surrogate.ratio))

  clipped = jnp.clip(rho, 1.0 - surrogate.clip_low, 1.0 + surrogate.clip_high)
  pg = jnp.maximum(-adv * rho, -adv * clipped)
  if surrogate.clip_ratio_c is not None:
    pg = jnp.where(adv < 0, jnp.minimum(pg, -adv * surrogate.clip_ratio_c), pg)
  pg = jnp.where(present, pg, 0.0)
  token_loss = pg
  kl_tok = None
  if ref_logp is not None:
    ref = jnp.where(present, jnp.asarray(ref_logp, jnp.float32), 0.0)
    kl_tok = jnp.where(present, _kl(logp, ref, surrogate.kl_estimator), 0.0)
    token_loss = token_loss + surrogate.kl_coef * kl_tok

  w = jnp.ones(adv.shape[:1], jnp.float32) if weights is None else jnp.asarray(
      weights, jnp.float32)
  reduce = AGGREGATIONS.get(surrogate.aggregation)
  numerator, denominator = reduce(token_loss, mask, w, surrogate.max_len)
  if normalizer is not None:
    denominator = jnp.asarray(normalizer, jnp.float32)
  safe_denominator = jnp.where(denominator != 0, denominator, 1.0)
  loss = numerator / safe_denominator

  metrics = _metrics(_Tokens(mask, rho, log_ratio, pg, kl_tok), adv, w, safe_denominator,
                     surrogate)
  return loss, metrics


def _metrics(tokens: _Tokens, adv: jax.Array, w: jax.Array, denominator: jax.Array,
             surrogate: Surrogate) -> dict[str, jax.Array]:
  """Diagnostics (no gradient): token means over the masked tokens of this call, each
  row's tokens counted w_i times (a merged row reports what its w_i copies would).

  adv [N, 1]; w [N]; denominator: the loss's (non-zero) scalar denominator.
  """
  sg = jax.lax.stop_gradient
  mask = tokens.mask
  rho, log_ratio, pg = sg(tokens.rho), sg(tokens.log_ratio), sg(tokens.pg)
  present = (mask > 0) & (w[:, None] > 0)
  token_sums = {
      "num_tokens": jnp.ones_like(mask),
      "clip_frac_low": (adv < 0) & (rho < 1.0 - surrogate.clip_low),
      "clip_frac_high": (adv > 0) & (rho > 1.0 + surrogate.clip_high),
      # KL(pi_old || pi_theta) from tokens sampled from pi_old, k3 estimator.
      "approx_kl": jnp.exp(log_ratio) - 1.0 - log_ratio,
      "ratio_mean": rho,
  }
  if surrogate.clip_ratio_c is not None:
    token_sums["clip_frac_dual"] = (adv < 0) & (rho > surrogate.clip_ratio_c)
  if tokens.kl is not None:
    token_sums["kl"] = sg(tokens.kl)
  totals, ratio_min, ratio_max = _masked_totals(token_sums, rho, mask * w[:, None], present)
  num_tokens = totals.pop("num_tokens")
  any_token = num_tokens > 0
  safe_tokens = jnp.where(any_token, num_tokens, 1.0)
  metrics = {name: total / safe_tokens for name, total in totals.items()}
  metrics["ratio_mean"] = jnp.where(any_token, metrics["ratio_mean"], 1.0)
  metrics["ratio_min"] = jnp.where(any_token, ratio_min, 1.0)
  metrics["ratio_max"] = jnp.where(any_token, ratio_max, 1.0)
  metrics["num_tokens"] = num_tokens
  reduce = AGGREGATIONS.get(surrogate.aggregation)
  metrics["pg_loss"] = reduce(pg, mask, w, surrogate.max_len)[0] / denominator
  return metrics


def _masked_totals(token_sums: dict[str, jax.Array], rho: jax.Array, mask: jax.Array,
                   present: jax.Array
                   ) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
  """Masked sums of each [N, T] quantity (weighted by `mask`), and min/max of rho where
  `present`, in one pass over tokens.

  A variadic reduction over T computes every row total from one read of the inputs
  (separate reductions would each recompute the ratio); the [N] row totals are then
  summed with ordinary reductions, as accurate in float32 as the loss's own sums (one
  sequential reduction over all N * T tokens would not be).
  """
  names = list(token_sums)
  operands = tuple(jnp.asarray(x, jnp.float32) * mask for x in token_sums.values())
  operands += (jnp.where(present, rho, jnp.inf), jnp.where(present, rho, -jnp.inf))
  inits = tuple(jnp.float32(0.0) for _ in names) + (jnp.float32(jnp.inf),
                                                     jnp.float32(-jnp.inf))
  k = len(names)

  def combine(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    sums = tuple(x + y for x, y in zip(a[:k], b[:k], strict=True))
    return sums + (jnp.minimum(a[k], b[k]), jnp.maximum(a[k + 1], b[k + 1]))

  rows = jax.lax.reduce(operands, inits, combine, (1,))
  totals = {name: jnp.sum(row) for name, row in zip(names, rows[:k], strict=True)}
  return totals, jnp.min(rows[k]), jnp.max(rows[k + 1])


@functools.partial(jax.jit, static_argnames=("aggregation", "max_len"))
def _loss_normalizer(loss_mask: jax.Array, weights: jax.Array | None, *, aggregation: str,
                     max_len: int) -> jax.Array:
  mask = jnp.asarray(loss_mask).astype(jnp.float32)
  w = jnp.ones(mask.shape[:1], jnp.float32) if weights is None else jnp.asarray(
      weights, jnp.float32)
  return AGGREGATIONS.get(aggregation)(jnp.zeros_like(mask), mask, w, max_len)[1]


def _check_rows_and_tokens(loss_mask: Any, weights: Any) -> tuple[int, int]:
  n, t = _checks.check_ndim(loss_mask, "loss_mask", 2, "[N, T]")
  if weights is not None:
    _checks.check_same_shape(weights, "weights", (n,), "loss_mask rows [N]")
    if _checks.is_concrete(weights):
      values = np.asarray(weights)
      if values.size and not (np.all(np.isfinite(values)) and values.min() >= 0):
        raise ValueError(f"weights must be finite and >= 0, got min {values.min()}")
  return n, t


def _resolve_max_len(max_len: int | None, t: int) -> int:
  if max_len is None:
    return t
  if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
    raise ValueError(f"max_len must be a positive int, got {max_len!r}")
  return int(max_len)


def reduce_tokens(values: jax.Array, loss_mask: jax.Array, normalizer: jax.Array, *,
                  aggregation: str, weights: jax.Array, max_len: int) -> jax.Array:
  """Any per-token quantity [N, T] reduced as the policy loss is (`aggregation`'s
  numerator over the masked tokens, each row counted w_i times, divided by the full
  batch's `normalizer`), so micro-batches add up to the full batch's value."""
  mask = jnp.asarray(loss_mask, jnp.float32)
  numerator, _ = AGGREGATIONS.get(aggregation)(jnp.where(mask > 0, values, 0.0), mask,
                                               jnp.asarray(weights, jnp.float32), max_len)
  return numerator / jnp.where(normalizer != 0, normalizer, 1.0)


def loss_normalizer(loss_mask: Any, *, aggregation: str = "seq_mean_token_mean",
                    weights: Any = None, max_len: int | None = None) -> jax.Array:
  """The denominator of `aggregation` over a whole batch (for exact micro-batching).

  Args:
    loss_mask: [N, T] mask of the full batch.
    aggregation: a name in `AGGREGATIONS`.
    weights: optional float [N] per-row weights.
    max_len: the constant length of "seq_mean_token_sum_norm" (default T).

  Returns:
    float32 scalar: sum_i w_i n_i for "token_mean", else the weight of the non-empty
    rows; pass it as `policy_loss(..., normalizer=...)` for each micro-batch.
  """
  loss_mask, weights = _checks.as_array(loss_mask), _checks.as_array(weights)
  _, t = _check_rows_and_tokens(loss_mask, weights)
  AGGREGATIONS.get(aggregation)
  return _loss_normalizer(loss_mask, weights, aggregation=aggregation,
                          max_len=_resolve_max_len(max_len, t))


def _check_surrogate(surrogate: Surrogate, normalizer: Any) -> None:
  _checks.check_choice(surrogate.ratio, "ratio", RATIO_MODES)
  _checks.check_choice(surrogate.kl_estimator, "kl_estimator", KL_ESTIMATORS)
  AGGREGATIONS.get(surrogate.aggregation)
  clip_low, clip_high = surrogate.clip_low, surrogate.clip_high
  clip_ratio_c, kl_coef = surrogate.clip_ratio_c, surrogate.kl_coef
  if _checks.is_concrete(clip_low) and not 0.0 <= float(clip_low) < 1.0:
    raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
  if _checks.is_concrete(clip_high) and not float(clip_high) >= 0.0:
    raise ValueError(f"clip_high must be >= 0, got {clip_high}")
  if (clip_ratio_c is not None and _checks.is_concrete(clip_ratio_c)
      and not float(clip_ratio_c) > 1.0):
    raise ValueError(f"clip_ratio_c (dual clip) must be > 1, got {clip_ratio_c}")
  if _checks.is_concrete(kl_coef) and not float(kl_coef) >= 0.0:
    raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
  if normalizer is not None and _checks.shape_of(normalizer, "normalizer") != ():
    raise ValueError(
        f"normalizer must be a scalar, got shape {_checks.shape_of(normalizer, 'normalizer')}")


def policy_loss(logp: Any, old_logp: Any, advantages: Any, loss_mask: Any, *,
                surrogate: Surrogate = Surrogate(), ref_logp: Any = None,
                weights: Any = None, normalizer: Any = None
                ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """-J(theta) of one agent's batch (Eq. 14-19) and diagnostics.

  Args:
    logp: float [N, T], log pi_theta of each token (differentiate with respect to this).
    old_logp: float [N, T], log pi_old of each token (behaviour policy).
    advantages: float [N], A_i of each sequence (main: A_{q,M}; sub: A_{q,S,i}).
    loss_mask: [N, T], 1 (True) at tokens the policy sampled; 0 at prompts, tool
      outputs, the other agent's text and padding. Values other than 0/1 act as token
      weights. Off-mask entries of the log-prob arrays may hold anything.
    surrogate: the clip range, dual clip, ratio granularity, reduction, KL weight and
      estimator (`Surrogate`; default the released code's token-level clipped loss).
    ref_logp: optional float [N, T], log pi_ref for the KL penalty.
    weights: optional float [N] >= 0, per-row multiplicities.
    normalizer: optional scalar replacing the batch's own denominator; use
      `loss_normalizer` of the full batch when summing micro-batch losses.

  Returns:
    (loss float32 scalar, metrics): pg_loss (the loss without the KL term), clip_frac_low,
    clip_frac_high, approx_kl (k3 estimate of KL(pi_old || pi_theta)), ratio_mean,
    ratio_min, ratio_max (1 when there are no tokens), num_tokens, and clip_frac_dual
    (with clip_ratio_c) and kl (with ref_logp). Metrics are token means of this call.
  """
  logp, old_logp, advantages, loss_mask, ref_logp, weights = (
      _checks.as_array(x) for x in (logp, old_logp, advantages, loss_mask, ref_logp, weights))
  n, t = _check_rows_and_tokens(loss_mask, weights)
  for name, value in (("logp", logp), ("old_logp", old_logp)):
    _checks.check_same_shape(value, name, (n, t), "loss_mask")
  if ref_logp is not None:
    _checks.check_same_shape(ref_logp, "ref_logp", (n, t), "loss_mask")
  _checks.check_same_shape(advantages, "advantages", (n,), "loss_mask rows [N]")
  _check_surrogate(surrogate, normalizer)
  kl_coef = surrogate.kl_coef
  if ref_logp is None and _checks.is_concrete(kl_coef) and float(kl_coef) != 0.0:
    raise ValueError("kl_coef is non-zero but ref_logp is None: pass the reference log-probs")
  surrogate = dataclasses.replace(surrogate, max_len=_resolve_max_len(surrogate.max_len, t))
  return _policy_loss(logp, old_logp, advantages, loss_mask, ref_logp, weights, normalizer,
                      surrogate)
