"""Clipped policy loss (paper Eq. 14-19): hand-computed values, a loop reference,
micro-batch exactness, masked gradients and the KL estimators."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.core import losses

AGGREGATIONS = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum",
                "seq_mean_token_sum_norm"]


def reference_loss(logp, old_logp, adv, mask, *, clip_low, clip_high, ratio, aggregation,
                   ref_logp=None, kl_coef=0.0, kl_estimator="k3", weights=None,
                   clip_ratio_c=None):
  """The objective written out token by token with Python floats (float64)."""
  n_rows, t_len = mask.shape
  weights = [1.0] * n_rows if weights is None else [float(w) for w in weights]
  numerator, token_count, row_weight = 0.0, 0.0, 0.0
  for i in range(n_rows):
    tokens = [t for t in range(t_len) if mask[i, t]]
    log_ratios = [float(logp[i, t]) - float(old_logp[i, t]) for t in tokens]
    if ratio == "sequence" and tokens:
      seq_rho = math.exp(sum(log_ratios) / len(tokens))
    elif ratio == "trajectory":
      seq_rho = math.exp(sum(log_ratios))
    row_loss = 0.0
    for t, log_ratio in zip(tokens, log_ratios, strict=True):
      rho = math.exp(log_ratio) if ratio == "token" else seq_rho
      a = float(adv[i])
      loss = max(-a * rho, -a * min(max(rho, 1 - clip_low), 1 + clip_high))
      if clip_ratio_c is not None and a < 0:
        loss = min(loss, -a * clip_ratio_c)
      if ref_logp is not None:
        log_r = float(ref_logp[i, t]) - float(logp[i, t])
        kl = {"k1": -log_r, "k2": 0.5 * log_r**2,
              "k3": math.exp(log_r) - 1 - log_r}[kl_estimator]
        loss += kl_coef * kl
      row_loss += loss
    if tokens:
      row_weight += weights[i]
    token_count += weights[i] * len(tokens)
    if aggregation == "seq_mean_token_mean" and tokens:
      row_loss /= len(tokens)
    if aggregation == "seq_mean_token_sum_norm":
      row_loss /= t_len
    numerator += weights[i] * row_loss
  denominator = token_count if aggregation == "token_mean" else row_weight
  return numerator / denominator if denominator else 0.0


def _batch(seed: int, n: int = 6, t: int = 7, empty_rows=(2,)):
  rng = np.random.default_rng(seed)
  old_logp = np.log(rng.uniform(0.05, 1.0, (n, t))).astype(np.float32)
  logp = (old_logp + rng.normal(0.0, 0.3, (n, t))).astype(np.float32)
  ref_logp = (old_logp + rng.normal(0.0, 0.2, (n, t))).astype(np.float32)
  adv = rng.normal(size=n).astype(np.float32)
  mask = rng.random((n, t)) < 0.7
  mask[:, 0] = True
  for row in empty_rows:
    mask[row] = False
  weights = rng.integers(0, 4, n).astype(np.float32)
  return logp, old_logp, ref_logp, adv, mask, weights


# A worked example. Row 0: A = 1, ratios (1, 1.5) on 2 tokens; row 1: A = -2, ratios
# (1, 0.5, 1.25) on 3 tokens; row 2: A = 5 with an empty mask (an empty alignment slot).
# Token losses, clip [0.8, 1.28]:
#   row 0: max(-1, -1) = -1;  max(-1.5, -1.28) = -1.28                       sum -2.28
#   row 1: max(2, 2) = 2;  max(1, 1.6) = 1.6;  max(2.5, 2.5) = 2.5           sum  6.1
OLD = np.array([[-1.0, -2.0, -0.5], [-0.3, -1.2, -0.7], [-1.0, -1.0, -1.0]], np.float32)
RATIOS = np.array([[1.0, 1.5, 1.0], [1.0, 0.5, 1.25], [1.0, 1.0, 1.0]])
LOGP = (OLD + np.log(RATIOS)).astype(np.float32)
ADV = np.array([1.0, -2.0, 5.0], np.float32)
MASK = np.array([[1, 1, 0], [1, 1, 1], [0, 0, 0]], bool)


@pytest.mark.parametrize("aggregation,expected", [
    ("token_mean", (-2.28 + 6.1) / 5),
    ("seq_mean_token_mean", (-2.28 / 2 + 6.1 / 3) / 2),
    ("seq_mean_token_sum", (-2.28 + 6.1) / 2),
    ("seq_mean_token_sum_norm", (-2.28 + 6.1) / (3 * 2)),
])
def test_hand_computed_token_ratio(aggregation, expected):
  loss, metrics = losses.policy_loss(LOGP, OLD, ADV, MASK,
                                     surrogate=losses.Surrogate(aggregation=aggregation))
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert float(metrics["pg_loss"]) == pytest.approx(expected, rel=1e-5)
  assert float(metrics["clip_frac_high"]) == pytest.approx(1 / 5)  # row 0, ratio 1.5
  assert float(metrics["clip_frac_low"]) == pytest.approx(1 / 5)  # row 1, ratio 0.5
  assert float(metrics["ratio_min"]) == pytest.approx(0.5, rel=1e-6)
  assert float(metrics["ratio_max"]) == pytest.approx(1.5, rel=1e-6)
  assert float(metrics["ratio_mean"]) == pytest.approx(5.25 / 5, rel=1e-6)
  assert float(metrics["num_tokens"]) == 5


def test_hand_computed_sequence_and_trajectory_ratios():
  # GSPO: row 0 rho = exp((0 + ln 1.5) / 2) = sqrt(1.5) = 1.2247 (inside the clip range),
  # row 1 rho = 0.625 ** (1/3) = 0.8550 (inside). Loss per token -A * rho.
  loss, _ = losses.policy_loss(LOGP, OLD, ADV, MASK, surrogate=losses.Surrogate(ratio="sequence"))
  assert float(loss) == pytest.approx((-math.sqrt(1.5) + 2 * 0.625 ** (1 / 3)) / 2, rel=1e-5)
  # Eq. 14 as written: row 0 rho = 1.5 -> clipped to 1.28: -1.28; row 1 rho = 0.625 ->
  # max(2 * 0.625, 2 * 0.8) = 1.6.
  loss, _ = losses.policy_loss(LOGP, OLD, ADV, MASK,
                               surrogate=losses.Surrogate(ratio="trajectory"))
  assert float(loss) == pytest.approx((-1.28 + 1.6) / 2, rel=1e-5)


def test_hand_computed_dual_clip():
  # A = -1, ratio 5: clipped surrogate max(5, 1.28) = 5, dual clip c = 3 caps it at 3.
  # A = +1, ratio 5: -1.28, untouched by the dual clip.
  old = np.zeros((2, 1), np.float32)
  logp = np.full((2, 1), math.log(5.0), np.float32)
  adv = np.array([-1.0, 1.0], np.float32)
  mask = np.ones((2, 1), bool)
  loss, metrics = losses.policy_loss(
      logp, old, adv, mask, surrogate=losses.Surrogate(clip_ratio_c=3.0, aggregation="token_mean"))
  assert float(loss) == pytest.approx((3.0 - 1.28) / 2, rel=1e-5)
  assert float(metrics["clip_frac_dual"]) == pytest.approx(0.5)
  plain, _ = losses.policy_loss(logp, old, adv, mask,
                                surrogate=losses.Surrogate(aggregation="token_mean"))
  assert float(plain) == pytest.approx((5.0 - 1.28) / 2, rel=1e-5)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("ratio", ["token", "sequence", "trajectory"])
def test_matches_loop_reference(aggregation, ratio):
  logp, old, ref, adv, mask, weights = _batch(seed=len(aggregation) * 7 + len(ratio))
  estimator = ("k1", "k2", "k3")[(len(aggregation) + len(ratio)) % 3]
  options = dict(clip_low=0.2, clip_high=0.28, ratio=ratio, aggregation=aggregation,
                 kl_coef=0.3, kl_estimator=estimator, clip_ratio_c=2.0)
  loss, _ = losses.policy_loss(logp, old, adv, mask, surrogate=losses.Surrogate(**options),
                               ref_logp=ref, weights=weights)
  want = reference_loss(logp, old, adv, mask, ref_logp=ref, weights=weights, **options)
  assert float(loss) == pytest.approx(want, rel=1e-5, abs=1e-6), estimator


@functools.partial(jax.jit, static_argnames=("aggregation", "ratio"))
def _loss_and_grad(logp, old, adv, mask, weights, normalizer, *, aggregation, ratio):
  def loss_fn(lp):
    return losses.policy_loss(lp, old, adv, mask, weights=weights, normalizer=normalizer,
                              surrogate=losses.Surrogate(aggregation=aggregation,
                                                         ratio=ratio))[0]
  return jax.value_and_grad(loss_fn)(logp)


@pytest.mark.parametrize("aggregation,ratio", [(a, "token") for a in AGGREGATIONS] + [
    ("seq_mean_token_mean", "sequence"), ("token_mean", "trajectory")])
def test_micro_batches_sum_to_the_full_batch(aggregation, ratio):
  logp, old, _, adv, mask, weights = _batch(seed=3, n=8, empty_rows=(2, 5))
  options = dict(aggregation=aggregation, ratio=ratio)
  full_loss, full_grad = _loss_and_grad(logp, old, adv, mask, weights, None, **options)
  normalizer = losses.loss_normalizer(mask, aggregation=aggregation, weights=weights)
  for splits in ([4], [2, 4, 6], [2, 6], [1, 7]):
    total, grads = 0.0, []
    for rows in np.split(np.arange(8), splits):
      # Each micro-batch is padded to 8 rows with empty rows (one compiled shape).
      def pad(x, rows=rows):
        return np.concatenate([x[rows], np.zeros_like(x[:8 - len(rows)])])

      loss, grad = _loss_and_grad(pad(logp), pad(old), pad(adv), pad(mask), pad(weights),
                                  normalizer, **options)
      total += float(loss)
      grads.append(np.asarray(grad)[:len(rows)])
      assert np.all(np.asarray(grad)[len(rows):] == 0.0)
    assert total == pytest.approx(float(full_loss), rel=1e-5, abs=1e-7), splits
    np.testing.assert_allclose(np.concatenate(grads), np.asarray(full_grad), rtol=1e-5,
                               atol=1e-8)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_integer_weights_equal_repeated_rows(aggregation):
  logp, old, _, adv, mask, _ = _batch(seed=5, n=4, empty_rows=(1,))
  weights = np.array([2.0, 3.0, 1.0, 0.0], np.float32)
  repeat = np.repeat(np.arange(4), weights.astype(int))
  surrogate = losses.Surrogate(aggregation=aggregation)
  weighted, _ = losses.policy_loss(logp, old, adv, mask, weights=weights, surrogate=surrogate)
  repeated, _ = losses.policy_loss(logp[repeat], old[repeat], adv[repeat], mask[repeat],
                                   surrogate=surrogate)
  assert float(weighted) == pytest.approx(float(repeated), rel=1e-5)


@pytest.mark.parametrize("ratio", ["token", "sequence", "trajectory"])
def test_gradient_is_zero_off_the_mask_even_with_garbage_padding(ratio):
  logp, old, ref, adv, mask, _ = _batch(seed=9)
  logp = np.where(mask, logp, -np.inf).astype(np.float32)
  old = np.where(mask, old, np.nan).astype(np.float32)

  def loss_fn(lp):
    return losses.policy_loss(lp, old, adv, mask, ref_logp=ref,
                              surrogate=losses.Surrogate(ratio=ratio, kl_coef=0.1))[0]

  loss, grad = jax.value_and_grad(loss_fn)(logp)
  grad = np.asarray(grad)
  assert np.isfinite(float(loss))
  assert np.all(grad[~mask] == 0.0)
  assert np.all(np.isfinite(grad)) and np.any(grad[mask] != 0.0)


def test_sequence_ratio_gradient_flows_per_token():
  # Unclipped GSPO row: d loss / d logp_t = -A * rho / n per token, over 1 counted row.
  old = np.zeros((2, 4), np.float32)
  logp = np.array([[0.1, -0.05, 0.02, 9.0], [0.0] * 4], np.float32)
  mask = np.array([[1, 1, 1, 0], [0, 0, 0, 0]], bool)
  adv = np.array([0.7, 1.0], np.float32)
  sequence = losses.Surrogate(ratio="sequence")
  grad = jax.grad(lambda lp: losses.policy_loss(lp, old, adv, mask, surrogate=sequence)[0])(
      logp)
  rho = math.exp((0.1 - 0.05 + 0.02) / 3)
  np.testing.assert_allclose(np.asarray(grad)[0], [-0.7 * rho / 3] * 3 + [0.0], rtol=1e-5)
  assert np.all(np.asarray(grad)[1] == 0.0)


def test_kl_estimators_match_closed_forms():
  # Every category x of a categorical pi, sampled with probability pi(x): the pi-weighted
  # mean of an estimator is its exact expectation.
  rng = np.random.default_rng(0)
  pi = rng.dirichlet(np.ones(6))
  ref = rng.dirichlet(np.ones(6))
  logp, ref_logp = np.log(pi), np.log(ref)
  kl = float(np.sum(pi * np.log(pi / ref)))
  second_moment = float(np.sum(pi * np.log(pi / ref) ** 2)) / 2
  expect = {name: float(np.sum(pi * np.asarray(losses.kl_divergence(
      logp.astype(np.float32), ref_logp.astype(np.float32), estimator=name))))
            for name in ("k1", "k2", "k3")}
  assert expect["k1"] == pytest.approx(kl, rel=1e-5)
  assert expect["k3"] == pytest.approx(kl, rel=1e-5)
  assert expect["k2"] == pytest.approx(second_moment, rel=1e-5)
  point = losses.kl_divergence(np.array([-1.0]), np.array([-1.5]), estimator="k3")
  assert float(point[0]) == pytest.approx(math.exp(-0.5) - 1 + 0.5, rel=1e-6)


def test_kl_penalty_adds_coef_times_token_mean_kl():
  logp, old, ref, adv, mask, _ = _batch(seed=12, empty_rows=())
  base, _ = losses.policy_loss(logp, old, adv, mask,
                               surrogate=losses.Surrogate(aggregation="token_mean"))
  with_kl, metrics = losses.policy_loss(
      logp, old, adv, mask, ref_logp=ref,
      surrogate=losses.Surrogate(aggregation="token_mean", kl_coef=0.25, kl_estimator="k2"))
  kl = 0.5 * (ref.astype(np.float64) - logp) ** 2
  token_mean_kl = kl[mask].mean()
  assert float(metrics["kl"]) == pytest.approx(token_mean_kl, rel=1e-5)
  assert float(with_kl) - float(base) == pytest.approx(0.25 * token_mean_kl, rel=1e-4)
  assert float(metrics["pg_loss"]) == pytest.approx(float(base), rel=1e-6)


def test_identical_policies_give_unit_ratio_and_zero_kl():
  logp, _, _, adv, mask, _ = _batch(seed=4)
  loss, metrics = losses.policy_loss(logp, logp, adv, mask, ref_logp=logp,
                                     surrogate=losses.Surrogate(kl_coef=1.0))
  assert float(metrics["approx_kl"]) == 0.0 and float(metrics["kl"]) == 0.0
  assert float(metrics["ratio_min"]) == float(metrics["ratio_max"]) == 1.0
  counted = mask.any(-1)
  assert float(loss) == pytest.approx(-float(adv[counted].mean()), rel=1e-5)


def test_all_empty_batch_gives_zero_loss():
  zeros = np.zeros((2, 3), np.float32)
  loss, metrics = losses.policy_loss(zeros, zeros, np.ones(2), np.zeros((2, 3), bool))
  assert float(loss) == 0.0 and float(metrics["num_tokens"]) == 0.0
  assert float(metrics["ratio_mean"]) == 1.0


def test_registered_aggregation_is_used():
  name = "test_row_sum"
  if name not in losses.AGGREGATIONS:
    @losses.AGGREGATIONS.register(name)
    def _row_sum(token_loss, mask, weights, max_len):
      del max_len
      return jnp.sum(weights * jnp.sum(token_loss * mask, -1)), jnp.float32(1.0)

  loss, _ = losses.policy_loss(LOGP, OLD, ADV, MASK, surrogate=losses.Surrogate(aggregation=name))
  assert float(loss) == pytest.approx(-2.28 + 6.1, rel=1e-5)


def test_bad_inputs_name_the_argument():
  ok = dict(logp=LOGP, old_logp=OLD, advantages=ADV, loss_mask=MASK)
  with pytest.raises(ValueError, match="advantages"):
    losses.policy_loss(**dict(ok, advantages=np.ones(4)))
  with pytest.raises(ValueError, match="old_logp"):
    losses.policy_loss(**dict(ok, old_logp=np.ones((3, 4))))
  with pytest.raises(ValueError, match="loss_mask"):
    losses.policy_loss(**dict(ok, loss_mask=np.ones(3)))
  with pytest.raises(ValueError, match="ref_logp"):
    losses.policy_loss(**ok, surrogate=losses.Surrogate(kl_coef=0.1))
  with pytest.raises(ValueError, match="loss aggregation"):
    losses.policy_loss(**ok, surrogate=losses.Surrogate(aggregation="mean"))
  with pytest.raises(ValueError, match="ratio"):
    losses.policy_loss(**ok, surrogate=losses.Surrogate(ratio="seq"))
  with pytest.raises(ValueError, match="clip_ratio_c"):
    losses.policy_loss(**ok, surrogate=losses.Surrogate(clip_ratio_c=0.5))
  with pytest.raises(ValueError, match="clip_low"):
    losses.policy_loss(**ok, surrogate=losses.Surrogate(clip_low=1.5))
  with pytest.raises(ValueError, match="weights"):
    losses.policy_loss(**ok, weights=np.array([1.0, -1.0, 1.0]))
  with pytest.raises(ValueError, match="kl_estimator"):
    losses.kl_divergence(np.zeros(2), np.zeros(2), estimator="k4")
