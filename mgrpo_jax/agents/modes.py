"""The rollout controller of each experiment mode (`config.modes`, docs/ALGORITHM.md).

  mgrpo          distinct M and S policies (both trained)
  frozen_sub     distinct M and S policies; the trainer never updates S
  no_alignment   as mgrpo (the ablation changes only how the trainer groups S records)
  shared_policy  one policy (and tokenizer) plays both roles
  single_agent   one policy with search, visit and reason; no sub-agent

Rollouts do not depend on whether a policy is trained, so the first three modes build
the same controller; training differences live in the trainer.
"""

from __future__ import annotations

import dataclasses

from mgrpo_jax.agents import specs
from mgrpo_jax.agents.config import RolloutConfig
from mgrpo_jax.agents.controller import RolloutController
from mgrpo_jax.agents.policy import Policy
from mgrpo_jax.agents.sub_client import InProcessSubAgentClient, Summarizer
from mgrpo_jax.config.modes import MODES, Mode, parse_mode
from mgrpo_jax.text import Tokenizer
from mgrpo_jax.tools import ToolRegistry

__all__ = ["MODES", "Agent", "make_controller"]


@dataclasses.dataclass(frozen=True)
class Agent:
  """A policy and the tokenizer its prompts are rendered with."""
  policy: Policy
  tokenizer: Tokenizer


def make_controller(mode: str | Mode, main: Agent, registry: ToolRegistry, config: RolloutConfig,
                    *, sub: Agent | None = None, summarizer: Summarizer | None = None,
                    main_spec: specs.AgentSpec | None = None,
                    sub_spec: specs.AgentSpec = specs.SUB) -> RolloutController:
  """The controller of `mode` (see the module docstring).

  `main_spec` defaults to `specs.SINGLE` for the single agent and `specs.MAIN` otherwise;
  pass variants (e.g. with a short system prompt) to change prompts or tools.
  """
  mode = parse_mode(mode)
  if mode.single:
    if sub is not None:
      raise ValueError("single_agent has no sub-agent: do not pass `sub`")
    return RolloutController(main.policy, main.tokenizer, registry, config,
                             spec=main_spec or specs.SINGLE)
  if mode.shared:
    if sub is not None and sub != main:
      raise ValueError("shared_policy uses the main agent in both roles: do not pass `sub`")
    sub = main
  if sub is None:
    raise ValueError(f"mode {mode.name!r} needs a sub-agent: pass `sub`")
  client = InProcessSubAgentClient(sub.policy, sub.tokenizer, registry, config,
                                   summarizer=summarizer, spec=sub_spec)
  return RolloutController(main.policy, main.tokenizer, registry, config, sub_client=client,
                           spec=main_spec or specs.MAIN)
