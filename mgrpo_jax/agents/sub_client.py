"""Sub-agent calls: the `SubAgentClient` interface and the in-process implementation.

M's controller sends every delegation of one round as ONE batch of `SubTaskRequest`s
(plain data: query id, rollout index k, call index i, sub-task, context, a seed) and
gets back one `SubAgentResult` per request: the report M will read and S's
`SubRecord`. The remote client (`serving.remote_client`) implements the same `run`
over gRPC (`serving.messages` converts requests and results).

`InProcessSubAgentClient` runs S's lockstep loop (`lockstep.run_lockstep`, one S policy
call per S round) over the whole batch with its own policy, tokenizer and limits.
What M reads is `summarizer(trajectory)`: by default S's own final `<result>` text
truncated to `report_chars` (the released code instead asks an external LLM to
summarize S's transcript; plug such a summarizer in here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

import jax

from mgrpo_jax.agents import specs
from mgrpo_jax.agents.config import RolloutConfig
from mgrpo_jax.agents.episode import AgentEpisode
from mgrpo_jax.agents.lockstep import LoopStats, run_lockstep, tool_executor
from mgrpo_jax.agents.policy import Policy
from mgrpo_jax.agents.records import SubRecord, Trajectory
from mgrpo_jax.text import Tokenizer
from mgrpo_jax.tools import ToolRegistry

Summarizer = Callable[[Trajectory], str]
TRUNCATED = " [truncated]"


@dataclasses.dataclass(frozen=True)
class SubTaskRequest:
  """One delegation: M's rollout (query_id, rollout_index) makes its call `call_index`."""
  query_id: str
  rollout_index: int
  call_index: int
  subtask: str
  context: str = ""

  @property
  def key(self) -> tuple[str, int, int]:
    """(query id, k, i), the key of the call's `SubRecord`."""
    return (self.query_id, self.rollout_index, self.call_index)


@dataclasses.dataclass(frozen=True, eq=False)
class SubAgentResult:
  """The report M reads and S's record of the call."""
  report: str
  record: SubRecord


class SubAgentClient(Protocol):
  """Runs a batch of delegations to the end; results in request order."""

  def run(self, requests: Sequence[SubTaskRequest], seed: int) -> list[SubAgentResult]: ...


def truncated_result(max_chars: int) -> Summarizer:
  """The default summarizer: S's final result, cut to `max_chars` characters."""

  def summarize(trajectory: Trajectory) -> str:
    if trajectory.final is None:
      return f"error: the sub-agent ended without a report ({trajectory.end})"
    text = trajectory.final
    return text if len(text) <= max_chars else text[:max_chars] + TRUNCATED

  return summarize


class InProcessSubAgentClient:
  """S's lockstep loop in this process (see the module docstring)."""

  def __init__(self, policy: Policy, tokenizer: Tokenizer, registry: ToolRegistry,
               config: RolloutConfig, *, summarizer: Summarizer | None = None,
               spec: specs.AgentSpec = specs.SUB):
    self.policy = policy
    self.tokenizer = tokenizer
    self.config = config
    self.spec = spec
    self.summarizer = summarizer or truncated_result(config.report_chars)
    self.stats = LoopStats()
    self._execute = tool_executor(registry)

  def run(self, requests: Sequence[SubTaskRequest], seed: int) -> list[SubAgentResult]:
    episodes = [
      AgentEpisode((r.query_id, r.rollout_index, r.call_index), self.spec, self.tokenizer,
                   self.config.sub, task=r.subtask, context=r.context,
                   answer_now=self.config.answer_now,
                   max_argument_chars=self.config.max_argument_chars)
      for r in requests]
    run_lockstep(episodes, self.policy, self.config.sub.max_new_tokens,
                 jax.random.key(seed), self._execute, self.stats)
    results = []
    for request, episode in zip(requests, episodes, strict=True):
      trajectory = episode.trajectory()
      report = self.summarizer(trajectory)
      results.append(SubAgentResult(report, SubRecord(
        request.query_id, request.rollout_index, request.call_index, request.subtask,
        request.context, report, trajectory)))
    return results
