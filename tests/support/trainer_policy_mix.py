"""A policy mix for trainer tests: model-sampled thinking + the world oracle's action.

A random tiny model never writes a well-formed turn, so neither M nor S would ever
delegate, report or earn a reward. This wrapper (bound with gin in the trainer tests,
`mgrpo_jax.training.rollout_policy.wrapper = @trainer_policy_mix.ThinkingOracle`) keeps
the model in the loop through `agents.thinking_oracle.ThinkingOraclePolicy`: up to 8
model-sampled thinking ids + the oracle's action per turn, a quarter of the turns the raw
model sample, so rewards and advantages vary.
"""

from __future__ import annotations

import gin

from mgrpo_jax.agents.thinking_oracle import ThinkingOraclePolicy
from mgrpo_jax.tasks.oracle import OracleMainAgent, OracleSubAgent

THINKING_TOKENS = 8
GARBAGE_RATE = 0.25


@gin.configurable
def ThinkingOracle(model_policy, tokenizer, role: str) -> ThinkingOraclePolicy:  # noqa: N802 (gin name)
  """The mix for one agent (`role` "main" or "sub"); its version is the model's."""
  oracle = OracleSubAgent() if role == "sub" else OracleMainAgent()
  return ThinkingOraclePolicy(model_policy, oracle, tokenizer, thinking_tokens=THINKING_TOKENS,
                              garbage_rate=GARBAGE_RATE)
