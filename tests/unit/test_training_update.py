"""The jitted update: exact micro-batching, learning on a fixed batch, one compile per
shape, rematerialization that saves memory on the CPU."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.core.losses import policy_loss
from mgrpo_jax.models import get_config, init_model, layers, token_logprobs
from mgrpo_jax.training import (
    LossConfig,
    MeshConfig,
    OptimizerConfig,
    TrainBatch,
    UpdateConfig,
    batch_shardings,
    create_mesh,
    create_train_state,
    learning_rate_schedule,
    make_optimizer,
    make_update_fn,
)
from mgrpo_jax.training.update import jit_update_step
from mgrpo_jax.utils.compile_counter import CompileCounter

N, T = 8, 16
logprobs = nnx.jit(token_logprobs)  # the eager model is slow to dispatch op by op
# eps = 1e-4: see test_training_sharding.py (Adam's first step amplifies float noise).
OPTIM = OptimizerConfig(learning_rate=1e-3, eps=1e-4, warmup_steps=2)


def _batch(seed: int = 0, seq_len: int = T) -> TrainBatch:
  rng = np.random.default_rng(seed)
  mask = (rng.random((N, seq_len)) < 0.6).astype(np.float32)
  mask[:, 0] = 0.0
  mask[2] = 0.0  # an empty row with weight 1
  return TrainBatch(
      ids=rng.integers(0, 256, (N, seq_len)).astype(np.int32), loss_mask=mask,
      old_logp=(-5.5 + 0.3 * rng.standard_normal((N, seq_len))).astype(np.float32),
      advantages=rng.standard_normal(N).astype(np.float32),
      weights=np.array([1, 0, 1, 2, 1, 1, 0, 1], np.float32))


@pytest.fixture(scope="module")
def setup():
  """A (2, 2, 2)-mesh state and its host copy, to start each test from the same state."""
  mesh = create_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
  state, layout = create_train_state(init_model(get_config("tiny"), seed=2),
                                     make_optimizer(OPTIM), mesh, seed=0)
  host = jax.tree.map(np.asarray, state)
  full = make_update_fn(layout, UpdateConfig(), N, learning_rate=learning_rate_schedule(OPTIM))
  return layout, host, full


def _fresh(layout, host):
  return jax.device_put(host, layout.shardings)


def test_micro_batched_update_equals_full_batch(setup):
  layout, host, full = setup
  micro = make_update_fn(layout, UpdateConfig(micro_batch_size=2), N,
                         learning_rate=learning_rate_schedule(OPTIM))
  state_full, state_micro = _fresh(layout, host), _fresh(layout, host)
  for seed in (0, 1):  # two steps: the second uses non-zero Adam moments
    state_full, metrics_full = full(state_full, _batch(seed))
    state_micro, metrics_micro = micro(state_micro, _batch(seed))
    for name, value in metrics_full.items():
      np.testing.assert_allclose(metrics_micro[name], value, rtol=2e-6, atol=1e-7,
                                 err_msg=name)
  for got, want in zip(jax.tree.leaves(state_micro), jax.tree.leaves(state_full), strict=True):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=0)
  moved = np.abs(np.asarray(state_full.params["embedding"][...]) - host.params["embedding"][...])
  assert moved.max() > 1e-4


def test_iterations_are_that_many_steps_on_one_batch(setup):
  """mu = 3 steps on a batch equal three single-step calls; metrics are the first's."""
  layout, host, full = setup
  mu = make_update_fn(layout, UpdateConfig(iterations=3), N,
                      learning_rate=learning_rate_schedule(OPTIM))
  batch = _batch(4)
  state_mu, metrics_mu = mu(_fresh(layout, host), batch)
  state, first = full(_fresh(layout, host), batch)
  for _ in range(2):
    state, last = full(state, batch)
  assert int(state_mu.step) == int(state.step) == 3
  for got, want in zip(jax.tree.leaves(state_mu), jax.tree.leaves(state), strict=True):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=0)
  for name, value in first.items():
    np.testing.assert_allclose(metrics_mu[name], value, rtol=1e-6, err_msg=name)
  np.testing.assert_allclose(metrics_mu["last_approx_kl"], last["approx_kl"], rtol=1e-5)
  assert abs(float(metrics_mu["last_approx_kl"]) - float(first["approx_kl"])) > 1e-3  # moved
  with pytest.raises(ValueError, match="optim.iterations=2 needs loss.old_logp='sampler'"):
    UpdateConfig(iterations=2, old_logp="recompute")


