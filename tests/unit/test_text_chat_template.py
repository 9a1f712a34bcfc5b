"""Chat templates: a Llama-3-style Jinja template rendered as transformers renders it,
one message at a time, to the ids of the whole rendered text; errors; the config key."""

from __future__ import annotations

import json
import pathlib
import random

import pytest
import tokenizers

from mgrpo_jax.text import (
    CHATML_TEMPLATE,
    ChatTemplateError,
    Conversation,
    GGUFTokenizer,
    SentencePieceTokenizer,
    TemplateFormat,
    render_chat,
    render_text,
)
from mgrpo_jax.text.hf_files import sentencepiece_backend
from mgrpo_jax.training.agent_setup import chat_template

# Meta-Llama-3-8B-Instruct's chat template (tokenizer_config.json).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")
LLAMA3_SPECIALS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>")
WORDS = "the a search visit founded press river city who what when answer page".split()


@pytest.fixture(scope="module")
def llama3(tmp_path_factory) -> GGUFTokenizer:
  """A byte-fallback BPE with Llama 3's special tokens and chat template."""
  rng = random.Random(0)
  corpus = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + rng.choice(".\n?")
            for _ in range(200)]
  spm = SentencePieceTokenizer.train(corpus, tmp_path_factory.mktemp("spm"), 400)
  backend = sentencepiece_backend(spm)
  backend.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False)
                              for s in LLAMA3_SPECIALS])
  return GGUFTokenizer(backend, bos_id=backend.token_to_id("<|begin_of_text|>"),
                       eos_id=backend.token_to_id("<|eot_id|>"), pad_id=None,
                       chat_template=LLAMA3_TEMPLATE)


MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "who founded the press?"}]


def test_llama3_text_has_its_header_tokens(llama3):
  text = TemplateFormat(LLAMA3_TEMPLATE, {"bos_token": "<|begin_of_text|>"}).render(
      MESSAGES, add_generation_prompt=True)
  assert text == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                  "You are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                  "who founded the press?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_llama3_conversation_ids(llama3):
  """Message by message, the ids are those of the whole rendered conversation; a turn
  that sampled <|eot_id|> gets nothing more, one stopped early gets <|eot_id|>."""
  ids = llama3.token_to_id
  conv = render_chat(llama3, MESSAGES, add_generation_prompt=True)
  assert conv.ids[0] == ids("<|begin_of_text|>")
  assert conv.ids[1:3].tolist() == [ids("<|start_header_id|>"), llama3.encode("system")[0]]
  prompt = [ids("<|start_header_id|>"), *llama3.encode("assistant"), ids("<|end_header_id|>"),
            *llama3.encode("\n\n")]
  assert conv.ids[-len(prompt):].tolist() == prompt
  first = llama3.encode("search the river") + [ids("<|eot_id|>")]
  conv.append_sampled(first)
  conv.end_turn()
  conv.append_message("user", "page 3: the river city")
  conv.add_generation_prompt()
  second = llama3.encode("the answer")  # stopped on the length limit
  conv.append_sampled(second)
  conv.end_turn()
  whole = TemplateFormat(LLAMA3_TEMPLATE, {"bos_token": "<|begin_of_text|>"}).render(
      [*MESSAGES, {"role": "assistant", "content": "search the river"},
       {"role": "user", "content": "page 3: the river city"},
       {"role": "assistant", "content": "the answer"}])
  assert conv.ids.tolist() == llama3.encode(whole)
  assert conv.ids[conv.loss_mask].tolist() == first + second
  assert conv.ids[-1] == ids("<|eot_id|>")
  assert conv.turn_overhead() == len(llama3.encode(
      "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>"))


def test_chatml_template_renders_like_the_builtin():
  messages = [*MESSAGES, {"role": "assistant", "content": "ok"}]
  for generation in (False, True):
    assert TemplateFormat(CHATML_TEMPLATE).render(
        messages, add_generation_prompt=generation) == render_text(
            messages, add_generation_prompt=generation)


def test_raise_exception_is_a_named_error(llama3):
  strict = ("{% for m in messages %}{% if m['role'] == 'system' %}"
            "{{ raise_exception('System role not supported') }}{% endif %}"
            "{{ m['content'] }}{% endfor %}")
  llama3_strict = GGUFTokenizer(llama3.backend, bos_id=None, eos_id=None, pad_id=None,
                                chat_template=strict)
  with pytest.raises(ChatTemplateError, match="System role not supported"):
    Conversation(llama3_strict).append_message("system", "x")


def test_template_rewriting_earlier_text_is_refused(llama3):
  """A template that closes the last message differently from the others."""
  rewriting = ("{% for m in messages %}{{ m['content'] }}"
               "{% if loop.last %}.{% else %};{% endif %}{% endfor %}")
  tok = GGUFTokenizer(llama3.backend, bos_id=None, eos_id=None, pad_id=None,
                      chat_template=rewriting)
  conv = Conversation(tok)
  conv.append_message("user", "a")
  with pytest.raises(ChatTemplateError, match="message 1 \\(user\\).*one message at a time"):
    conv.append_message("user", "b")


