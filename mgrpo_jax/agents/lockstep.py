"""The lockstep loop: every pending turn of a set of episodes goes into one policy call.

Round r: each running episode opens its next turn; the requests go to the policy in
ONE `generate` call (key `fold_in(key, r)`, split into a sampling key and an executor
key); each output is appended to its episode; the resulting tool calls are executed
together by `execute` (one batch per round, so delegations can be batched too). The
loop ends when no episode is running; every round advances every running episode by
one turn, so there are at most `max_turns` rounds.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import jax

from mgrpo_jax.agents.episode import AgentEpisode
from mgrpo_jax.agents.policy import Policy
from mgrpo_jax.agents.protocol import ParsedAction
from mgrpo_jax.tools import ToolRegistry

Executor = Callable[[list[tuple[AgentEpisode, ParsedAction]], jax.Array], None]


@dataclasses.dataclass
class LoopStats:
  """Counters of one agent's policy calls (cumulative over loops).

  Attributes:
    rounds: rounds with at least one pending turn.
    policy_calls: `generate` calls (equals `rounds`).
    policy_s: seconds inside `generate`.
    batch_sizes: requests per call, in call order.
  """
  rounds: int = 0
  policy_calls: int = 0
  policy_s: float = 0.0
  batch_sizes: list[int] = dataclasses.field(default_factory=list)


def run_lockstep(episodes: Sequence[AgentEpisode], policy: Policy, max_new_tokens: int,
                 key: jax.Array, execute: Executor, stats: LoopStats) -> None:
  """Runs `episodes` to their end (see the module docstring)."""
  round_index = 0
  while True:
    live, requests = [], []
    for episode in episodes:
      request = episode.open_turn()
      if request is not None:
        live.append(episode)
        requests.append(request)
    if not requests:
      return
    sample_key, execute_key = jax.random.split(jax.random.fold_in(key, round_index))
    start = time.perf_counter()
    outputs = policy.generate(requests, max_new_tokens, sample_key)
    stats.policy_s += time.perf_counter() - start
    stats.rounds += 1
    stats.policy_calls += 1
    stats.batch_sizes.append(len(requests))
    if len(outputs) != len(requests):
      raise ValueError(f"the policy returned {len(outputs)} outputs for {len(requests)} "
                       "requests")
    pending = []
    for episode, output in zip(live, outputs, strict=True):
      action = episode.take_output(output, policy.version)
      if action is not None:
        pending.append((episode, action))
    if pending:
      execute(pending, execute_key)
    round_index += 1


def tool_executor(registry: ToolRegistry) -> Executor:
  """Executes each pending call through `registry`, in the registry of the episode's
  task (`ToolRegistry.for_task`, keyed by the episode key's query id); errors come back
  as observations."""

  def execute(pending: list[tuple[AgentEpisode, ParsedAction]], key: jax.Array) -> None:
    del key
    for episode, action in pending:
      result = registry.for_task(episode.key[0]).call(action.name, dict(action.arguments))
      episode.observe(result.text, ok=result.ok, latency_s=result.latency_s)

  return execute
