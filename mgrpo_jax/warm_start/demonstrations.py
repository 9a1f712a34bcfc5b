"""Demonstrations (the warm start's data): the noisy scripted oracles' token sequences.

The rollout controller runs with the world's scripted oracles as policies
(`agents.OraclePolicy` around `tasks.oracle` agents with systematic mistakes,
`tasks.oracle.noise`), and every record's token ids and loss mask (exactly the tokens
the "policy" produced) become one `TokenSequence` of M or S: token in, token out, never
re-tokenized. The single agent's oracle is `agents.InlineOracle`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from mgrpo_jax.agents import Agent, OraclePolicy, RolloutConfig, make_controller, specs
from mgrpo_jax.agents.inline_oracle import InlineOracle
from mgrpo_jax.config.modes import Mode, parse_mode
from mgrpo_jax.tasks.oracle import MainPolicy, OracleMainAgent, OracleSubAgent, SubPolicy
from mgrpo_jax.tasks.oracle.noise import MainNoise, SubNoise
from mgrpo_jax.text import Tokenizer
from mgrpo_jax.tools import ToolRegistry
from mgrpo_jax.training.batching import TokenSequence


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Demonstrators:
  """Who plays M and S in the demonstrations, with which prompts and ids.

  Attributes:
    main_oracle: M's scripted policy (default: the natural world's `OracleMainAgent`
      with `MainNoise()`'s systematic mistakes; e.g. a `Rendering.main_oracle` of the
      symbolic world; rate 0: the clean oracle).
    sub_oracle: S's scripted policy (default `OracleSubAgent` with `SubNoise()`).
    main_spec: M's (or the single agent's) prompts and tools (None: the mode's).
    sub_spec: S's prompts and tools.
    sub_tokenizer: S's tokenizer (None: M's): the demonstrations' `sub` holds its ids, so
      each agent is fine-tuned on ids of its own vocabulary.
    single_oracle: the single agent's scripted policy (None: `InlineOracle` of
      `main_oracle` and `sub_oracle`).
  """

  main_oracle: MainPolicy = dataclasses.field(
      default_factory=lambda: OracleMainAgent(MainNoise()))
  sub_oracle: SubPolicy = dataclasses.field(default_factory=lambda: OracleSubAgent(SubNoise()))
  main_spec: specs.AgentSpec | None = None
  sub_spec: specs.AgentSpec = specs.SUB
  sub_tokenizer: Tokenizer | None = None
  single_oracle: MainPolicy | None = None


def collect_demonstrations(tokenizer: Tokenizer, registry: ToolRegistry, config: RolloutConfig,
                           tasks: Sequence[Any], *, demonstrators: Demonstrators | None = None,
                           num_rollouts: int = 1, key: int = 0,
                           mode: str | Mode = "mgrpo") -> Demonstrations:
  """Runs the noisy oracles as M and S over `tasks` and returns their token sequences.

  Args:
    tokenizer: M's (or the single agent's) tokenizer: `main` holds its ids.
    registry: the world's tools.
    config: the agents' limits (turns, context, new tokens, sub-calls).
    tasks: training questions (objects with `id` and `text`).
    demonstrators: the scripted M and S, their specs and S's tokenizer (default
      `Demonstrators()`: the natural world's noisy oracles).
    num_rollouts: rollouts per task (the oracles are deterministic: 1 is enough).
    key: the controller's key.
    mode: "mgrpo" (M with S) or "single_agent" (`InlineOracle`, same mistakes): a
      mode's `Mode.demonstration`.

  Returns:
    `Demonstrations` with every M (or single-agent) and S trajectory; `sub` is empty
    for the single agent.
  """
  mode = parse_mode(mode)
  if mode.demonstration != mode:
    raise ValueError(f"mode must be one of the demonstrated modes ('mgrpo', 'single_agent': "
                     f"a mode's Mode.demonstration), got {mode.name!r}")
  if not tasks:
    raise ValueError("tasks is empty: no demonstrations to collect")
  team = demonstrators or Demonstrators()
  if mode.single:
    oracle = team.single_oracle or InlineOracle(team.main_oracle, team.sub_oracle)
    single = Agent(OraclePolicy(oracle, tokenizer), tokenizer)
    controller = make_controller(mode, single, registry, config, main_spec=team.main_spec)
  else:
    main = Agent(OraclePolicy(team.main_oracle, tokenizer), tokenizer)
    sub_tokenizer = team.sub_tokenizer or tokenizer
    sub = Agent(OraclePolicy(team.sub_oracle, sub_tokenizer), sub_tokenizer)
    controller = make_controller(mode, main, registry, config, sub=sub,
                                 main_spec=team.main_spec, sub_spec=team.sub_spec)
  out = controller.run(list(tasks), num_rollouts, key)
  return Demonstrations(main=[record_sequence(r) for r in out.main],
                        sub=[record_sequence(r) for r in out.sub])
