"""Agents: the action protocol, format validators, policies, the lockstep controller, records.

Modules (one job each):
  protocol       turn grammar (<thinking> + one <tool_call>/<result>), parser, rendering
  specs          M, S and single-agent tools, prompts and agent-level action checks
  validator      per-agent format state machine over turns (r_format)
  config         rollout limits (turns, context budgets, tokens per turn, sub-calls)
  policy         the Policy interface and the model policy (wraps `sampling.Sampler`)
  oracle_policy  the world's scripted oracles as a Policy
  inline_oracle  the single agent's scripted policy (M's oracle, delegations done inline)
  episode        one trajectory under construction (tokens, masks, budgets, history)
  lockstep       one policy call per round for all pending turns of an agent
  sub_client     SubAgentClient interface and the in-process sub-agent
  controller     B x K rollouts of M (or the single agent), delegations batched per round
  records        frozen trajectory records (token ids, loss mask, logprobs, rewards)
  scoring        r_correct, r_expert and M's correctness replicated to S's records
  modes          mgrpo / frozen_sub / no_alignment / shared_policy / single_agent

The tools (search, visit, reason and the registry) are `mgrpo_jax.tools`, below both
`agents` and `tasks`. `agents` imports `tools`, `tasks`, `text`, `sampling`, `models`,
`core`, `utils` and `config.modes`, never training. Protocol reference: docs/PROTOCOL.md.

The names below are loaded on first use, so importing `mgrpo_jax.agents` does not pull
in JAX or the models.
"""

import importlib

_EXPORTS = {
    "config": ("AgentLimits", "RolloutConfig"),
    "controller": ("RolloutBatch", "RolloutController", "RolloutStats"),
    "inline_oracle": ("InlineOracle",),
    "modes": ("MODES", "Agent", "make_controller"),
    "oracle_policy": ("OraclePolicy",),
    "policy": ("Policy", "SamplerPolicy", "TurnOutput", "TurnRequest"),
    "records": ("MainRecord", "SubRecord", "ToolCall", "Trajectory"),
    "scoring": ("score",),
    "specs": ("MAIN", "SINGLE", "SUB", "AgentSpec"),
    "sub_client": ("InProcessSubAgentClient", "SubAgentClient", "SubAgentResult",
                   "SubTaskRequest", "truncated_result"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
  if name not in _MODULE_OF:
    raise AttributeError(f"module 'mgrpo_jax.agents' has no attribute {name!r}")
  return getattr(importlib.import_module(f"mgrpo_jax.agents.{_MODULE_OF[name]}"), name)