def test_metrics_match_an_independent_computation(setup):
  layout, host, full = setup
  batch = _batch(3)
  model = layout.model(_fresh(layout, host))
  logp = np.asarray(logprobs(model, batch.ids))
  _, want = policy_loss(logp, batch.old_logp, batch.advantages, batch.loss_mask,
                        weights=batch.weights)
  state, metrics = full(_fresh(layout, host), batch)
  # Token means count a row's tokens w_i times (weight 2: twice; weight 0: not at all).
  token_weight = (batch.loss_mask > 0) * batch.weights[:, None]
  diff = np.abs(logp - batch.old_logp)
  np.testing.assert_allclose(metrics["logp_diff_mean"],
                             (diff * token_weight).sum() / token_weight.sum(), rtol=1e-5)
  np.testing.assert_allclose(metrics["logp_diff_max"], diff[token_weight > 0].max(), rtol=1e-5)
  np.testing.assert_allclose(metrics["num_tokens"], token_weight.sum(), rtol=1e-6)
  for name in ("pg_loss", "ratio_mean", "ratio_max", "ratio_min", "clip_frac_low",
               "clip_frac_high", "approx_kl", "num_tokens"):
    np.testing.assert_allclose(metrics[name], want[name], rtol=1e-5, err_msg=name)
  np.testing.assert_allclose(metrics["loss"], want["pg_loss"], rtol=1e-5)
  # Warm-up: step 0 runs at lr / 2, and the step counter advances.
  np.testing.assert_allclose(metrics["learning_rate"], OPTIM.learning_rate / 2, rtol=1e-6)
  assert int(state.step) == 1


def _entropy(model, ids: np.ndarray) -> np.ndarray:
  """H of each position's next-token distribution, aligned as token_logprobs: [N, T]."""
  logits = np.asarray(nnx.jit(lambda m, x: m(x))(model, ids), np.float64)[:, :-1]
  logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)
                         ) - logits.max(-1, keepdims=True)
  entropy = -(np.exp(logp) * logp).sum(-1)
  return np.concatenate([np.zeros((ids.shape[0], 1)), entropy], axis=1)


@pytest.mark.parametrize("coef", [-0.05, 0.05])
def test_the_entropy_term_is_reduced_as_the_loss_and_moves_the_entropy_its_way(setup, coef):
  """loss = pg_loss - coef * H reduced as the policy loss (seq_mean_token_mean over the
  weighted rows); the same over micro-batches; an SGD-like step with coef < 0 lowers the
  entropy at the batch's tokens, coef > 0 raises it (advantages 0: nothing else moves)."""
  layout, host, _ = setup
  config = UpdateConfig(loss=LossConfig(entropy_coef=coef))
  schedule = learning_rate_schedule(OptimizerConfig(learning_rate=3e-2, warmup_steps=0))
  update = make_update_fn(layout, config, N, learning_rate=schedule)
  micro = make_update_fn(layout, UpdateConfig(loss=LossConfig(entropy_coef=coef),
                                              micro_batch_size=2), N, learning_rate=schedule)
  batch = _batch(6).replace(advantages=np.zeros(N, np.float32))
  model = layout.model(_fresh(layout, host))
  entropy = _entropy(model, batch.ids)
  mask = batch.loss_mask > 0
  rows = [i for i in range(N) if mask[i].any() and batch.weights[i] > 0]
  per_row = {i: entropy[i][mask[i]].mean() for i in rows}
  reduced = sum(batch.weights[i] * per_row[i] for i in rows) / sum(batch.weights[i] for i in rows)
  token_weight = mask * batch.weights[:, None]
  state, metrics = update(_fresh(layout, host), batch)
  _, metrics_micro = micro(_fresh(layout, host), batch)
  np.testing.assert_allclose(metrics["loss"], -coef * reduced, rtol=1e-4)
  np.testing.assert_allclose(metrics_micro["loss"], metrics["loss"], rtol=1e-5)
  np.testing.assert_allclose(metrics["entropy"], (entropy * token_weight).sum()
                             / token_weight.sum(), rtol=1e-4)
  after = _entropy(layout.model(state), batch.ids)
  change = ((after - entropy) * token_weight).sum() / token_weight.sum()
  assert np.sign(change) == np.sign(coef) and abs(change) > 1e-3