def test_sandbox_refuses_attribute_escapes(llama3):
  escape = "{{ messages.__class__.__mro__ }}"
  tok = GGUFTokenizer(llama3.backend, bos_id=None, eos_id=None, pad_id=None,
                      chat_template=escape)
  with pytest.raises(ChatTemplateError):
    Conversation(tok).append_message("user", "a")


def test_config_selects_the_template(llama3, tmp_path):
  assert chat_template("auto", llama3, "main.model.chat_template") == LLAMA3_TEMPLATE
  assert chat_template("chatml", llama3, "main.model.chat_template") is None
  config = tmp_path / "tokenizer_config.json"
  config.write_text(json.dumps({"chat_template": CHATML_TEMPLATE}))
  assert chat_template(str(config), llama3, "sub.model.chat_template") == CHATML_TEMPLATE
  jinja = tmp_path / "mine.jinja"
  jinja.write_text(LLAMA3_TEMPLATE)
  assert chat_template(str(jinja), llama3, "sub.model.chat_template") == LLAMA3_TEMPLATE
  config.write_text(json.dumps({"chat_template": [{"name": "default"}]}))
  with pytest.raises(ValueError, match="sub.model.chat_template: .* no string 'chat_template'"):
    chat_template(str(config), llama3, "sub.model.chat_template")
  with pytest.raises(ValueError, match="main.model.chat_template: 'nope.jinja' is neither"):
    chat_template("nope.jinja", llama3, "main.model.chat_template")


QWEN3_TEMPLATE = (pathlib.Path(__file__).parents[1] / "support" / "chat_templates"
                  / "qwen3.jinja").read_text()
QWEN3_SPECIALS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                  "</tool_call>", "<tool_response>", "</tool_response>")


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> GGUFTokenizer:
  """A byte-fallback BPE with Qwen3's special tokens and chat template."""
  rng = random.Random(1)
  corpus = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + rng.choice(".\n?")
            for _ in range(200)]
  backend = sentencepiece_backend(
      SentencePieceTokenizer.train(corpus, tmp_path_factory.mktemp("spm_qwen3"), 400))
  backend.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False)
                              for s in QWEN3_SPECIALS])
  return GGUFTokenizer(backend, bos_id=None, eos_id=backend.token_to_id("<|im_end|>"),
                       pad_id=None, chat_template=QWEN3_TEMPLATE)


def _sampled_turn(conv: Conversation, tokenizer, text: str) -> None:
  conv.add_generation_prompt()
  conv.append_sampled(tokenizer.encode(text) + [tokenizer.eos_id])
  conv.end_turn()


QWEN3_TURNS = ('<think>\nthe press page\n</think>\n\n<tool_call>\n{"name": "search", '
               '"arguments": {"query": "river press"}}\n</tool_call>',
               "<think>\nthe page says who\n</think>\n\n<result>the city</result>")


def test_qwen3_conversation_is_its_template_rendering(qwen3):
  """Turns written as Qwen3 writes them (a think block, then the action): message by
  message, the ids are those of the template's rendering of the whole conversation."""
  conv = render_chat(qwen3, MESSAGES)
  _sampled_turn(conv, qwen3, QWEN3_TURNS[0])
  conv.append_message("user", "<tool_response>page 3: the river city</tool_response>")
  _sampled_turn(conv, qwen3, QWEN3_TURNS[1])
  conv.append_message("user", "<tool_response>done</tool_response>")
  conv.add_generation_prompt()
  messages = [*MESSAGES, {"role": "assistant", "content": QWEN3_TURNS[0]},
              {"role": "user", "content": "<tool_response>page 3: the river city</tool_response>"},
              {"role": "assistant", "content": QWEN3_TURNS[1]},
              {"role": "user", "content": "<tool_response>done</tool_response>"}]
  text = TemplateFormat(QWEN3_TEMPLATE).render(messages, add_generation_prompt=True)
  assert text.endswith("<|im_start|>assistant\n")
  assert "<think>\nthe press page\n</think>" in text
  assert conv.ids.tolist() == qwen3.encode(text)


def test_qwen3_new_question_after_a_turn_appends_its_own_block(qwen3):
  """A user message that is not a tool response makes Qwen3's template drop the earlier
  turns' reasoning; the turn's sampled ids stay and the message follows its closing."""
  conv = render_chat(qwen3, MESSAGES)
  _sampled_turn(conv, qwen3, QWEN3_TURNS[0])
  before = conv.ids.tolist()
  conv.append_message("user", "answer now")
  assert conv.ids.tolist() == before + qwen3.encode("<|im_start|>user\nanswer now<|im_end|>\n")
  assert before[-2:] == qwen3.encode("<|im_end|>\n")


def test_templates_reading_the_first_message_render_an_empty_history(llama3):
  """Qwen2.5's and Llama 3.1's templates read messages[0]: an empty history is no text."""
  template = (pathlib.Path(__file__).parents[1] / "support" / "chat_templates"
              / "qwen2_5.jinja").read_text()
  tok = GGUFTokenizer(llama3.backend, bos_id=None, eos_id=None, pad_id=None,
                      chat_template=template)
  conv = Conversation(tok)
  conv.append_message("user", "who")
  assert conv.decode().startswith("<|im_start|>system\nYou are Qwen")
