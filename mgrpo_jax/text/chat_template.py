"""Chat formats: how a conversation is written as text, one message at a time.

Two formats, chosen by the tokenizer's `chat_template` attribute (`chat_format`):
- `ChatMLFormat` (no template): `<|im_start|>{role}\\n{content}<|im_end|>\\n`, the
  generation prompt `<|im_start|>assistant\\n` (SmolLM2, the world tokenizers).
- `TemplateFormat`: a model's own Jinja chat template (a GGUF `tokenizer.chat_template`,
  a `tokenizer_config.json`'s `chat_template`), rendered as transformers'
  `apply_chat_template` renders it: a sandboxed Jinja environment with `trim_blocks`
  and `lstrip_blocks`, `raise_exception`, the `tojson` filter, `add_generation_prompt`
  and the special tokens (`bos_token`, `eos_token`). There is no `strftime_now`: a
  template that reads the date uses its own default, so prompts do not change with the
  day a run (or its restart) happens.

A conversation is built incrementally (token-in, token-out: `chat.Conversation`), so a
format answers three questions given the messages so far, `history`: the text of one
more message, the text of the generation prompt, and the text that closes a sampled
assistant turn. `TemplateFormat` answers them by rendering the template on `history`
with and without the addition and taking the difference; a template whose output for
fewer messages is not a prefix of its output for more (it rewrites earlier messages)
raises `ChatTemplateError` naming the message.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
GENERATION_PROMPT_TEXT = f"{IM_START}assistant\n"

# ChatML as a Jinja template: what `ChatMLFormat` renders (and what an export ships for
# the world tokenizers).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Content of the assistant message whose rendering shows how a turn is closed.
_SENTINEL = "\u2063mgrpo-turn\u2063"

Message = Mapping[str, str]


class ChatTemplateError(ValueError):
  """A chat template that fails to render, or cannot be rendered one message at a time."""


def chatml_message_text(role: str, content: str) -> str:
  """The ChatML text of one message."""
  return f"{IM_START}{role}\n{content}{IM_END}\n"


class ChatMLFormat:
  """The built-in ChatML format (module docstring)."""

  template = CHATML_TEMPLATE

  def message_text(self, history: Sequence[Message], role: str, content: str) -> str:
    del history
    return chatml_message_text(role, content)

  def generation_prompt(self, history: Sequence[Message]) -> str:
    del history
    return GENERATION_PROMPT_TEXT

  def turn_closing(self, history: Sequence[Message]) -> str:
    del history
    return f"{IM_END}\n"


def _raise_exception(message: str):
  from jinja2.exceptions import TemplateError

  raise TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
  return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                    sort_keys=sort_keys)


@functools.lru_cache(maxsize=16)
def compile_template(template: str):
  """The compiled Jinja template, in transformers' sandboxed environment."""
  import jinja2
  from jinja2.ext import loopcontrols
  from jinja2.sandbox import ImmutableSandboxedEnvironment

  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[loopcontrols])
  env.filters["tojson"] = _tojson
  env.globals["raise_exception"] = _raise_exception
  try:
    return env.from_string(template)
  except jinja2.TemplateSyntaxError as e:
    raise ChatTemplateError(f"chat template line {e.lineno}: {e.message}") from None


class TemplateFormat:
  """A model's Jinja chat template, rendered one message at a time (module docstring).

  Args:
    template: the Jinja source.
    special_tokens: the variables besides `messages` and `add_generation_prompt`, e.g.
      {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}.
  """

  def __init__(self, template: str, special_tokens: Mapping[str, str] | None = None):
    self.template = template
    self._compiled = compile_template(template)
    self._special_tokens = dict(special_tokens or {})

  def render(self, messages: Sequence[Message], *, add_generation_prompt: bool = False) -> str:
    """The whole conversation as text (what `apply_chat_template(tokenize=False)` gives)."""
    import jinja2

    try:
      return self._compiled.render(messages=[dict(m) for m in messages],
                                   add_generation_prompt=add_generation_prompt,
                                   **self._special_tokens)
    except jinja2.TemplateError as e:
      raise ChatTemplateError(f"chat template failed on {len(messages)} messages: {e}") from None

  def _extension(self, before: str, after: str, what: str) -> str:
    if not after.startswith(before):
      raise ChatTemplateError(
          f"the chat template rewrites earlier text when {what}; it cannot be rendered one "
          "message at a time (select `chatml` for this agent)")
    return after[len(before):]

  def message_text(self, history: Sequence[Message], role: str, content: str) -> str:
    return self._extension(self.render(history),
                           self.render([*history, {"role": role, "content": content}]),
                           f"message {len(history)} ({role}) is added")

  def generation_prompt(self, history: Sequence[Message]) -> str:
    return self._extension(self.render(history),
                           self.render(history, add_generation_prompt=True),
                           "the generation prompt is added")

  def turn_closing(self, history: Sequence[Message]) -> str:
    opened = self.render(history, add_generation_prompt=True) + _SENTINEL
    full = self.render([*history, {"role": "assistant", "content": _SENTINEL}])
    return self._extension(opened, full, f"assistant message {len(history)} is closed")


CHATML = ChatMLFormat()


def chat_format(tokenizer: Any) -> ChatMLFormat | TemplateFormat:
  """The format of the tokenizer's `chat_template` attribute (None or absent: ChatML)."""
  template = getattr(tokenizer, "chat_template", None)
  if not template:
    return CHATML
  special = {}
  for name, token_id in (("bos_token", tokenizer.bos_id), ("eos_token", tokenizer.eos_id)):
    if token_id is not None:
      special[name] = tokenizer.id_to_token(token_id)
  return _template_format(template, tuple(sorted(special.items())))


@functools.lru_cache(maxsize=16)
def _template_format(template: str, special: tuple[tuple[str, str], ...]) -> TemplateFormat:
  return TemplateFormat(template, dict(special))
