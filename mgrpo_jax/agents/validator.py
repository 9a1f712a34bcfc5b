"""Per-agent format validation: a state machine over the turns of one trajectory.

States and transitions (anything else moves to FAILED and stays there):

  ACTION       --assistant tool call-->  OBSERVATION
  ACTION       --assistant result---->   DONE
  OBSERVATION  --tool response------->   ACTION
  OBSERVATION  --answer-now notice--->   FINAL   (the next observation would not fit)
  FINAL        --assistant result---->   DONE

An assistant turn is checked with `specs.parse_action` (grammar, the agent's tools,
argument schemas and sizes); a turn cut by the token limit fails. `format_ok` (the
paper's r_format, docs/ALGORITHM.md section 1) is True exactly in DONE: the
trajectory ends with a well-formed `<result>` and every turn before it was a
well-formed tool call. Trajectories cut by the turn limit or the context budget end
outside DONE and score 0, as in the released code. Nothing here raises on model text.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from mgrpo_jax.agents import protocol, specs


class State(enum.Enum):
  ACTION = "action"
  OBSERVATION = "observation"
  FINAL = "final"
  DONE = "done"
  FAILED = "failed"


class FormatValidator:
  """Tracks one agent's trajectory turn by turn (see the module docstring)."""

  def __init__(self, spec: specs.AgentSpec, *,
               max_argument_chars: int = specs.DEFAULT_MAX_ARGUMENT_CHARS):
    self.spec = spec
    self.max_argument_chars = max_argument_chars
    self.state = State.ACTION
    self.error: protocol.ParseError | None = None

  @property
  def format_ok(self) -> bool:
    return self.state is State.DONE

  def fail(self, code: str, message: str) -> protocol.ParseError:
    """Ends the trajectory as malformed (also used by the controller, e.g. bad token ids)."""
    self.error = protocol.ParseError(code, message)
    self.state = State.FAILED
    return self.error

  def assistant(self, text: str, finish_reason: str = "eos"
                ) -> protocol.ParsedAction | protocol.ParseError:
    """Checks one assistant turn; returns its action, or the error that ended it."""
    if self.state not in (State.ACTION, State.FINAL):
      return self.fail(protocol.TURN_AFTER_END, f"assistant turn in state {self.state.value}")
    if finish_reason == "length":
      return self.fail(protocol.LENGTH_LIMIT, "the turn hit the token limit")
    parsed = specs.parse_action(self.spec, text, max_argument_chars=self.max_argument_chars)
    if isinstance(parsed, protocol.ParseError):
      return self.fail(parsed.code, parsed.message)
    if parsed.kind == protocol.RESULT:
      self.state = State.DONE
    elif self.state is State.FINAL:
      return self.fail(protocol.ACTION_NOT_ALLOWED, "a tool call after the answer-now notice")
    else:
      self.state = State.OBSERVATION
    return parsed

  def observation(self) -> None:
    """A tool response came back."""
    if self.state is State.OBSERVATION:
      self.state = State.ACTION
    else:
      self.fail(protocol.UNEXPECTED_TAG, f"tool response in state {self.state.value}")

  def notice(self) -> None:
    """The answer-now notice replaced the observation: only a result may follow."""
    if self.state is State.OBSERVATION:
      self.state = State.FINAL
    else:
      self.fail(protocol.UNEXPECTED_TAG, f"notice in state {self.state.value}")


def validate_turns(spec: specs.AgentSpec, turns: Iterable[tuple[str, str]], *,
                   notice: str | None = None,
                   max_argument_chars: int = specs.DEFAULT_MAX_ARGUMENT_CHARS) -> bool:
  """format_ok of a transcript after its prompt: [(role, text)] alternating assistant/user.

  User turns are tool responses (`<tool_response>...</tool_response>`) or, when equal
  to `notice`, the answer-now notice; any other user turn fails.
  """
  validator = FormatValidator(spec, max_argument_chars=max_argument_chars)
  for role, text in turns:
    if role == "assistant":
      validator.assistant(text)
    elif notice is not None and text == notice:
      validator.notice()
    elif (isinstance(text, str) and text.startswith(protocol.RESPONSE_OPEN)
          and text.endswith(protocol.RESPONSE_CLOSE)):
      validator.observation()
    else:
      validator.fail(protocol.UNEXPECTED_TAG, f"unexpected {role} turn")
    if validator.state is State.FAILED:
      return False
  return validator.format_ok
