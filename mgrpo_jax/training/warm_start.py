"""Warm start (the paper's stage 1): supervised fine-tuning on noisy-oracle demonstrations.

Demonstrations: the rollout controller runs with the world's scripted oracles as
policies (`agents.OraclePolicy` around `tasks.oracle` agents with systematic mistakes,
`tasks.oracle.noise`), and every record's token ids and loss mask (exactly the tokens
the "policy" produced) become one `TokenSequence` of M or S: token in, token out, never
re-tokenized.

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

from mgrpo_jax.agents import Agent, OraclePolicy, RolloutConfig, make_controller, specs
from mgrpo_jax.agents.modes import check_mode
from mgrpo_jax.agents.tools import ToolRegistry
from mgrpo_jax.models.logprobs import token_logprobs
from mgrpo_jax.tasks.oracle import (
  Action,
  MainPolicy,
  OracleMainAgent,
  OracleSubAgent,
  Step,
  SubPolicy,
)
from mgrpo_jax.tasks.oracle.noise import MainNoise, SubNoise
from mgrpo_jax.text import Tokenizer
from mgrpo_jax.training.batching import DEFAULT_LENGTH_BUCKETS, TokenSequence, pack_sequences
from mgrpo_jax.training.checkpoint import save_params
from mgrpo_jax.training.train_state import StateLayout, TrainState
from mgrpo_jax.training.update import LossConfig, UpdateConfig, make_update_fn

DEMO_MODES = ("mgrpo", "single_agent")


def demonstration_mode(mode: str) -> str:
  """The `DEMO_MODES` entry that demonstrates training mode `mode` (`modes.MODES`).

  Every multi-agent mode (mgrpo, frozen_sub, no_alignment, shared_policy) starts from
  the same M and S demonstrations; only the single agent plays both roles in one
  trajectory (`InlineOracle`).
  """
  return "single_agent" if check_mode(mode) == "single_agent" else "mgrpo"


class InlineOracle:
  """The single agent's scripted policy: M's oracle with each delegation done inline.

  Where M's oracle would delegate, the sub-agent oracle's tool calls are taken in the
  single agent's own trajectory, and S's report becomes the delegation's observation
  in M's replayed history. Both oracles keep their systematic mistakes.
  """

  def __init__(self, main: MainPolicy, sub: SubPolicy):
    self.main = main
    self.sub = sub

  def next_action(self, question: str, history: Sequence[Step]) -> Action:
    """The next tool call or answer, given the single agent's steps so far."""
    pending = list(history)
    main_steps: list[Step] = []
    while True:
      action = self.main.next_action(question, main_steps)
      if action.kind == "delegate":
        sub_steps: list[Step] = []
        while True:
          sub_action = self.sub.next_action(action.text, sub_steps)
          if sub_action.kind != "tool":
            break
          if not pending:
            return sub_action
          sub_steps.append(pending.pop(0))
        main_steps.append(Step(action, sub_action.text))
      elif action.kind == "tool" and pending:
        main_steps.append(pending.pop(0))
      else:
        return action


@dataclasses.dataclass(frozen=True)
class Demonstrations:
  """Token sequences of the demonstrations, one per record.

  Attributes:
    main: M's trajectories, in (query, rollout) order.
    sub: S's trajectories, one per executed delegation.
  """

  main: list[TokenSequence]
  sub: list[TokenSequence]


def record_sequence(record: Any) -> TokenSequence:
  """The `TokenSequence` of a `MainRecord` / `SubRecord` (ids, loss mask, log-probs)."""
  t = record.trajectory
  return TokenSequence(np.asarray(t.ids, np.int32), np.asarray(t.loss_mask, np.float32),
                       np.asarray(t.logprobs, np.float32))


