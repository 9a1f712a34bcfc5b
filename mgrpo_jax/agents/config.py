"""Rollout limits (docs/ALGORITHM.md section 1) as frozen dataclasses.

Defaults are the released code's (20 turns, 1024 new tokens per turn, a 32768-token
context) and the paper's D_max = 8 sub-agent calls per rollout.
"""

from __future__ import annotations

import dataclasses

from mgrpo_jax.agents import specs

ANSWER_NOW = ("Your context budget is nearly used up. Do not call any more tools: give your "
              "final <thinking>...</thinking><result>...</result> now.")


@dataclasses.dataclass(frozen=True)
class AgentLimits:
  """Limits of one agent's trajectory (for S: of one call).

  Attributes:
    max_turns: assistant turns; a trajectory without a result by then scores format 0.
    context_tokens: the whole trajectory (prompt, observations, sampled ids) must fit.
      A turn starts only if the prompt plus a full turn (generation prompt,
      `max_new_tokens`, the closing `<|im_end|>\n`) fits; an observation that
      would leave no room for another turn is replaced by the answer-now notice, and
      when even the notice leaves no room the trajectory ends (format 0).
    max_new_tokens: sampled ids per turn; a turn cut by this limit ends with format 0.
  """
  max_turns: int = 20
  context_tokens: int = 32768
  max_new_tokens: int = 1024

  def __post_init__(self):
    for field in ("max_turns", "context_tokens", "max_new_tokens"):
      if getattr(self, field) <= 0:
        raise ValueError(f"AgentLimits.{field} must be positive, got {getattr(self, field)}")
    if self.max_new_tokens >= self.context_tokens:
      raise ValueError(f"AgentLimits.max_new_tokens ({self.max_new_tokens}) must be below "
                       f"context_tokens ({self.context_tokens})")


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  """Limits of a rollout batch.

  Attributes:
    main: limits of M (or of the single agent).
    sub: limits of each S call.
    max_sub_calls: delegations per M rollout (paper D_max = 8); later delegations get
      an error observation instead of a sub-agent call.
    report_chars: the default summarizer truncates S's result to this many characters.
    max_argument_chars: longest string argument in a well-formed tool call.
    answer_now: the notice that replaces an observation that would overflow.
  """
  main: AgentLimits = AgentLimits()
  sub: AgentLimits = AgentLimits()
  max_sub_calls: int = 8
  report_chars: int = 2000
  max_argument_chars: int = specs.DEFAULT_MAX_ARGUMENT_CHARS
  answer_now: str = ANSWER_NOW

  def __post_init__(self):
    if self.max_sub_calls < 0:
      raise ValueError(f"RolloutConfig.max_sub_calls must be >= 0, got {self.max_sub_calls}")
    for field in ("report_chars", "max_argument_chars"):
      if getattr(self, field) <= 0:
        raise ValueError(f"RolloutConfig.{field} must be positive, got {getattr(self, field)}")
