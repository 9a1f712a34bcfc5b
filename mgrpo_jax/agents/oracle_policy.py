"""The world's scripted oracles as a `Policy`, and the mapping between the two action types.

`OraclePolicy` asks a step-wise oracle (`tasks.oracle`: `next_action(task, history)`)
for each request's next action, renders it as protocol text in its tokenizer's dialect
(`render_oracle_action`, `protocol.dialect_for`: Qwen3's `<think>` for Qwen3),
tokenizes it and appends the EOS id, as a model that ends its turn would; log-probs
are 0. An action longer than `max_new_tokens` is cut and reported as "length", like a
sampler. `to_oracle_action` turns a parsed protocol action back into the oracle's
`Action`, so the controller keeps an oracle-style history for every agent.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from mgrpo_jax.agents import protocol, specs
from mgrpo_jax.agents.policy import TurnOutput, TurnRequest
from mgrpo_jax.tasks.oracle import Action, MainPolicy, SubPolicy
from mgrpo_jax.text import Tokenizer

_THOUGHTS = {"delegate": "I will give the next look-up to the sub-agent.",
             "answer": "I have what I need to answer.",
             "report": "I have the facts for the report."}
_CALL_THOUGHT = "I will call {name}."


def oracle_thoughts(tool_names: Sequence[str]) -> tuple[str, ...]:
  """Every thinking phrase the scripted agents write, calling tools among `tool_names`."""
  return (*_THOUGHTS.values(), *(_CALL_THOUGHT.format(name=name) for name in tool_names))


def render_oracle_action(action: Action, dialect: protocol.Dialect = protocol.PROTOCOL) -> str:
  """Protocol text of an oracle action (delegations carry no context), in `dialect`; its
  thinking is `action.thought`, or the fixed phrase of its kind."""
  if action.kind == "tool":
    return protocol.render_tool_call(
        action.name, action.args, action.thought or _CALL_THOUGHT.format(name=action.name),
        dialect)
  if action.kind == "delegate":
    return protocol.render_tool_call(specs.DELEGATE, {"subtask": action.text},
                                     action.thought or _THOUGHTS["delegate"], dialect)
  return protocol.render_result(action.text, action.thought or _THOUGHTS.get(action.kind, ""),
                                dialect)


def to_oracle_action(action: protocol.ParsedAction, role: str) -> Action:
  """The oracle `Action` of a parsed turn of agent `role`."""
  if action.kind == protocol.RESULT:
    return Action.report(action.text) if role == "sub" else Action.answer(action.text)
  if action.name == specs.DELEGATE:
    return Action.delegate(str(action.arguments.get("subtask", "")))
  return Action.tool(action.name, **action.arguments)


class OraclePolicy:
  """A scripted policy (clean or noisy oracle) behind the `Policy` interface."""

  def __init__(self, oracle: MainPolicy | SubPolicy, tokenizer: Tokenizer, *,
               version: int = 0):
    self.oracle = oracle
    self.tokenizer = tokenizer
    self.version = version
    self._eos = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    self._dialect = protocol.dialect_for(tokenizer)

  def generate(self, requests: Sequence[TurnRequest], max_new_tokens: int,
               key: jax.Array) -> list[TurnOutput]:
    del key  # the oracles are deterministic
    outputs = []
    for request in requests:
      action = self.oracle.next_action(request.task, list(request.history))
      ids = self.tokenizer.encode(render_oracle_action(action, self._dialect)) + self._eos
      reason = "eos"
      if len(ids) > max_new_tokens:
        ids, reason = ids[:max_new_tokens], "length"
      outputs.append(TurnOutput(np.asarray(ids, np.int32),
                                np.zeros(len(ids), np.float32), reason))
    return outputs
