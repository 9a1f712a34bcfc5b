"""Agents: the action protocol, format validators, policies, the lockstep controller, records.

Modules (one job each):
  protocol       turn grammar (<thinking> + one <tool_call>/<result>), parser, rendering
  specs          M, S and single-agent tools, prompts and agent-level action checks
  validator      per-agent format state machine over turns (r_format)
  config         rollout limits (turns, context budgets, tokens per turn, sub-calls)
  policy         the Policy interface and the model policy (wraps `sampling.Sampler`)
  oracle_policy  the world's scripted oracles as a Policy
  episode        one trajectory under construction (tokens, masks, budgets, history)
  lockstep       one policy call per round for all pending turns of an agent
  sub_client     SubAgentClient interface and the in-process sub-agent
  controller     B x K rollouts of M (or the single agent), delegations batched per round
  records        frozen trajectory records (token ids, loss mask, logprobs, rewards)
  scoring        r_correct, r_expert and M's correctness replicated to S's records
  modes          mgrpo / frozen_sub / no_alignment / shared_policy / single_agent
  tools          search, visit, reason and the registry

`agents` imports `agents.tools`, `tasks`, `text`, `sampling`, `models`, `core` and
`utils`, never training. Protocol reference: docs/PROTOCOL.md.
"""

from mgrpo_jax.agents.config import AgentLimits, RolloutConfig
from mgrpo_jax.agents.controller import RolloutBatch, RolloutController, RolloutStats
from mgrpo_jax.agents.modes import MODES, Agent, make_controller
from mgrpo_jax.agents.oracle_policy import OraclePolicy
from mgrpo_jax.agents.policy import Policy, SamplerPolicy, TurnOutput, TurnRequest
from mgrpo_jax.agents.records import MainRecord, SubRecord, ToolCall, Trajectory
from mgrpo_jax.agents.scoring import rewards, score
from mgrpo_jax.agents.specs import MAIN, SINGLE, SUB, AgentSpec
from mgrpo_jax.agents.sub_client import (
  InProcessSubAgentClient,
  SubAgentClient,
  SubAgentResult,
  SubTaskRequest,
  truncated_result,
)

__all__ = [
  "MAIN", "MODES", "SINGLE", "SUB", "Agent", "AgentLimits", "AgentSpec",
  "InProcessSubAgentClient", "MainRecord", "OraclePolicy", "Policy", "RolloutBatch",
  "RolloutConfig", "RolloutController", "RolloutStats", "SamplerPolicy", "SubAgentClient",
  "SubAgentResult", "SubRecord", "SubTaskRequest", "ToolCall", "Trajectory", "TurnOutput",
  "TurnRequest", "make_controller", "rewards", "score", "truncated_result",
]
