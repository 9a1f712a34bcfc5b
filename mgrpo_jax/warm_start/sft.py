"""Supervised fine-tuning of one agent on its demonstrations (the warm start's SFT).

SFT reuses the jitted policy update (`update.make_update_fn`) with
`old_logp="recompute"`, advantage 1 on every real row and "token_mean" aggregation:
the ratio pi_theta / sg(pi_theta) is exactly 1, never clipped, so the surrogate
-sum_t m_t * ratio_t / sum_t m_t has the gradient of the masked mean log-likelihood

  grad L_SFT = -grad (sum_t m_t log pi_theta(y_t | y_<t)) / sum_t m_t,

i.e. one optimizer step on the token-mean NLL of the batch. Batches have a fixed row
count N (empty rows of weight 0 fill the last one) and T from the length buckets, so
few programs compile. The params are saved as a parameter checkpoint
(`checkpoint.save_params`), what `agent_setup.restore_init_params`
(`<agent>.model.init_checkpoint`) reads into any RL state of the same model shape.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mgrpo_jax.models.logprobs import token_logprobs
from mgrpo_jax.training.batching import DEFAULT_LENGTH_BUCKETS, TokenSequence, pack_sequences
from mgrpo_jax.training.checkpoint import save_params
from mgrpo_jax.training.train_state import StateLayout, TrainState, merge_model
from mgrpo_jax.training.update import LossConfig, UpdateConfig, make_update_fn


@dataclasses.dataclass(frozen=True, kw_only=True)
class SFTConfig:
  """Supervised fine-tuning schedule.

  Attributes:
    epochs: passes over the demonstrations.
    batch_rows: N, rows of every update batch.
    buckets: allowed T values of a batch (the smallest bucket >= its longest row).
    seed: seeds the shuffle of each epoch.
    micro_batch_size: rows per micro-batch of the update (0: whole batch).
    remat: what each decoder block keeps for the backward pass (`UpdateConfig.remat`;
      the values are the same whichever it is).
    length_groups: batches per length-sorted window (`sft_batches`; 1: plain shuffle).
    nll_every_epoch: measure the demonstrations' NLL after every epoch (one forward
      pass over them each), else only before and after.
    nll_sequences: measure that NLL on this many of the sequences, evenly spaced in
      their order (0: all). A diagnostic: on 2 CPU cores a pass over the demo's 1,200
      S demonstrations costs about 24 s, over 256 of them about 5 s.
  """

  epochs: int = 3
  batch_rows: int = 8
  buckets: tuple[int, ...] = DEFAULT_LENGTH_BUCKETS
  seed: int = 0
  micro_batch_size: int = 0
  remat: str = "none"
  length_groups: int = 1
  nll_every_epoch: bool = True
  nll_sequences: int = 0

  def __post_init__(self):
    if self.epochs < 1:
      raise ValueError(f"SFTConfig.epochs must be >= 1, got {self.epochs}")
    if self.batch_rows < 1:
      raise ValueError(f"SFTConfig.batch_rows must be >= 1, got {self.batch_rows}")
    if self.nll_sequences < 0:
      raise ValueError(f"SFTConfig.nll_sequences must be >= 0, got {self.nll_sequences}")


def sft_update_config(micro_batch_size: int = 0, remat: str = "none") -> UpdateConfig:
  """The policy-update options under which one update is one NLL step (module docstring)."""
  return UpdateConfig(loss=LossConfig(aggregation="token_mean"),
                      micro_batch_size=micro_batch_size, old_logp="recompute", remat=remat)


def sft_steps(num_sequences: int, config: SFTConfig) -> int:
  """Optimizer steps `sft` takes on `num_sequences` demonstrations: epochs x batches."""
  return config.epochs * -(-num_sequences // config.batch_rows)


def sft_batches(sequences: Sequence[TokenSequence], config: SFTConfig, epoch: int,
                *, pad_id: int = 0) -> list:
  """The [N, T] `TrainBatch`es of one epoch: a seeded shuffle cut into N-row batches.

  With `length_groups` g > 1, each window of g*N shuffled sequences is sorted by length
  before it is cut, and the batches are then shuffled: every sequence is still seen once
  per epoch, but a batch's T (its longest row's bucket) wastes less padding.

  The last batch is filled with empty rows of weight 0; advantages are 1 on real rows.
  """
  rng = np.random.default_rng([config.seed, epoch])
  order = rng.permutation(len(sequences))
  n = config.batch_rows
  if config.length_groups > 1:  # similar lengths share a batch: less padding, same data
    window = n * config.length_groups
    order = np.concatenate([
        sorted(order[i:i + window], key=lambda j: len(sequences[j].ids))
        for i in range(0, len(order), window)])
  chunks = [order[start:start + n] for start in range(0, len(order), n)]
  batches = []
  for index in rng.permutation(len(chunks)):
    chunk = [sequences[i] for i in chunks[index]]
    batches.append(pack_sequences(chunk, np.ones(len(chunk), np.float32), num_rows=n,
                                  buckets=config.buckets, pad_id=pad_id))
  return batches


@functools.partial(jax.jit, static_argnums=0)
def _nll_sums(graphdef: nnx.GraphDef, params: nnx.State, frozen: nnx.State | None,
              ids: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  logp = token_logprobs(merge_model(graphdef, params, frozen), ids)
  return -jnp.sum(logp * mask), jnp.sum(mask)


def nll_subset(sequences: Sequence[TokenSequence], count: int) -> Sequence[TokenSequence]:
  """`count` of `sequences`, evenly spaced in their order (all of them for count 0)."""
  if not count or count >= len(sequences):
    return sequences
  return [sequences[i] for i in np.linspace(0, len(sequences) - 1, count).astype(int)]


def demonstration_nll(state: TrainState, layout: StateLayout,
                      sequences: Sequence[TokenSequence], config: SFTConfig) -> float:
  """Mean NLL per loss token of `sequences` (`config.nll_sequences` of them) under
  `state.params` (nats)."""
  sequences = nll_subset(sequences, config.nll_sequences)
  total, tokens = 0.0, 0.0
  for batch in sft_batches(sequences, config, epoch=0):
    nll, count = _nll_sums(layout.graphdef, state.params, layout.frozen, batch.ids,
                           batch.loss_mask * batch.weights[:, None])
    total, tokens = total + float(nll), tokens + float(count)
  if tokens == 0:
    raise ValueError("the demonstrations hold no loss tokens")
  return total / tokens


def sft(state: TrainState, layout: StateLayout, sequences: Sequence[TokenSequence],
        config: SFTConfig = SFTConfig(), *, checkpoint_dir: str | None = None,
        pad_id: int = 0, progress: Callable[[int, int], None] | None = None
        ) -> tuple[TrainState, dict[str, Any]]:
  """Supervised fine-tuning of one agent's train state on its demonstrations.

  Args:
    state: the agent's train state (donated: use the returned one).
    layout: its `StateLayout`; it must hold no reference policy (no KL in SFT).
    sequences: the agent's demonstrations.
    config: epochs, batch shape, buckets, shuffle seed.
    checkpoint_dir: when set, the final params are saved there (synchronously) as a
      parameter checkpoint, what `agent_setup.restore_init_params` reads.
    pad_id: token id of padding.
    progress: called as the steps are computed with (steps done, total steps); a step
      counts once its update has run, not when it was dispatched.

  Returns:
    (state, metrics): metrics["nll"] = [mean NLL before SFT, after epoch 1, ...] (or
    [before, after] without `nll_every_epoch`),
    metrics["steps"] = optimizer steps taken.
  """
  if not sequences:
    raise ValueError("sft got no demonstrations")
  update_config = sft_update_config(config.micro_batch_size, config.remat)
  update = make_update_fn(layout, update_config, config.batch_rows)
  nll = [demonstration_nll(state, layout, sequences, config)]
  steps, total = 0, sft_steps(len(sequences), config)
  in_flight = None  # the last dispatched step's metrics
  for epoch in range(config.epochs):
    for batch in sft_batches(sequences, config, epoch, pad_id=pad_id):
      state, metrics = update(state, batch)
      # JAX dispatches a step before the previous one is computed: waiting for the
      # previous one keeps one step queued and counts only computed steps as done.
      if in_flight is not None:
        jax.block_until_ready(in_flight)
        _report(progress, steps, total)
      in_flight, steps = metrics, steps + 1
    if config.nll_every_epoch or epoch == config.epochs - 1:
      nll.append(demonstration_nll(state, layout, sequences, config))
  _report(progress, steps, total)  # the NLL above waited for the last step
  metrics = {"nll": nll, "steps": steps}
  if checkpoint_dir is not None:
    save_warm_start(state, checkpoint_dir, metadata={"warm_start": metrics})
  return state, metrics


def _report(progress: Callable[[int, int], None] | None, done: int, total: int) -> None:
  if progress is not None:
    progress(done, total)


def save_warm_start(state: TrainState, directory: str, *,
                    metadata: dict[str, Any] | None = None) -> None:
  """Saves `state.params` in `directory` as a parameter checkpoint (`save_params`)."""
  save_params(directory, state.params, metadata=metadata)
