"""The policy interface the controller calls once per round per agent, and the model policy.

`Policy.generate(requests, max_new_tokens, key)` takes the batch of pending turns of
one agent and returns one `TurnOutput` per request: the sampled ids (appended to the
trajectory verbatim), their log-probabilities and a finish reason ("eos", "stop" or
"length", as `sampling.Sampler` reports them). A request carries the prompt ids (what
a model reads) and the task text with the structured history (what a scripted policy
reads), so models and the world's oracles plug into the same controller.
`version` is recorded in each trajectory (the trainer bumps it after an update).

`SamplerPolicy` wraps `sampling.Sampler`: one `generate` call per batch, stop strings
`</tool_call>` and `</result>` (a turn ends after its action) plus the tokenizer's EOS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

import jax
import numpy as np

from mgrpo_jax.agents import protocol
from mgrpo_jax.sampling import Sampler, SamplingParams
from mgrpo_jax.tasks.oracle import Step


@dataclasses.dataclass(frozen=True, eq=False)
class TurnRequest:
  """One pending assistant turn.

  Attributes:
    key: (query id, rollout index, call index; -1 for M and the single agent).
    role: the agent's role ("main", "sub", "single").
    prompt_ids: int32 [P], the conversation so far, ending with the generation prompt.
    task: M's question or S's sub-task.
    history: the agent's earlier (action, observation) steps, oracle-style.
  """
  key: tuple[str, int, int]
  role: str
  prompt_ids: np.ndarray
  task: str
  history: tuple[Step, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class TurnOutput:
  """ids int32 [n] and logprobs float32 [n] of one sampled turn, and why it stopped."""
  ids: np.ndarray
  logprobs: np.ndarray
  finish_reason: str


class Policy(Protocol):
  """Anything that turns a batch of pending turns into sampled turns."""

  version: int

  def generate(self, requests: Sequence[TurnRequest], max_new_tokens: int,
               key: jax.Array) -> list[TurnOutput]: ...


class SamplerPolicy:
  """A model policy: `Sampler.generate` over the batch's prompt ids."""

  def __init__(self, sampler: Sampler, params: SamplingParams | None = None, *,
               version: int = 0):
    """Args:
      sampler: the agent's sampler (its model and tokenizer).
      params: sampling settings; `max_new_tokens` is replaced per call by the agent's
        limit. Default: temperature 1, no filtering, stop after an action.
      version: the policy version recorded in trajectories.
    """
    self.sampler = sampler
    self.params = params or SamplingParams(max_new_tokens=1,
                                           stop_strings=protocol.STOP_STRINGS)
    self.version = version

  def generate(self, requests: Sequence[TurnRequest], max_new_tokens: int,
               key: jax.Array) -> list[TurnOutput]:
    params = dataclasses.replace(self.params, max_new_tokens=max_new_tokens)
    out = self.sampler.generate([r.prompt_ids for r in requests], params, key)
    return [TurnOutput(out.tokens[i, :n].astype(np.int32), out.logprobs[i, :n],
                       out.finish_reasons[i])
            for i, n in enumerate(out.lengths.tolist())]