def collect_demonstrations(tokenizer: Tokenizer, registry: ToolRegistry, config: RolloutConfig,
                           tasks: Sequence[Any], *, main_noise: MainNoise | None = None,
                           sub_noise: SubNoise | None = None, num_rollouts: int = 1,
                           key: int = 0, mode: str = "mgrpo",
                           main_spec: specs.AgentSpec | None = None,
                           sub_spec: specs.AgentSpec = specs.SUB,
                           sub_tokenizer: Tokenizer | None = None,
                           main_oracle: MainPolicy | None = None,
                           sub_oracle: SubPolicy | None = None) -> Demonstrations:
  """Runs the noisy oracles as M and S over `tasks` and returns their token sequences.

  Args:
    tokenizer: M's (or the single agent's) tokenizer: `main` holds its ids.
    registry: the world's tools.
    config: the agents' limits (turns, context, new tokens, sub-calls).
    tasks: training questions (objects with `id` and `text`).
    main_noise: M's systematic mistakes (default `MainNoise()`; rate 0: clean oracle).
    sub_noise: S's systematic mistakes (default `SubNoise()`).
    num_rollouts: rollouts per task (the oracles are deterministic: 1 is enough).
    key: the controller's key.
    mode: "mgrpo" (M with S) or "single_agent" (`InlineOracle`, same mistakes).
    main_spec: M's (or the single agent's) prompts and tools (default: the mode's).
    sub_spec: S's prompts and tools.
    sub_tokenizer: S's tokenizer (default `tokenizer`): `sub` holds its ids, so each
      agent is fine-tuned on ids of its own vocabulary.
    main_oracle: M's scripted policy, replacing the natural world's `OracleMainAgent`
      with `main_noise` (e.g. a `Rendering.main_oracle` of the symbolic world).
    sub_oracle: S's scripted policy, likewise.

  Returns:
    `Demonstrations` with every M (or single-agent) and S trajectory; `sub` is empty
    for the single agent.
  """
  if mode not in DEMO_MODES:
    raise ValueError(f"mode must be one of {DEMO_MODES}, got {mode!r}")
  if not tasks:
    raise ValueError("tasks is empty: no demonstrations to collect")
  if main_oracle is None:
    main_oracle = OracleMainAgent(main_noise if main_noise is not None else MainNoise())
  if sub_oracle is None:
    sub_oracle = OracleSubAgent(sub_noise if sub_noise is not None else SubNoise())
  if mode == "single_agent":
    single = Agent(OraclePolicy(InlineOracle(main_oracle, sub_oracle), tokenizer), tokenizer)
    controller = make_controller(mode, single, registry, config, main_spec=main_spec)
  else:
    main = Agent(OraclePolicy(main_oracle, tokenizer), tokenizer)
    sub_tokenizer = sub_tokenizer or tokenizer
    sub = Agent(OraclePolicy(sub_oracle, sub_tokenizer), sub_tokenizer)
    controller = make_controller(mode, main, registry, config, sub=sub, main_spec=main_spec,
                                 sub_spec=sub_spec)
  out = controller.run(list(tasks), num_rollouts, key)
  return Demonstrations(main=[record_sequence(r) for r in out.main],
                        sub=[record_sequence(r) for r in out.sub])


@dataclasses.dataclass(frozen=True, kw_only=True)
class SFTConfig:
  """Supervised fine-tuning schedule.

  Attributes:
    epochs: passes over the demonstrations.
    batch_rows: N, rows of every update batch.
    buckets: allowed T values of a batch (the smallest bucket >= its longest row).
    seed: seeds the shuffle of each epoch.
    micro_batch_size: rows per micro-batch of the update (0: whole batch).
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


def sft_update_config(micro_batch_size: int = 0) -> UpdateConfig:
  """The policy-update options under which one update is one NLL step (module docstring)."""
  return UpdateConfig(loss=LossConfig(aggregation="token_mean"),
                      micro_batch_size=micro_batch_size, old_logp="recompute")


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
def _nll_sums(graphdef: nnx.GraphDef, params: nnx.State, ids: jax.Array, mask: jax.Array
              ) -> tuple[jax.Array, jax.Array]:
  logp = token_logprobs(nnx.merge(graphdef, params), ids)
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
    nll, count = _nll_sums(layout.graphdef, state.params, batch.ids,
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
    progress: called after every step with (steps done, total steps).

  Returns:
    (state, metrics): metrics["nll"] = [mean NLL before SFT, after epoch 1, ...] (or
    [before, after] without `nll_every_epoch`),
    metrics["steps"] = optimizer steps taken.
  """
  if not sequences:
    raise ValueError("sft got no demonstrations")
  update_config = sft_update_config(config.micro_batch_size)
  update = make_update_fn(layout, update_config, config.batch_rows)
  nll = [demonstration_nll(state, layout, sequences, config)]
  steps, total = 0, config.epochs * -(-len(sequences) // config.batch_rows)
  for epoch in range(config.epochs):
    for batch in sft_batches(sequences, config, epoch, pad_id=pad_id):
      state, _ = update(state, batch)
      steps += 1
      if progress is not None:
        progress(steps, total)
    if config.nll_every_epoch or epoch == config.epochs - 1:
      nll.append(demonstration_nll(state, layout, sequences, config))
  metrics = {"nll": nll, "steps": steps}
  if checkpoint_dir is not None:
    save_warm_start(state, checkpoint_dir, metadata={"warm_start": metrics})
  return state, metrics


def save_warm_start(state: TrainState, directory: str, *,
                    metadata: dict[str, Any] | None = None) -> None:
  """Saves `state.params` in `directory` as a parameter checkpoint (`save_params`)."""
  save_params(directory, state.params, metadata=metadata)
