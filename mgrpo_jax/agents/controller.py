"""The rollout controller: B queries x K rollouts of M (or the single agent) in lockstep.

Each M round (`lockstep.run_lockstep`) sends every pending M turn to M's policy in one
call. The round's tool calls are then executed together: `reason`, `search` and
`visit` through the `ToolRegistry`, and every `delegate` of the round in ONE
`SubAgentClient.run` batch (which runs S's own lockstep rounds, one S policy call
each). A rollout past `max_sub_calls` delegations gets an error observation instead.
Randomness: round r of M uses `fold_in(key, r)`; the sub-agent batch of that round gets
a seed drawn from the round's executor key; so a key determines every trajectory.

The same code serves every mode (`modes.make_controller`): distinct M and S policies,
a frozen S (the trainer just never updates it), one policy in both roles, and the
single agent (its own tools, no sub-agent).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Protocol

import jax

from mgrpo_jax.agents import specs
from mgrpo_jax.agents.config import RolloutConfig
from mgrpo_jax.agents.episode import AgentEpisode
from mgrpo_jax.agents.lockstep import LoopStats, run_lockstep
from mgrpo_jax.agents.policy import Policy
from mgrpo_jax.agents.protocol import ParsedAction
from mgrpo_jax.agents.records import MainRecord, SubRecord
from mgrpo_jax.agents.sub_client import SubAgentClient, SubTaskRequest
from mgrpo_jax.text import Tokenizer
from mgrpo_jax.tools import ToolRegistry


class Task(Protocol):
  """What the controller reads of a question (e.g. `tasks.questions.Question`)."""
  id: str
  text: str


@dataclasses.dataclass
class RolloutStats:
  """Where a batch's wall time went.

  Attributes:
    wall_s: seconds of `RolloutController.run`.
    main: M's policy calls (rounds, seconds, batch sizes).
    sub_s: seconds inside `SubAgentClient.run` (S's policy and tools, and its overhead).
    sub_calls: delegations executed.
  """
  wall_s: float = 0.0
  main: LoopStats = dataclasses.field(default_factory=LoopStats)
  sub_s: float = 0.0
  sub_calls: int = 0


@dataclasses.dataclass(frozen=True, eq=False)
class RolloutBatch:
  """Records in (query, rollout) order; S records sorted by (query, rollout, call)."""
  main: list[MainRecord]
  sub: list[SubRecord]
  stats: RolloutStats


def _seed(key: jax.Array) -> int:
  return int(jax.random.randint(key, (), 0, 2**31 - 1))


class RolloutController:
  """Runs rollouts of one top-level agent (see the module docstring)."""

  def __init__(self, policy: Policy, tokenizer: Tokenizer, registry: ToolRegistry,
               config: RolloutConfig, *, sub_client: SubAgentClient | None = None,
               spec: specs.AgentSpec = specs.MAIN):
    if specs.DELEGATE in spec.tool_names and sub_client is None:
      raise ValueError(f"agent {spec.role!r} can delegate: pass a sub_client")
    self.policy = policy
    self.tokenizer = tokenizer
    self.registry = registry
    self.config = config
    self.sub_client = sub_client
    self.spec = spec

  def run(self, tasks: Sequence[Task], num_rollouts: int, key: jax.Array | int
          ) -> RolloutBatch:
    """K = `num_rollouts` rollouts of each task; deterministic given `key`."""
    if num_rollouts <= 0:
      raise ValueError(f"num_rollouts must be positive, got {num_rollouts}")
    order = {t.id: i for i, t in enumerate(tasks)}
    if len(order) != len(tasks):
      raise ValueError("task ids must be unique: records are keyed by (query id, rollout)")
    key = jax.random.key(key) if isinstance(key, int) else key
    start = time.perf_counter()
    stats = RolloutStats()
    config = self.config
    episodes = [AgentEpisode((t.id, k, -1), self.spec, self.tokenizer, config.main,
                             task=t.text, answer_now=config.answer_now,
                             max_argument_chars=config.max_argument_chars)
                for t in tasks for k in range(num_rollouts)]
    sub_counts = {e.key: 0 for e in episodes}
    sub_records: list[SubRecord] = []

    def execute(pending: list[tuple[AgentEpisode, ParsedAction]], round_key: jax.Array):
      delegations = []
      for episode, action in pending:
        if action.name != specs.DELEGATE:
          result = self.registry.for_task(episode.key[0]).call(action.name,
                                                               dict(action.arguments))
          episode.observe(result.text, ok=result.ok, latency_s=result.latency_s)
        elif sub_counts[episode.key] >= config.max_sub_calls:
          episode.observe(f"error: delegate: the limit of {config.max_sub_calls} sub-agent "
                          "calls is reached; answer with what you have", ok=False, latency_s=0.0)
        else:
          query_id, rollout, _ = episode.key
          delegations.append((episode, SubTaskRequest(
            query_id, rollout, sub_counts[episode.key], action.arguments["subtask"],
            action.arguments.get("context", ""))))
          sub_counts[episode.key] += 1
      if not delegations:
        return
      call_start = time.perf_counter()
      results = self.sub_client.run([r for _, r in delegations], _seed(round_key))
      elapsed = time.perf_counter() - call_start
      stats.sub_s += elapsed
      stats.sub_calls += len(delegations)
      for (episode, _), result in zip(delegations, results, strict=True):
        sub_records.append(result.record)
        episode.observe(result.report, ok=result.record.trajectory.final is not None,
                        latency_s=elapsed)

    run_lockstep(episodes, self.policy, config.main.max_new_tokens, key, execute, stats.main)
    main_records = [MainRecord(e.key[0], e.key[1], self.spec.role, e.trajectory(),
                               sub_counts[e.key]) for e in episodes]
    sub_records.sort(key=lambda r: (order[r.query_id], r.rollout_index, r.call_index))
    stats.wall_s = time.perf_counter() - start
    return RolloutBatch(main_records, sub_records, stats)
