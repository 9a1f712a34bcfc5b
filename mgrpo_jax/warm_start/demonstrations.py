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


def collect_demonstrations(tokenizer: Tokenizer, registry: ToolRegistry, config: RolloutConfig,
                           tasks: Sequence[Any], *, main_noise: MainNoise | None = None,
                           sub_noise: SubNoise | None = None, num_rollouts: int = 1,
                           key: int = 0, mode: str | Mode = "mgrpo",
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
    mode: "mgrpo" (M with S) or "single_agent" (`InlineOracle`, same mistakes): a
      mode's `Mode.demonstration`.
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
  mode = parse_mode(mode)
  if mode.demonstration != mode:
    raise ValueError(f"mode must be one of the demonstrated modes ('mgrpo', 'single_agent': "
                     f"a mode's Mode.demonstration), got {mode.name!r}")
  if not tasks:
    raise ValueError("tasks is empty: no demonstrations to collect")
  if main_oracle is None:
    main_oracle = OracleMainAgent(main_noise if main_noise is not None else MainNoise())
  if sub_oracle is None:
    sub_oracle = OracleSubAgent(sub_noise if sub_noise is not None else SubNoise())
  if mode.single:
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


