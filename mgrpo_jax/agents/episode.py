"""One agent's trajectory under construction: token bookkeeping, limits, format state.

An `AgentEpisode` owns a `text.chat.Conversation` (chat ids, roles, loss mask), the
log-probabilities of its sampled ids, a `FormatValidator`, the oracle-style history of
(action, observation) steps and the tool-call log. The controller drives it:

  request = episode.open_turn()        # None when it ended (turn limit, context budget)
  action = episode.take_output(out)    # None when the turn ended the trajectory
  episode.observe(text, ok, latency)   # the executed action's output

Observations come back as a *user* turn `<tool_response>...</tool_response>`, as in the
released code (docs/PROTOCOL.md). Budgets (`config.AgentLimits`): a turn opens only if
the prompt plus `max_new_tokens` fits the context; an observation that would leave no
room for one more turn is replaced by the answer-now notice, and if even the notice
leaves no room the trajectory ends.
"""

from __future__ import annotations

import json
import time

import numpy as np

from mgrpo_jax.agents import oracle_policy, protocol, records, specs
from mgrpo_jax.agents.config import AgentLimits
from mgrpo_jax.agents.policy import TurnOutput, TurnRequest
from mgrpo_jax.agents.validator import FormatValidator, State
from mgrpo_jax.tasks.oracle import Step
from mgrpo_jax.text import Conversation, Tokenizer

OBSERVATION_ROLE = "user"


class AgentEpisode:
  """One agent's trajectory (see the module docstring)."""

  def __init__(self, key: tuple[str, int, int], spec: specs.AgentSpec, tokenizer: Tokenizer,
               limits: AgentLimits, *, task: str, context: str = "", answer_now: str,
               max_argument_chars: int = specs.DEFAULT_MAX_ARGUMENT_CHARS):
    self.key = key
    self.spec = spec
    self.task = task
    self.limits = limits
    self._tokenizer = tokenizer
    self._answer_now = answer_now
    self._start = time.perf_counter()
    self._wall_s = 0.0
    self.conversation = Conversation(tokenizer)
    self.messages: list[tuple[str, str]] = []
    for role, text in (("system", spec.system_prompt()),
                       ("user", spec.first_user_message(task, context))):
      self.conversation.append_message(role, text)
      self.messages.append((role, text))
    # One turn costs the generation prompt, the sampled ids and the closing ids.
    self._turn_overhead = self.conversation.turn_overhead()
    self.validator = FormatValidator(spec, max_argument_chars=max_argument_chars)
    self.history: list[Step] = []
    self.tool_calls: list[records.ToolCall] = []
    self.turns = 0
    self.end: str | None = None
    self.final: str | None = None
    self.policy_version: int | None = None
    self._pending: protocol.ParsedAction | None = None
    self._sampled: list[tuple[int, np.ndarray]] = []

  @property
  def running(self) -> bool:
    return self.end is None

  def _finish(self, end: str) -> None:
    self.end = end
    self._wall_s = time.perf_counter() - self._start

  def _fits(self, extra_ids: int) -> bool:
    """Whether `extra_ids` more ids still leave room for one full turn."""
    needed = (len(self.conversation) + extra_ids + self._turn_overhead
              + self.limits.max_new_tokens)
    return needed <= self.limits.context_tokens

  def open_turn(self) -> TurnRequest | None:
    """Opens the next assistant turn and returns its request, or ends the trajectory."""
    if not self.running or self._pending is not None:
      return None
    if self.turns >= self.limits.max_turns:
      self._finish(records.END_TURNS)
      return None
    if not self._fits(0):
      self._finish(records.END_CONTEXT)
      return None
    self.conversation.add_generation_prompt()
    return TurnRequest(self.key, self.spec.role, self.conversation.ids, self.task,
                       tuple(self.history))

  def take_output(self, output: TurnOutput, version: int) -> protocol.ParsedAction | None:
    """Appends a sampled turn; returns its tool call, or None when the trajectory ended."""
    self.turns += 1
    if self.policy_version is None:
      self.policy_version = int(version)
    ids = np.asarray(output.ids)
    if ids.ndim != 1 or np.shape(output.logprobs) != ids.shape:
      raise ValueError(f"episode {self.key}: the policy returned ids of shape {ids.shape} "
                       f"and logprobs of shape {np.shape(output.logprobs)}; need equal [n]")
    vocab = self._tokenizer.vocab_size
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
      self.conversation.end_turn()
      self.messages.append(("assistant", ""))
      self.validator.fail(protocol.TOKEN_OUT_OF_VOCAB, f"a sampled id is outside [0, {vocab})")
      self._finish(records.END_FORMAT)
      return None
    self._sampled.append((len(self.conversation), np.asarray(output.logprobs, np.float32)))
    self.conversation.append_sampled(ids)
    self.conversation.end_turn()
    text = self._tokenizer.decode(ids.tolist())
    self.messages.append(("assistant", text))
    parsed = self.validator.assistant(text, output.finish_reason)
    if isinstance(parsed, protocol.ParseError):
      self._finish(records.END_FORMAT)
      return None
    if parsed.kind == protocol.RESULT:
      self.final = parsed.text
      self._finish(records.END_RESULT)
      return None
    self._pending = parsed
    return parsed

  def observe(self, text: str, *, ok: bool, latency_s: float) -> None:
    """Delivers the output of the pending tool call (or the answer-now notice)."""
    action, self._pending = self._pending, None
    if action is None or not self.running:
      raise ValueError(f"episode {self.key} has no pending tool call to observe")
    self.tool_calls.append(records.ToolCall(
      self.turns - 1, action.name, json.dumps(dict(action.arguments), ensure_ascii=False,
                                              sort_keys=True), bool(ok), float(latency_s)))
    step_action = oracle_policy.to_oracle_action(action, self.spec.role)
    content = protocol.render_observation(text)
    if self._fits(len(self.conversation.message_ids(OBSERVATION_ROLE, content))):
      self.validator.observation()
    elif self._fits(len(self.conversation.message_ids(OBSERVATION_ROLE, self._answer_now))):
      content = text = self._answer_now  # the agent sees the notice, not the output
      self.validator.notice()
    else:
      self._finish(records.END_CONTEXT)
      return
    self.conversation.append_message(OBSERVATION_ROLE, content)
    self.messages.append((OBSERVATION_ROLE, content))
    self.history.append(Step(step_action, text, float(latency_s)))

  def trajectory(self) -> records.Trajectory:
    """The finished trajectory's record."""
    if self.running:
      raise ValueError(f"episode {self.key} is still running")
    conversation = self.conversation
    logprobs = np.zeros(len(conversation), np.float32)
    for offset, values in self._sampled:
      logprobs[offset:offset + len(values)] = values
    error = self.validator.error.code if self.validator.state is State.FAILED else ""
    return records.Trajectory(
      ids=conversation.ids, loss_mask=conversation.loss_mask, logprobs=logprobs,
      roles=conversation.roles, messages=tuple(self.messages),
      policy_version=-1 if self.policy_version is None else self.policy_version,
      format_ok=self.validator.format_ok, error=error, end=self.end,
      num_turns=self.turns, tool_calls=tuple(self.tool_calls), final=self.final,
      wall_s=self._wall_s)
