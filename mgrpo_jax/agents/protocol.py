"""The action protocol of one assistant turn: grammar, a parser that never raises, rendering.

An assistant turn (docs/ALGORITHM.md section 1; docs/PROTOCOL.md) is

  <thinking>free text</thinking><tool_call>{"name": N, "arguments": {...}}</tool_call>
  <thinking>free text</thinking><result>final text</result>

optionally surrounded by whitespace and optionally ended by the end-of-turn token
`<|im_end|>`. Whitespace may separate the two blocks; any other text outside the
blocks, a missing or repeated block, a protocol tag inside a block (nesting) or an
unterminated tag is an error. `parse_turn` returns a `ParsedAction` or a `ParseError`
with a machine-readable `code`; it never raises, whatever the text. Agent-level
checks (which tools an agent has, their argument schemas, argument sizes) are in
`specs.check_action`.

Qwen3's conventions are the protocol's too: its thinking block `<think>...</think>`
stands for `<thinking>...</thinking>`, and its tool calls are the protocol's
(`<tool_call>` JSON `{"name", "arguments"}`, whitespace around the JSON allowed). A
`Dialect` says how a family writes a turn: `dialect_for(tokenizer)` is `QWEN3` for a
vocabulary with `<think>` as one token (Qwen3's), whose turns the scripted agents then
write as Qwen3 does (`<think>\n...\n</think>\n\n<tool_call>\n{...}\n</tool_call>`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

THINK_OPEN, THINK_CLOSE = "<thinking>", "</thinking>"
QWEN3_THINK_OPEN, QWEN3_THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
RESULT_OPEN, RESULT_CLOSE = "<result>", "</result>"
END_OF_TURN = "<|im_end|>"
_TAG = re.compile(r"(</?(?:thinking|think|tool_call|tool_response|result)>)")
_THINKING_BLOCKS = ("thinking", "think")
_SPECIAL = re.compile(r"<\|im_(?:start|end)\|>")
TOOL_CALL = "tool_call"
RESULT = "result"

# Error codes (ParseError.code).
EMPTY = "empty"
TEXT_OUTSIDE_TAGS = "text_outside_tags"
MISSING_THINKING = "missing_thinking"
MISSING_ACTION = "missing_action"
UNEXPECTED_TAG = "unexpected_tag"
UNTERMINATED_TAG = "unterminated_tag"
EXTRA_ACTION = "extra_action"
SPECIAL_TOKEN = "special_token"
BAD_JSON = "bad_json"
BAD_CALL_SHAPE = "bad_call_shape"
UNKNOWN_TOOL = "unknown_tool"
BAD_ARGUMENTS = "bad_arguments"
ARGUMENT_TOO_LONG = "argument_too_long"
LENGTH_LIMIT = "length_limit"
TOKEN_OUT_OF_VOCAB = "token_out_of_vocab"
ACTION_NOT_ALLOWED = "action_not_allowed"
TURN_AFTER_END = "turn_after_end"


@dataclasses.dataclass(frozen=True)
class ParsedAction:
  """A well-formed turn: `kind` is TOOL_CALL (`name`, `arguments`) or RESULT (`text`)."""
  kind: str
  thinking: str
  name: str = ""
  arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  text: str = ""


@dataclasses.dataclass(frozen=True)
class ParseError:
  """A malformed turn: `code` (one of the module's error codes) and a readable message."""
  code: str
  message: str


def _error(code: str, message: str) -> ParseError:
  return ParseError(code, message)


def _blocks(text: str) -> list[tuple[str, str]] | ParseError:
  """Splits a turn into [(tag name, inner text)]; whitespace between blocks is dropped."""
  pieces = _TAG.split(text)
  blocks: list[tuple[str, str]] = []
  open_tag: str | None = None
  inner = ""
  for i, piece in enumerate(pieces):
    if i % 2 == 0:  # text between tags
      if open_tag is None and piece.strip():
        return _error(TEXT_OUTSIDE_TAGS, f"text outside tags: {piece.strip()[:40]!r}")
      inner = piece
      continue
    name = piece.strip("</>")
    if piece.startswith("</"):
      if open_tag != name:
        return _error(UNEXPECTED_TAG, f"{piece} without a matching opening tag")
      blocks.append((name, inner))
      open_tag = None
    elif open_tag is not None:
      return _error(UNEXPECTED_TAG, f"{piece} inside <{open_tag}> (tags do not nest)")
    else:
      open_tag = name
  if open_tag is not None:
    return _error(UNTERMINATED_TAG, f"<{open_tag}> is never closed")
  return blocks


def _parse_call(payload: str, thinking: str) -> ParsedAction | ParseError:
  try:
    call = json.loads(payload)
  except (ValueError, RecursionError) as exc:
    return _error(BAD_JSON, f"tool call is not valid JSON: {str(exc)[:80]}")
  if (not isinstance(call, dict) or set(call) != {"name", "arguments"}
      or not isinstance(call["name"], str) or not isinstance(call["arguments"], dict)):
    return _error(BAD_CALL_SHAPE, 'a tool call is {"name": str, "arguments": {...}} and '
                  "nothing else")
  return ParsedAction(TOOL_CALL, thinking, name=call["name"], arguments=call["arguments"])


def parse_turn(text: Any) -> ParsedAction | ParseError:
  """Parses one assistant turn (see the module docstring); never raises."""
  if not isinstance(text, str):
    return _error(EMPTY, f"turn text must be a str, got {type(text).__name__}")
  body = text.strip()
  if body.endswith(END_OF_TURN):
    body = body[:-len(END_OF_TURN)].strip()
  if not body:
    return _error(EMPTY, "empty turn")
  special = _SPECIAL.search(body)
  if special:
    return _error(SPECIAL_TOKEN, f"{special.group(0)} inside the turn")
  blocks = _blocks(body)
  if isinstance(blocks, ParseError):
    return blocks
  names = [name for name, _ in blocks]
  if not names or names[0] not in _THINKING_BLOCKS:
    return _error(MISSING_THINKING, "a turn starts with <thinking>...</thinking> (or "
                  "<think>...</think>)")
  if len(names) == 1:
    return _error(MISSING_ACTION, "no <tool_call> or <result> after </thinking>")
  if len(names) > 2:
    return _error(EXTRA_ACTION, f"exactly one action per turn, got blocks {names}")
  thinking, (kind, inner) = blocks[0][1], blocks[1]
  if kind == "tool_call":
    return _parse_call(inner, thinking)
  if kind == "result":
    return ParsedAction(RESULT, thinking, text=inner.strip())
  return _error(UNEXPECTED_TAG, f"<{kind}> is not an action (expected <tool_call> or <result>)")


@dataclasses.dataclass(frozen=True)
class Dialect:
  """How a model family writes the blocks of a turn (module docstring).

  Attributes:
    think_open, think_close: the thinking block's tags with the text around them.
    call_open, call_close: the tool call's tags with the text around the JSON.
  """
  think_open: str
  think_close: str
  call_open: str
  call_close: str


PROTOCOL = Dialect(THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE)
QWEN3 = Dialect(f"{QWEN3_THINK_OPEN}\n", f"\n{QWEN3_THINK_CLOSE}\n\n", f"{CALL_OPEN}\n",
                f"\n{CALL_CLOSE}")


def dialect_for(tokenizer: Any) -> Dialect:
  """`QWEN3` when `<think>` and `</think>` are tokens of the vocabulary (Qwen3's), else
  `PROTOCOL`."""
  try:
    tokenizer.token_to_id(QWEN3_THINK_OPEN)
    tokenizer.token_to_id(QWEN3_THINK_CLOSE)
  except KeyError:  # the tokenizers' UnknownTokenError
    return PROTOCOL
  return QWEN3


def render_tool_call(name: str, arguments: Mapping[str, Any], thinking: str,
                     dialect: Dialect = PROTOCOL) -> str:
  """The protocol text of a tool call (JSON: name first, arguments sorted, UTF-8 kept)."""
  payload = json.dumps({"name": name, "arguments": dict(sorted(arguments.items()))},
                       ensure_ascii=False)
  d = dialect
  return f"{d.think_open}{thinking}{d.think_close}{d.call_open}{payload}{d.call_close}"


def render_result(text: str, thinking: str, dialect: Dialect = PROTOCOL) -> str:
  """The protocol text of a final answer (M, single agent) or report (S)."""
  return f"{dialect.think_open}{thinking}{dialect.think_close}{RESULT_OPEN}{text}{RESULT_CLOSE}"


def render_observation(text: str) -> str:
  """The content of the user turn that carries a tool's output back to the agent."""
  return f"{RESPONSE_OPEN}{text}{RESPONSE_CLOSE}"


STOP_STRINGS = (CALL_CLOSE, RESULT_CLOSE)
