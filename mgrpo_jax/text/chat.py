"""Chat rendering to token ids with per-token roles and a sampled (loss) mask.

The text of each message, of the generation prompt and of a turn's closing comes from
the tokenizer's chat format (`chat_template.chat_format`): ChatML by default, where a
message renders as `<|im_start|>{role}\\n{content}<|im_end|>\\n` and the generation
prompt is `<|im_start|>assistant\\n`, or the model's own Jinja template when the
tokenizer carries one (`tokenizer.chat_template`). SmolLM2's chat template also inserts a
default system message before the first message when that message is not a system
message; pass `default_system_prompt=SMOLLM2_DEFAULT_SYSTEM_PROMPT` to reproduce it
with ChatML.

Token-in, token-out: each message is tokenized on its own (it starts and ends at a
special token, so this equals tokenizing the whole rendered string), and ids produced
by the sampler are appended exactly as sampled, never decoded and re-encoded. Only
sampled ids carry loss (the paper's loss masks prompts, tool outputs and the other
agent's text; docs/ALGORITHM.md section 1).

Per-token arrays, all of shape [T]: `ids` (int32), `roles` (int32 `Role` codes of the
message each token belongs to) and `loss_mask` (bool, True exactly on sampled ids).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import numpy as np

from mgrpo_jax.text.chat_template import (
  CHATML,
  GENERATION_PROMPT_TEXT,
  IM_END,
  IM_START,
  chat_format,
  chatml_message_text,
)
from mgrpo_jax.text.tokenizer import Tokenizer

__all__ = ["GENERATION_PROMPT_TEXT", "IM_END", "IM_START", "SMOLLM2_DEFAULT_SYSTEM_PROMPT",
           "Conversation", "Role", "message_text", "render_chat", "render_text"]

SMOLLM2_DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face")


class Role(enum.IntEnum):
  """Per-token role codes (the values stored in `Conversation.roles`)."""

  SYSTEM = 0
  USER = 1
  ASSISTANT = 2
  TOOL = 3

  @classmethod
  def parse(cls, role: str | Role) -> Role:
    """The Role of a ChatML role name ("system", "user", "assistant", "tool")."""
    if isinstance(role, Role):
      return role
    names = {r.name.lower(): r for r in cls}
    if role not in names:
      raise ValueError(f"unknown chat role {role!r}; expected one of {list(names)}")
    return names[role]


def message_text(role: str | Role, content: str) -> str:
  """The ChatML text of one message."""
  return chatml_message_text(Role.parse(role).name.lower(), content)


def _checked_messages(messages: Sequence[Mapping[str, str]]) -> list[tuple[Role, str]]:
  checked = []
  for i, message in enumerate(messages):
    if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
      raise ValueError(f"messages[{i}] must be a mapping with 'role' and 'content': {message!r}")
    if not isinstance(message["content"], str):
      raise ValueError(f"messages[{i}]['content'] must be a str, got "
                       f"{type(message['content']).__name__}")
    try:
      checked.append((Role.parse(message["role"]), message["content"]))
    except ValueError as e:
      raise ValueError(f"messages[{i}]['role']: {e}") from None
  return checked


def render_text(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = False,
                default_system_prompt: str | None = None) -> str:
  """The rendered chat as text (what a ChatML Jinja chat template produces)."""
  checked = _checked_messages(messages)
  parts = []
  if default_system_prompt is not None and checked and checked[0][0] != Role.SYSTEM:
    parts.append(message_text(Role.SYSTEM, default_system_prompt))
  parts.extend(message_text(role, content) for role, content in checked)
  if add_generation_prompt:
    parts.append(GENERATION_PROMPT_TEXT)
  return "".join(parts)


class Conversation:
  """An incrementally built chat token sequence for one multi-turn episode.

  Usage by a controller:
    conv = Conversation(tokenizer)
    conv.append_message("user", question)
    conv.add_generation_prompt()          # opens an assistant turn
    conv.append_sampled(sampled_ids)      # the sampler's ids, kept verbatim, loss 1
    conv.end_turn()                       # closes the turn (ChatML: `<|im_end|>`/newline)
    conv.append_message("tool", observation)
  """

  def __init__(self, tokenizer: Tokenizer, *, default_system_prompt: str | None = None):
    self._tokenizer = tokenizer
    self._format = chat_format(tokenizer)
    if self._format is CHATML:
      tokenizer.token_to_id(IM_END)  # ChatML needs its specials: UnknownTokenError names it
    self._default_system_prompt = default_system_prompt
    self._ids: list[int] = []
    self._roles: list[int] = []
    self._sampled: list[bool] = []
    self._history: list[dict[str, str]] = []
    self._turn_start: int | None = None

  def _append(self, ids: Sequence[int], role: Role, sampled: bool) -> None:
    self._ids.extend(ids)
    self._roles.extend([int(role)] * len(ids))
    self._sampled.extend([sampled] * len(ids))

  def _require_closed_turn(self, action: str) -> None:
    if self._turn_start is not None:
      raise ValueError(f"cannot {action} while an assistant turn is open; call end_turn() first")

  def _pending_messages(self, role: Role, content: str) -> list[tuple[Role, str]]:
    if not isinstance(content, str):
      raise ValueError(f"message content must be a str, got {type(content).__name__}")
    messages = [(role, content)]
    if not self._history and self._default_system_prompt is not None and role != Role.SYSTEM:
      messages.insert(0, (Role.SYSTEM, self._default_system_prompt))
    return messages

  def message_ids(self, role: str | Role, content: str) -> list[int]:
    """The ids `append_message(role, content)` would append now (nothing is appended)."""
    history, ids = list(self._history), []
    for r, text in self._pending_messages(Role.parse(role), content):
      ids += self._tokenizer.encode(self._format.message_text(history, r.name.lower(), text))
      history.append({"role": r.name.lower(), "content": text})
    return ids

  def append_message(self, role: str | Role, content: str) -> None:
    """Renders one message and appends its ids (not sampled: loss 0).

    Text a chat template adds before the message (e.g. its own default system message)
    takes the message's role.
    """
    self._require_closed_turn("append a message")
    for r, text in self._pending_messages(Role.parse(role), content):
      name = r.name.lower()
      self._append(self._tokenizer.encode(self._format.message_text(self._history, name, text)),
                   r, sampled=False)
      self._history.append({"role": name, "content": text})

  def turn_overhead(self) -> int:
    """Ids one more assistant turn adds besides its sampled ids (prompt and closing)."""
    return (len(self._tokenizer.encode(self._format.generation_prompt(self._history)))
            + len(self._tokenizer.encode(self._format.turn_closing(self._history))))

  def add_generation_prompt(self) -> None:
    """Appends the generation prompt (ChatML: `<|im_start|>assistant\\n`) and opens an
    assistant turn for sampled ids."""
    self._require_closed_turn("add a generation prompt")
    self._append(self._tokenizer.encode(self._format.generation_prompt(self._history)),
                 Role.ASSISTANT, sampled=False)
    self._turn_start = len(self._ids)

  def append_sampled(self, ids: Sequence[int] | np.ndarray) -> None:
    """Appends ids produced by the sampler exactly as given, marked sampled (loss 1).

    Args:
      ids: int token ids `[n]` of the open assistant turn, in `[0, vocab_size)`.
    """
    if self._turn_start is None:
      raise ValueError("append_sampled needs an open assistant turn; "
                       "call add_generation_prompt() first")
    array = np.asarray(ids)
    if array.size == 0:
      return
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
      raise ValueError(f"sampled ids must be a 1-D integer sequence, got shape {array.shape} "
                       f"dtype {array.dtype}")
    vocab_size = self._tokenizer.vocab_size
    bad = np.flatnonzero((array < 0) | (array >= vocab_size))
    if bad.size:
      raise ValueError(f"sampled id {int(array[bad[0]])} at position {int(bad[0])} is outside "
                       f"the vocabulary [0, {vocab_size})")
    self._append(array.astype(np.int64).tolist(), Role.ASSISTANT, sampled=True)

  def end_turn(self) -> None:
    """Closes the open assistant turn as the chat format requires (not sampled).

    When the sampled ids end with the closing's first token (ChatML: the model sampled
    `<|im_end|>`), only the rest of the closing is appended (ChatML: `\\n`); otherwise
    (sampling stopped on a stop string or on the length limit) the whole closing.
    """
    if self._turn_start is None:
      raise ValueError("end_turn needs an open assistant turn")
    closing = self._tokenizer.encode(self._format.turn_closing(self._history))
    content = self._ids[self._turn_start:]
    if closing and content and self._sampled[-1] and content[-1] == closing[0]:
      closing, content = closing[1:], content[:-1]
    self._append(closing, Role.ASSISTANT, sampled=False)
    self._history.append({"role": "assistant", "content": self._tokenizer.decode(content)})
    self._turn_start = None

  @property
  def turn_open(self) -> bool:
    """Whether an assistant turn is open (after the generation prompt, before end_turn)."""
    return self._turn_start is not None

  @property
  def ids(self) -> np.ndarray:
    """Token ids, int32 [T]."""
    return np.asarray(self._ids, dtype=np.int32)

  @property
  def roles(self) -> np.ndarray:
    """`Role` code of the message each token belongs to, int32 [T]."""
    return np.asarray(self._roles, dtype=np.int32)

  @property
  def loss_mask(self) -> np.ndarray:
    """True exactly on ids appended by `append_sampled`, bool [T]."""
    return np.asarray(self._sampled, dtype=bool)

  def __len__(self) -> int:
    return len(self._ids)

  def decode(self) -> str:
    """The conversation as text (for logs and judges; never re-encoded for training)."""
    return self._tokenizer.decode(self._ids)


def render_chat(tokenizer: Tokenizer, messages: Sequence[Mapping[str, str]], *,
                add_generation_prompt: bool = False,
                default_system_prompt: str | None = None) -> Conversation:
  """Renders HF-style messages (`{"role": ..., "content": ...}`) into a Conversation.

  With `default_system_prompt=SMOLLM2_DEFAULT_SYSTEM_PROMPT` the ids equal SmolLM2's
  `apply_chat_template(messages, add_generation_prompt=...)`.
  """
  conversation = Conversation(tokenizer, default_system_prompt=default_system_prompt)
  for role, content in _checked_messages(messages):
    conversation.append_message(role, content)
  if add_generation_prompt:
    conversation.add_generation_prompt()
  return conversation