def test_loss_decreases_and_favoured_tokens_gain_probability(setup):
  layout, host, full = setup
  state = _fresh(layout, host)
  batch = _batch(4)
  on = batch.loss_mask > 0
  # On-policy: old log-probs are the current model's; positive advantages everywhere.
  old = np.asarray(logprobs(layout.model(state), batch.ids))
  batch = batch.replace(old_logp=old, advantages=np.full(N, 1.0, np.float32),
                        weights=np.ones(N, np.float32))
  before = old[on].mean()
  losses = []
  for _ in range(4):
    state, metrics = full(state, batch)
    losses.append(float(metrics["loss"]))
  after = np.asarray(logprobs(layout.model(state), batch.ids))[on].mean()
  # A = 1: loss = -mean_t min(rho_t, 1 + clip_high); it starts at -1 (rho = 1) and falls
  # until every ratio is clipped at 1.28, where it stays (no gradient any more).
  assert losses[0] == pytest.approx(-1.0, abs=1e-6)
  assert losses[1] < losses[0] - 0.1
  assert all(b <= a + 1e-6 for a, b in zip(losses, losses[1:], strict=False)), losses
  assert losses[-1] == pytest.approx(-1.28, abs=1e-5)
  assert float(metrics["clip_frac_high"]) == 1.0
  assert after > before + np.log(1.28) * 0.9, (before, after)


def test_remat_cuts_the_scratch_of_the_cpu_update():
  """Compiled scratch of one step (6 blocks, 8 x 128 tokens, one CPU device): "full" keeps
  at most 0.85 of what "none" does (0.77 measured). With XLA's default CPU scheduler the
  recomputed blocks were all live at once: 0.98 of "none"."""
  mesh = create_mesh(MeshConfig(), jax.devices()[:1])
  state, layout = create_train_state(init_model(get_config("tiny", num_layers=6), seed=0),
                                     make_optimizer(OPTIM), mesh, seed=0)
  rows, length = 8, 128
  batch = TrainBatch(ids=np.zeros((rows, length), np.int32),
                     loss_mask=np.ones((rows, length), np.float32),
                     old_logp=np.zeros((rows, length), np.float32),
                     advantages=np.ones(rows, np.float32), weights=np.ones(rows, np.float32))

  def scratch_bytes(remat):
    step = jit_update_step(layout, UpdateConfig(remat=remat), rows)
    compiled = step.lower(state, batch, layout.frozen).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  assert scratch_bytes("full") < 0.85 * scratch_bytes("none")


def test_the_update_sets_its_mesh_so_a_sharded_update_runs_splash(monkeypatch):
  """`make_update_fn` traces with the agent's mesh set: on 4 devices the splash update
  runs per shard (without the mesh it would refuse) and moves the parameters as the XLA
  update does."""
  # The splash kernel runs in the Pallas interpreter (it is lowered for TPUs only).
  monkeypatch.setattr(layers, "_SPLASH_INTERPRET", True)
  rows, length = 4, 128
  rng = np.random.default_rng(0)
  mask = np.zeros((rows, length), np.float32)
  mask[:, 64:] = 1.0
  batch = TrainBatch(ids=rng.integers(1, 256, (rows, length)).astype(np.int32),
                     loss_mask=mask, old_logp=np.full((rows, length), -5.5, np.float32),
                     advantages=np.asarray([1.0, -1.0, 0.5, -0.5], np.float32),
                     weights=np.ones(rows, np.float32))
  params = {}
  for attention in ("xla", "splash"):
    config = get_config("tiny", head_dim=64, num_heads=4, num_kv_heads=2,
                        attention=attention)
    mesh = create_mesh(MeshConfig(data=2, tensor=2), jax.devices()[:4])
    state, layout = create_train_state(init_model(config, seed=0),
                                       make_optimizer(OptimizerConfig(learning_rate=1e-3)),
                                       mesh, seed=0)
    state, _ = make_update_fn(layout, UpdateConfig(), rows)(state, batch)
    params[attention] = jax.tree.leaves(state.params)
  diff = np.concatenate([np.abs(np.asarray(s) - np.asarray(x)).ravel()
                         for x, s in zip(params["xla"], params["splash"], strict=True)])
  # Not bitwise (another kernel's rounding), so splash did run. AdamW divides each step
  # by the gradient's own scale: at a near-zero gradient the last bits may move one
  # element by up to the learning rate; all others agree to float rounding.
  assert diff.max() > 0 and diff.max() <= 1e-3
  assert np.mean(diff <= 2e-6) >= 0.999, np.sort(diff)[-10:]


