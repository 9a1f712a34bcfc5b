"""The jitted, sharded policy update of one agent (paper Eq. 14-19, one optimizer step).

`make_update_fn(layout, config, num_rows)` returns `update(state, batch) -> (state,
metrics)`, compiled once per batch shape [N, T], with explicit shardings: the state
keeps the layout's shardings (and is donated), batch rows are split over the mesh's
(data, fsdp) axes, metrics are replicated scalars. With LoRA the state's parameters are
the adapters, the frozen base (`layout.frozen`) is an argument that is read, never
donated, and no gradient of it is computed. One call:

  1. logp = log pi_theta(ids[t] | ids[<t])                  (`models.token_logprobs`:
     the LM head `logprob_chunk` positions at a time, each block rematerialized as
     `remat` says)
  2. old_logp = the sampler's log-probs (default), or "recompute": the current params'
     log-probs before the update. With one optimizer step per batch those are the logp
     of step 1 itself, so they are taken from that forward pass (stop-gradient; no
     second pass); the ratio is then exactly 1.
  3. ref_logp = log pi_ref with the frozen reference params (only when kl_coef > 0).
  4. loss = `core.losses.policy_loss` with the full batch's normalizer
     (`loss_normalizer`), summed over micro-batches, and its gradient.
  5. AdamW step (global-norm clipping first), step += 1.
  With `iterations` = mu > 1, steps 1-5 run mu times on the same batch (pi_old stays
  the sampler's).

Micro-batching: with micro_batch_size = b < N, the batch is cut into N / b micro-batches
(rows m, m + N/b, m + 2N/b, ...: strided, so each micro-batch stays spread over the
mesh) and gradients are accumulated by a `lax.scan`. Every micro-batch loss uses the
full-batch denominator, so the accumulated loss and gradient equal the full-batch ones
up to float summation order, whatever the rows (empty masks, weight 0) hold.

Metrics (float32 scalars): loss, pg_loss, grad_norm (before clipping), learning_rate
(the one this step used, when the schedule is given), num_tokens, the policy-loss
diagnostics (clip_frac_low, clip_frac_high, approx_kl, ratio_mean/min/max, kl with a
reference, clip_frac_dual) as token means over the whole batch, and the sampler/trainer
mismatch: logp_diff_mean, logp_diff_max = mean / max over loss tokens of
|logp_sampler - logp_trainer| (the trainer's log-probs at the pre-update params). Token
means and num_tokens count each row's tokens w_i times (its weight: a merged row of the
sub-agent's batch stands for w_i slots), and rows of weight 0 not at all.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from mgrpo_jax.core.losses import (
  AGGREGATIONS,
  KL_ESTIMATORS,
  RATIO_MODES,
  Surrogate,
  loss_normalizer,
  policy_loss,
  reduce_tokens,
)
from mgrpo_jax.models.logprobs import DEFAULT_CHUNK, token_logprobs
from mgrpo_jax.models.sharding import batch_sharding
from mgrpo_jax.models.transformer import REMAT_POLICIES
from mgrpo_jax.training.batching import TrainBatch
from mgrpo_jax.training.mesh import replicated
from mgrpo_jax.training.train_state import StateLayout, TrainState, merge_model
from mgrpo_jax.utils.host_memory import release_free_host_memory

OLD_LOGP_SOURCES = ("sampler", "recompute")

# XLA options of the update on a CPU mesh. The CPU compiler's default scheduler orders a
# program for concurrency: it runs rematerialized blocks' recomputation early and holds
# many layers' activations at once. The memory-minimizing one orders the same program
# (the same results) to hold less: SmolLM2-135M at 8 x 256 takes 4.1 GiB of scratch
# instead of 4.9 at the same speed, and 3.5 / 3.4 GiB with remat "dots" / "full".
_CPU_COMPILER_OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}

# How per-micro-batch metrics of `policy_loss` combine into batch metrics; any other
# metric is a token mean and is combined weighted by its micro-batch's token count.
_SUMMED = ("loss", "pg_loss", "num_tokens")
_MIN = ("ratio_min",)
_MAX = ("ratio_max", "logp_diff_max")
# Metrics a loss call returns as sums over its tokens (each row's w_i times), which the
# step divides by its tokens: |sampler - trainer log-prob| and the policy's entropy.
_TOKEN_SUMS = ("logp_diff_mean", "entropy")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossConfig:
  """The clipped surrogate of one agent (keys `main.loss.*` / `sub.loss.*`).

  Attributes:
    clip_low: epsilon_low; the ratio is clipped below at 1 - clip_low.
    clip_high: epsilon_high; the ratio is clipped above at 1 + clip_high.
    ratio: "token", "sequence" (GSPO) or "trajectory" (see `core.losses`).
    aggregation: token-loss reduction, a name in `core.losses.AGGREGATIONS`.
    kl_coef: beta of the KL penalty to the frozen reference policy (0: no reference).
    kl_estimator: "k1", "k2" or "k3".
    clip_ratio_c: optional dual-clip bound (> 1) for negative advantages.
    max_len: the constant length of "seq_mean_token_sum_norm"; set it (e.g. to the
      context budget) so the loss does not depend on the length bucket (default T).
    entropy_coef: the loss adds -entropy_coef x H(pi_theta) at the loss tokens, reduced
      as the policy loss (> 0: an exploration bonus; < 0: sharpens the policy).
  """

  clip_low: float = 0.2
  clip_high: float = 0.28
  ratio: str = "token"
  aggregation: str = "seq_mean_token_mean"
  kl_coef: float = 0.0
  kl_estimator: str = "k3"
  clip_ratio_c: float | None = None
  max_len: int | None = None
  entropy_coef: float = 0.0

  def __post_init__(self):
    if self.ratio not in RATIO_MODES:
      raise ValueError(f"loss.ratio must be one of {RATIO_MODES}, got {self.ratio!r}")
    AGGREGATIONS.get(self.aggregation)
    if self.kl_estimator not in KL_ESTIMATORS:
      raise ValueError(f"loss.kl_estimator must be one of {KL_ESTIMATORS}, got "
                       f"{self.kl_estimator!r}")
    if not 0.0 <= self.clip_low < 1.0:
      raise ValueError(f"loss.clip_low must be in [0, 1), got {self.clip_low}")
    if self.clip_high < 0:
      raise ValueError(f"loss.clip_high must be >= 0, got {self.clip_high}")
    if self.kl_coef < 0:
      raise ValueError(f"loss.kl_coef must be >= 0, got {self.kl_coef}")
    if self.clip_ratio_c is not None and self.clip_ratio_c <= 1.0:
      raise ValueError(f"loss.clip_ratio_c must be > 1, got {self.clip_ratio_c}")
    if self.max_len is not None and self.max_len < 1:
      raise ValueError(f"loss.max_len must be >= 1, got {self.max_len}")

  @classmethod
  def from_config(cls, loss: Any, *, max_len: int | None = None) -> LossConfig:
    """Builds it from a `loss` ConfigDict section (`config.main.loss`)."""
    return cls(clip_low=float(loss["clip_low"]), clip_high=float(loss["clip_high"]),
               ratio=str(loss["ratio"]), aggregation=str(loss["aggregation"]),
               kl_coef=float(loss["kl_coef"]), kl_estimator=str(loss["kl_estimator"]),
               clip_ratio_c=float(loss["clip_ratio_c"]) or None, max_len=max_len,
               entropy_coef=float(loss["entropy_coef"]))

  def surrogate(self, max_len: int, *, with_reference: bool) -> Surrogate:
    """`core.losses.Surrogate` of these settings for rows of `max_len` tokens; the KL
    term only `with_reference` log-probs (else kl_coef 0)."""
    return Surrogate(clip_low=self.clip_low, clip_high=self.clip_high,
                     clip_ratio_c=self.clip_ratio_c,
                     kl_coef=self.kl_coef if with_reference else 0.0, ratio=self.ratio,
                     aggregation=self.aggregation, kl_estimator=self.kl_estimator,
                     max_len=max_len)


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpdateConfig:
  """How one agent's update step runs.

  Attributes:
    loss: the surrogate objective.
    micro_batch_size: rows per micro-batch (0: the whole batch at once); must divide N.
    old_logp: "sampler" (pi_old = the sampler's reported log-probs) or "recompute"
      (pi_old = the current params before the update).
    temperature: logits are divided by it before the log-softmax: the agent's
      `sampling.temperature`, so that pi_theta is the policy RL samples from (the
      sampler's `logprobs="model"` are at the same temperature).
    iterations: mu, optimizer steps on each batch (GRPO's inner iterations): every
      step's ratio is against the same pi_old, the sampler's, so the clip bounds how far
      the mu steps move the policy. mu > 1 needs old_logp="sampler".
    logprob_chunk: positions per LM-head chunk of the log-probs (0: the full logits
      [N, T, V] at once); the backward pass recomputes each chunk's logits.
    remat: what each decoder block keeps for the backward pass, a name in
      `models.transformer.REMAT_POLICIES` ("none", "full", "dots").
  """

  loss: LossConfig = LossConfig()
  micro_batch_size: int = 0
  old_logp: str = "sampler"
  temperature: float = 1.0
  iterations: int = 1
  logprob_chunk: int = DEFAULT_CHUNK
  remat: str = "none"

  def __post_init__(self):
    if self.micro_batch_size < 0:
      raise ValueError(f"micro_batch_size must be >= 0, got {self.micro_batch_size}")
    if self.old_logp not in OLD_LOGP_SOURCES:
      raise ValueError(f"old_logp must be one of {OLD_LOGP_SOURCES}, got {self.old_logp!r}")
    if self.temperature <= 0:
      raise ValueError(f"temperature must be > 0, got {self.temperature}")
    if self.iterations < 1:
      raise ValueError(f"optim.iterations must be >= 1, got {self.iterations}")
    if self.iterations > 1 and self.old_logp != "sampler":
      raise ValueError(f"optim.iterations={self.iterations} needs loss.old_logp='sampler' "
                       f"(with {self.old_logp!r}, pi_old would move with every step)")
    if self.logprob_chunk < 0:
      raise ValueError(f"model.logprob_chunk must be >= 0, got {self.logprob_chunk}")
    if self.remat not in REMAT_POLICIES:
      raise ValueError(f"model.remat must be one of {tuple(REMAT_POLICIES)}, got "
                       f"{self.remat!r}")

  @property
  def with_reference(self) -> bool:
    """Whether the train state needs a frozen reference policy."""
    return self.loss.kl_coef > 0

  @classmethod
  def from_config(cls, agent: Any) -> UpdateConfig:
    """Builds it from an agent's ConfigDict section (`config.main` or `config.sub`).

    Reads `loss.*` (with `loss.old_logp`), `optim.micro_batch_size`,
    `optim.iterations`, `model.logprob_chunk`, `model.remat`, `sampling.temperature`,
    and `limits.max_context` as the constant length of "seq_mean_token_sum_norm".
    """
    return cls(loss=LossConfig.from_config(agent["loss"],
                                           max_len=int(agent["limits"]["max_context"])),
               micro_batch_size=int(agent["optim"]["micro_batch_size"]),
               old_logp=str(agent["loss"]["old_logp"]),
               temperature=float(agent["sampling"]["temperature"]),
               iterations=int(agent["optim"]["iterations"]),
               logprob_chunk=int(agent["model"]["logprob_chunk"]),
               remat=str(agent["model"]["remat"]))


def _micro_batches(batch: TrainBatch, micro_batch_size: int, layout: StateLayout
                   ) -> TrainBatch:
  """[N, ...] -> [N / b, b, ...]; micro-batch m holds rows m, m + N/b, ..."""
  n = batch.ids.shape[0]
  count = n // micro_batch_size

  def split(x: jax.Array) -> jax.Array:
    x = jnp.swapaxes(x.reshape((micro_batch_size, count) + x.shape[1:]), 0, 1)
    rows = batch_sharding(layout.mesh, micro_batch_size, x.ndim - 1)
    spec = jax.sharding.PartitionSpec(None, *rows.spec)
    return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(layout.mesh, spec))

  return jax.tree.map(split, batch)


def _mismatch_sums(logp: jax.Array, sampler_logp: jax.Array, mask: jax.Array,
                   weights: jax.Array) -> dict[str, jax.Array]:
  """|logp_sampler - logp_trainer| over loss tokens, each row's counted w_i times (as the
  loss's token metrics): weighted sum, and max over rows of weight > 0."""
  present = (mask > 0) & (weights[:, None] > 0)
  diff = jnp.where(present, jnp.abs(jax.lax.stop_gradient(logp) - sampler_logp), 0.0)
  return {"logp_diff_mean": jnp.sum(diff * mask * weights[:, None]),
          "logp_diff_max": jnp.max(diff)}


def _combine(total: dict[str, jax.Array], part: dict[str, jax.Array]
             ) -> dict[str, jax.Array]:
  """Adds one micro-batch's metrics (in the additive form of `_weighted`)."""
  out = {}
  for name, value in part.items():
    if name in _MIN:
      out[name] = jnp.minimum(total[name], value)
    elif name in _MAX:
      out[name] = jnp.maximum(total[name], value)
    else:
      out[name] = total[name] + value
  return out


def _weighted(metrics: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """Per-call metrics -> additive form (token means times tokens; empty min/max neutral)."""
  tokens = metrics["num_tokens"]
  out = {}
  for name, value in metrics.items():
    if name in _MIN:
      out[name] = jnp.where(tokens > 0, value, jnp.inf)
    elif name in _MAX:
      out[name] = jnp.where(tokens > 0, value, -jnp.inf)
    elif name in _SUMMED or name in _TOKEN_SUMS:
      out[name] = value
    else:
      out[name] = value * tokens
  return out


def _finalize(metrics: dict[str, jax.Array]) -> dict[str, jax.Array]:
  tokens = metrics["num_tokens"]
  any_token = tokens > 0
  safe = jnp.where(any_token, tokens, 1.0)
  out = {}
  for name, value in metrics.items():
    if name in _MIN or name in _MAX:
      out[name] = jnp.where(any_token, value, 1.0 if name.startswith("ratio") else 0.0)
    elif name in _SUMMED:
      out[name] = value
    else:
      out[name] = value / safe
  return out


def _loss_fn(layout: StateLayout, config: UpdateConfig, normalizer: jax.Array,
             max_len: int, ref_params: nnx.State | None, frozen: nnx.State | None
             ) -> Callable[..., Any]:
  loss_config = config.loss

  def loss_fn(params: nnx.State, batch: TrainBatch
              ) -> tuple[jax.Array, dict[str, jax.Array]]:
    model = merge_model(layout.graphdef, params, frozen)
    scores = token_logprobs(model, batch.ids, temperature=config.temperature,
                            chunk=config.logprob_chunk, remat=config.remat,
                            with_entropy=bool(loss_config.entropy_coef))
    logp, entropy = scores if loss_config.entropy_coef else (scores, None)
    old_logp = (batch.old_logp if config.old_logp == "sampler"
                else jax.lax.stop_gradient(logp))
    ref_logp = None
    if ref_params is not None:
      ref_model = merge_model(layout.graphdef, jax.lax.stop_gradient(ref_params), frozen)
      ref_logp = jax.lax.stop_gradient(
          token_logprobs(ref_model, batch.ids, temperature=config.temperature,
                         chunk=config.logprob_chunk))
    loss, metrics = policy_loss(
        logp, old_logp, batch.advantages, batch.loss_mask,
        surrogate=loss_config.surrogate(max_len, with_reference=ref_logp is not None),
        ref_logp=ref_logp, weights=batch.weights, normalizer=normalizer)
    weights = jnp.asarray(batch.weights, jnp.float32)
    if entropy is not None:
      loss = loss - loss_config.entropy_coef * reduce_tokens(
          entropy, batch.loss_mask, normalizer, aggregation=loss_config.aggregation,
          weights=weights, max_len=max_len)
      metrics = dict(metrics, entropy=jnp.sum(jax.lax.stop_gradient(entropy)
                                              * batch.loss_mask * weights[:, None]))
    metrics = dict(metrics, loss=loss,
                   **_mismatch_sums(logp, batch.old_logp, batch.loss_mask, weights))
    return loss, _weighted(metrics)

  return loss_fn


def _gradients(layout: StateLayout, config: UpdateConfig, state: TrainState,
               batch: TrainBatch, frozen: nnx.State | None
               ) -> tuple[nnx.State, dict[str, jax.Array]]:
  """Gradient of the full-batch loss (accumulated over micro-batches) with respect to
  `state.params` (with LoRA: the adapters; `frozen` is the base), and raw metrics."""
  n, t = batch.ids.shape
  max_len = config.loss.max_len or t
  normalizer = loss_normalizer(batch.loss_mask, aggregation=config.loss.aggregation,
                               weights=batch.weights, max_len=max_len)
  grad_fn = jax.value_and_grad(
      _loss_fn(layout, config, normalizer, max_len, state.ref_params, frozen), has_aux=True)
  micro = config.micro_batch_size or n
  if micro == n:
    (_, metrics), grads = grad_fn(state.params, batch)
    return grads, metrics

  def accumulate(carry, micro_batch):
    grads_total, metrics_total = carry
    (_, metrics), grads = grad_fn(state.params, micro_batch)
    grads_total = jax.tree.map(lambda a, g: a + g.astype(a.dtype), grads_total, grads)
    return (grads_total, _combine(metrics_total, metrics)), None

  micro_batches = _micro_batches(batch, micro, layout)
  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), state.params)
  first = jax.tree.map(lambda x: x[0], micro_batches)
  metrics0 = jax.eval_shape(lambda: grad_fn(state.params, first)[0][1])
  neutral = {name: jnp.full(s.shape, jnp.inf if name in _MIN else
                            -jnp.inf if name in _MAX else 0.0, s.dtype)
             for name, s in metrics0.items()}
  (grads, metrics), _ = jax.lax.scan(accumulate, (zeros, neutral), micro_batches)
  grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, state.params)
  return grads, metrics


def _update_step(layout: StateLayout, config: UpdateConfig,
                 learning_rate: optax.Schedule | None, state: TrainState,
                 batch: TrainBatch, frozen: nnx.State | None
                 ) -> tuple[TrainState, dict[str, jax.Array]]:
  grads, metrics = _gradients(layout, config, state, batch, frozen)
  return _optimizer_step(layout, learning_rate, state, grads, _finalize(metrics))


def _tokenless_step(layout: StateLayout, learning_rate: optax.Schedule | None,
                    metric_shapes: dict[str, jax.ShapeDtypeStruct], state: TrainState
                    ) -> tuple[TrainState, dict[str, jax.Array]]:
  """`_update_step` on a batch without a loss token, without the model: every gradient
  is 0 (each token's loss term is multiplied by its 0 mask), and every metric is what
  `_finalize` makes of sums over no token. AdamW still moves its moments and decays the
  weights."""
  grads = jax.tree.map(jnp.zeros_like, state.params)
  metrics = _finalize({name: jnp.zeros(s.shape, s.dtype) for name, s in metric_shapes.items()})
  return _optimizer_step(layout, learning_rate, state, grads, metrics)


def _optimizer_step(layout: StateLayout, learning_rate: optax.Schedule | None,
                    state: TrainState, grads: nnx.State, metrics: dict[str, jax.Array]
                    ) -> tuple[TrainState, dict[str, jax.Array]]:
  """The AdamW step on `grads` (clipped by the optimizer), with grad_norm and the
  learning rate added to `metrics`."""
  updates, opt_state = layout.tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics["grad_norm"] = optax.tree.norm(grads)
  if learning_rate is not None:
    metrics["learning_rate"] = jnp.asarray(learning_rate(state.step))
  new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
  return new_state, {k: v.astype(jnp.float32) for k, v in metrics.items()}


def batch_shardings(layout: StateLayout, num_rows: int) -> TrainBatch:
  """The `NamedSharding`s of a [num_rows, T] `TrainBatch` on the agent's mesh."""
  rows2 = batch_sharding(layout.mesh, num_rows, 2)
  rows1 = batch_sharding(layout.mesh, num_rows, 1)
  return TrainBatch(ids=rows2, loss_mask=rows2, old_logp=rows2, advantages=rows1,
                    weights=rows1)


def jit_update_step(layout: StateLayout, config: UpdateConfig, num_rows: int, *,
                    learning_rate: optax.Schedule | None = None) -> Callable[..., Any]:
  """One optimizer step `step(state, batch, layout.frozen) -> (state, metrics)`, jitted,
  `state` donated (the frozen base is not).

  What `make_update_fn` runs `config.iterations` times (arguments as there, unchecked);
  `step.lower(state, batch, layout.frozen).compile()` gives its XLA program and memory
  analysis.
  """
  options = _CPU_COMPILER_OPTIONS if layout.mesh.devices.flat[0].platform == "cpu" else None
  frozen = (None if layout.frozen is None
            else jax.tree.map(lambda x: x.sharding, layout.frozen))
  return jax.jit(functools.partial(_update_step, layout, config, learning_rate),
                 in_shardings=(layout.shardings, batch_shardings(layout, num_rows), frozen),
                 out_shardings=(layout.shardings, replicated(layout.mesh)),
                 donate_argnums=0, compiler_options=options)


def make_update_fn(layout: StateLayout, config: UpdateConfig, num_rows: int, *,
                   learning_rate: optax.Schedule | None = None
                   ) -> Callable[[TrainState, TrainBatch], tuple[TrainState, dict]]:
  """The jitted update for batches of `num_rows` rows (any bucketed T).

  Args:
    layout: from `create_train_state`; its state must hold a reference policy iff
      `config.loss.kl_coef > 0`.
    config: loss, micro-batching and old-logprob options.
    num_rows: N, rows of every batch; `config.micro_batch_size` must divide it.
    learning_rate: the optimizer's schedule (`learning_rate_schedule`); when given,
      metrics report the learning rate of each step.

  Returns:
    update(state, batch, *, has_tokens=None) -> (new state, metrics dict of float32
    scalars): `config.iterations` optimizer steps on `batch`; the metrics are the first
    step's (at pi_old's parameters), with the last step's clip fractions and approx_kl
    as `last_*` when there are several. `state` is donated: do not use it after the
    call. `batch` may hold numpy arrays. A batch without a loss token (`has_tokens`
    False, or None and its `loss_mask` all 0: the sub-agent's batch of a step in which M
    delegated nothing) skips the model: its gradient is exactly 0, so the same AdamW
    step is taken from zeros by a small program, not a forward and backward pass over
    padding.
  """
  if config.with_reference != layout.has_reference:
    raise ValueError(f"loss.kl_coef={config.loss.kl_coef} needs a train state "
                     f"{'with' if config.with_reference else 'without'} a reference policy; "
                     "create it with with_reference=config.with_reference")
  micro = config.micro_batch_size
  if micro and num_rows % micro:
    raise ValueError(f"micro_batch_size={micro} must divide the batch rows N={num_rows}")
  step = jit_update_step(layout, config, num_rows, learning_rate=learning_rate)
  compiled_lengths: set[int] = set()
  tokenless: list[Callable[..., Any]] = []  # its step, built on the first such batch

  def tokenless_step(state: TrainState, batch: TrainBatch) -> Callable[..., Any]:
    if not tokenless:
      metric_shapes = jax.eval_shape(
          lambda s, b, f: _gradients(layout, config, s, b, f)[1], state, batch, layout.frozen)
      tokenless.append(jax.jit(
          functools.partial(_tokenless_step, layout, learning_rate, metric_shapes),
          in_shardings=(layout.shardings,), out_shardings=(layout.shardings,
                                                           replicated(layout.mesh)),
          donate_argnums=0))
    return tokenless[0]

  def update(state: TrainState, batch: TrainBatch, *, has_tokens: bool | None = None
             ) -> tuple[TrainState, dict]:
    if batch.ids.ndim != 2 or batch.ids.shape[0] != num_rows:
      raise ValueError(f"batch.ids must be [N={num_rows}, T], got shape {batch.ids.shape}")
    if has_tokens is None:
      has_tokens = _holds_tokens(batch)
    # Traced with the agent's mesh set, so that kernels which run per shard (splash
    # attention under `shard_map`) find it; the program is otherwise the same.
    with jax.set_mesh(layout.mesh):
      if has_tokens:
        if batch.ids.shape[1] not in compiled_lengths:
          # Compile first (the call below reuses the program), then hand the compiler's
          # freed host memory back before the step allocates its buffers.
          step.lower(state, batch, layout.frozen).compile()
          release_free_host_memory()
          compiled_lengths.add(batch.ids.shape[1])
        if config.iterations > 1:
          batch = jax.device_put(batch, batch_shardings(layout, num_rows))  # moved once
        def one_step(s: TrainState, b: TrainBatch = batch) -> tuple[TrainState, dict]:
          return step(s, b, layout.frozen)
      else:
        one_step = tokenless_step(state, batch)
      state, metrics = one_step(state)
      for _ in range(config.iterations - 1):
        state, last = one_step(state)
    if config.iterations == 1:
      return state, metrics
    return state, {**metrics, **{f"last_{k}": last[k] for k in _LAST_METRICS if k in last}}

  return update


def _holds_tokens(batch: TrainBatch) -> bool:
  """Whether `batch` has a loss token; True when this process cannot see all of it (a
  global array over several processes: the caller, which holds the host batch, says)."""
  mask = batch.loss_mask
  if isinstance(mask, jax.Array) and not mask.is_fully_addressable:
    return True
  return bool(np.any(np.asarray(mask)))


# What the last of several steps on one batch reports: how far the steps moved the policy.
_LAST_METRICS = ("clip_frac_low", "clip_frac_high", "approx_kl")
