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
with and without the addition and taking the difference. The template sees every
assistant turn of `history` as one stand-in content, a think block then text
(`<think>\nS\n</think>\n\nS`, Qwen3's own form of a turn): the turns' ids are the
sampled ones and never re-rendered, and a template that rewrites a turn by its place
renders the stand-in the same wherever it stands (Qwen3's adds an empty think block to
a conversation's last assistant turn and drops it once a message follows). A template
that still rewrites earlier text when a message is added raises `ChatTemplateError`
naming the message, but for one case: when the new message follows an assistant turn
and the template rewrote the turns before it (Qwen3 drops the reasoning of every turn
before a new question, such as the answer-now notice), the new message's text is what
the template writes after that turn's closing, and the earlier ids stay as sampled.
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

# The content the templates see for every assistant turn (module docstring).
_SENTINEL = "\u2063mgrpo-turn\u2063"
_ASSISTANT_STAND_IN = f"<think>\n{_SENTINEL}\n</think>\n\n{_SENTINEL}"

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
    """The whole conversation as text (what `apply_chat_template(tokenize=False)` gives);
    no messages are no text (templates that read `messages[0]`, Qwen2.5's and Llama 3's,
    fail on none)."""
    import jinja2

    if not messages and not add_generation_prompt:
      return ""

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
    stand_ins = _stand_ins(history)
    before = self.render(stand_ins)
    after = self.render([*stand_ins, {"role": role, "content": content}])
    what = f"message {len(history)} ({role}) is added"
    if after.startswith(before) or not stand_ins or stand_ins[-1]["role"] != "assistant":
      return self._extension(before, after, what)
    # The template rewrote earlier turns (module docstring): the text after the last
    # turn's closing, which ends `before`.
    closing = before[before.rindex(_SENTINEL) + len(_SENTINEL):]
    start = after.rfind(_SENTINEL) + len(_SENTINEL)
    if after[start:start + len(closing)] != closing:
      return self._extension(before, after, what)
    return after[start + len(closing):]

  def generation_prompt(self, history: Sequence[Message]) -> str:
    stand_ins = _stand_ins(history)
    return self._extension(self.render(stand_ins),
                           self.render(stand_ins, add_generation_prompt=True),
                           "the generation prompt is added")

  def turn_closing(self, history: Sequence[Message]) -> str:
    stand_ins = _stand_ins(history)
    opened = self.render(stand_ins, add_generation_prompt=True) + _ASSISTANT_STAND_IN
    full = self.render([*stand_ins, {"role": "assistant", "content": _ASSISTANT_STAND_IN}])
    return self._extension(opened, full, f"assistant message {len(history)} is closed")


def _stand_ins(history: Sequence[Message]) -> list[Message]:
  """`history` with every assistant turn's content replaced by the stand-in."""
  return [{"role": "assistant", "content": _ASSISTANT_STAND_IN} if m["role"] == "assistant"
          else m for m in history]


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