def test_one_compile_per_batch_shape(setup):
  layout, host, full = setup
  rows = batch_shardings(layout, N)
  batches = [jax.device_put(_batch(seed, seq_len), rows)
             for seed, seq_len in ((0, 32), (1, 32), (2, 32))]
  state = _fresh(layout, host)
  jax.block_until_ready((state, batches))
  with CompileCounter() as counter:
    for batch in batches:
      state, metrics = full(state, batch)
    jax.block_until_ready(state)
  assert counter.count == 1  # T = 32 is new for this function; then no recompiles
  assert np.isfinite(float(metrics["loss"]))


def test_bad_batches_and_options_are_rejected(setup):
  layout, host, full = setup
  wrong = _batch()
  wrong = jax.tree.map(lambda x: x[:4], wrong)
  with pytest.raises(ValueError, match=r"batch.ids must be \[N=8, T\]"):
    full(_fresh(layout, host), wrong)
  with pytest.raises(ValueError, match="must divide the batch rows"):
    make_update_fn(layout, UpdateConfig(micro_batch_size=3), N)
  with pytest.raises(ValueError, match="reference policy"):
    make_update_fn(layout, UpdateConfig.from_config(
        {"loss": {"clip_low": 0.2, "clip_high": 0.28, "ratio": "token",
                  "aggregation": "token_mean", "kl_coef": 0.1, "kl_estimator": "k3",
                  "clip_ratio_c": 0.0, "old_logp": "sampler", "entropy_coef": 0.0},
         "optim": {"micro_batch_size": 0, "iterations": 1}, "limits": {"max_context": 64},
         "model": {"logprob_chunk": 64, "remat": "none"}, "sampling": {"temperature": 1.0}}),
        N)


def _tokenless(batch: TrainBatch) -> TrainBatch:
  return batch.replace(loss_mask=np.zeros_like(batch.loss_mask))


@pytest.mark.parametrize("config", [
    UpdateConfig(), UpdateConfig(micro_batch_size=2), UpdateConfig(iterations=2),
    UpdateConfig(loss=LossConfig(aggregation="seq_mean_token_sum_norm", max_len=T)),
], ids=["plain", "micro-batched", "two-iterations", "token-sum-norm"])
def test_a_batch_without_tokens_takes_the_full_steps_adamw_step_without_the_model(
    setup, config):
  """The sub-agent's batch of a step without delegations: the update skips the model and
  still takes, bit for bit, the step (moments, weight decay, counters) and metrics of
  the full program, which is never compiled."""
  layout, host, _ = setup
  schedule = learning_rate_schedule(OPTIM)
  update = make_update_fn(layout, config, N, learning_rate=schedule)
  full = jit_update_step(layout, config, N, learning_rate=schedule)
  state = _fresh(layout, host)
  state, _ = full(state, _batch(3), None)  # non-zero Adam moments first
  host_after_one = jax.tree.map(np.asarray, state)
  batch = _tokenless(_batch(5))
  want_state, want = _fresh(layout, host_after_one), None
  for _ in range(config.iterations):
    want_state, metrics = full(want_state, batch, None)
    want = want or metrics
  with CompileCounter() as counter:
    got_state, got = update(_fresh(layout, host_after_one), batch)
  assert counter.count == 1  # the small program only
  for name, value in want.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  assert set(got) - set(want) == ({"last_clip_frac_low", "last_clip_frac_high", "last_approx_kl"}
                                  if config.iterations > 1 else set())
  assert float(got["num_tokens"]) == 0.0 and float(got["grad_norm"]) == 0.0
  for a, b in zip(jax.tree.leaves(got_state), jax.tree.leaves(want_state), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  moved = np.abs(np.asarray(got_state.params["embedding"][...])
                 - host_after_one.params["embedding"][...])
  assert int(got_state.step) == 1 + config.iterations and moved.max() > 0  # Adam's momentum


def test_the_caller_says_whether_a_batch_has_tokens(setup):
  layout, host, _ = setup
  update = make_update_fn(layout, UpdateConfig(), N, learning_rate=learning_rate_schedule(OPTIM))
  batch = _batch(6)
  full_state, full_metrics = update(_fresh(layout, host), batch)
  said_state, said_metrics = update(_fresh(layout, host), batch, has_tokens=True)
  assert full_metrics == said_metrics
  assert float(full_metrics["num_tokens"]) > 0
  _, skipped = update(_fresh(layout, host), batch, has_tokens=False)
  assert float(skipped["num_tokens"]) == 0.0 and float(skipped["grad_norm"]) == 0.0
