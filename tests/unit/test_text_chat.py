"""ChatML rendering invariants with a trained SentencePiece tokenizer."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.text import (
    GENERATION_PROMPT_TEXT,
    IM_END,
    SMOLLM2_DEFAULT_SYSTEM_PROMPT,
    Conversation,
    Role,
    SentencePieceTokenizer,
    UnknownTokenError,
    message_text,
    render_chat,
    render_text,
)

ROLES = ("system", "user", "assistant", "tool")
WORDS = "paris france capital search result answer the of is tool visit page".split()


def make_corpus(n: int = 300) -> list[str]:
  rng = random.Random(0)
  return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 20))) + rng.choice(".\n?")
          for _ in range(n)]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
  return SentencePieceTokenizer.train(make_corpus(), tmp_path_factory.mktemp("spm"), 400)


contents = st.lists(
    st.one_of(st.text(max_size=8),
              st.sampled_from(["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                               "\n", " ", "  ", "▁", "paris ", "the capital", "12", "é"])),
    max_size=6).map("".join)
messages_strategy = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": contents}), max_size=5)


def expected_layout(tok, messages, add_generation_prompt, default_system_prompt):
  """Independent reference: per-message encodings, concatenated, with their roles."""
  parts = []
  if default_system_prompt is not None and messages and messages[0]["role"] != "system":
    parts.append(("system", message_text("system", default_system_prompt)))
  parts.extend((m["role"], message_text(m["role"], m["content"])) for m in messages)
  if add_generation_prompt:
    parts.append(("assistant", GENERATION_PROMPT_TEXT))
  ids, roles = [], []
  for role, text in parts:
    piece = tok.encode(text)
    ids.extend(piece)
    roles.extend([int(Role.parse(role))] * len(piece))
  return ids, roles


@given(messages_strategy, st.booleans(), st.sampled_from([None, SMOLLM2_DEFAULT_SYSTEM_PROMPT]))
def test_render_equals_per_message_and_whole_string_encoding(tok, messages, gen_prompt, system):
  conv = render_chat(tok, messages, add_generation_prompt=gen_prompt,
                     default_system_prompt=system)
  ids, roles = expected_layout(tok, messages, gen_prompt, system)
  text = render_text(messages, add_generation_prompt=gen_prompt, default_system_prompt=system)
  assert conv.ids.tolist() == ids
  assert conv.ids.tolist() == tok.encode(text)
  assert conv.roles.tolist() == roles
  assert conv.ids.shape == conv.roles.shape == conv.loss_mask.shape
  assert not conv.loss_mask.any()
  assert conv.decode() == text
  assert conv.turn_open == gen_prompt


def test_render_text_matches_smollm2_template_rules():
  user = {"role": "user", "content": "Hi"}
  system = {"role": "system", "content": "Be brief."}
  default = SMOLLM2_DEFAULT_SYSTEM_PROMPT
  assert render_text([user], add_generation_prompt=True, default_system_prompt=default) == (
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
  assert render_text([system, user], default_system_prompt=default) == (
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n")
  # The template inserts the default only inside its message loop.
  assert render_text([], add_generation_prompt=True, default_system_prompt=default) == (
      "<|im_start|>assistant\n")


@st.composite
def episodes(draw):
  """A random interleaving of messages and sampled turns: (kind, payload) steps."""
  steps = []
  for _ in range(draw(st.integers(0, 6))):
    if draw(st.booleans()):
      steps.append(("message", (draw(st.sampled_from(ROLES)), draw(contents))))
    else:
      sampled = draw(st.lists(st.integers(0, 399), max_size=12))
      if draw(st.booleans()):
        sampled.append(3)  # ends with <|im_end|>, as when the model stops on EOS
      steps.append(("sampled", sampled))
  return steps


@given(episodes())
def test_sampled_ids_are_verbatim_and_exactly_masked(tok, steps):
  im_end = tok.token_to_id(IM_END)
  assert im_end == 3
  conv = Conversation(tok)
  expected_ids, expected_mask, expected_roles = [], [], []

  def expect(ids, role, sampled):
    expected_ids.extend(ids)
    expected_mask.extend([sampled] * len(ids))
    expected_roles.extend([int(role)] * len(ids))

  for kind, payload in steps:
    if kind == "message":
      conv.append_message(*payload)
      expect(tok.encode(message_text(*payload)), Role.parse(payload[0]), False)
    else:
      conv.add_generation_prompt()
      conv.append_sampled(np.asarray(payload, dtype=np.int64))
      conv.end_turn()
      ended = bool(payload) and payload[-1] == im_end
      expect(tok.encode(GENERATION_PROMPT_TEXT), Role.ASSISTANT, False)
      expect(payload, Role.ASSISTANT, True)
      expect(tok.encode("\n" if ended else IM_END + "\n"), Role.ASSISTANT, False)
  assert conv.ids.tolist() == expected_ids
  assert conv.loss_mask.tolist() == expected_mask
  assert conv.roles.tolist() == expected_roles
  sampled = [i for kind, payload in steps if kind == "sampled" for i in payload]
  assert conv.ids[conv.loss_mask].tolist() == sampled
  assert conv.ids.dtype == np.int32 and conv.roles.dtype == np.int32
  assert conv.loss_mask.dtype == bool


def test_sampled_ids_are_not_retokenized(tok):
  sampled = [tok.token_to_id(f"<0x{b:02X}>") for b in b"the capital"]
  assert tok.encode(tok.decode(sampled)) != sampled  # re-tokenizing would change the ids
  conv = Conversation(tok)
  conv.append_message("user", "what is the capital?")
  conv.add_generation_prompt()
  start = len(conv)
  conv.append_sampled(sampled)
  assert conv.ids[start:].tolist() == sampled
  assert conv.loss_mask[start:].all() and not conv.loss_mask[:start].any()
  conv.end_turn()
  assert conv.ids[start + len(sampled):].tolist() == tok.encode(IM_END + "\n")


def test_state_and_input_errors(tok):
  conv = Conversation(tok)
  with pytest.raises(ValueError, match="add_generation_prompt"):
    conv.append_sampled([5])
  with pytest.raises(ValueError, match="end_turn needs"):
    conv.end_turn()
  with pytest.raises(ValueError, match="'narrator'"):
    conv.append_message("narrator", "hi")
  with pytest.raises(ValueError, match="'User'"):
    conv.append_message("User", "hi")
  conv.add_generation_prompt()
  with pytest.raises(ValueError, match="end_turn"):
    conv.append_message("user", "hi")
  with pytest.raises(ValueError, match="end_turn"):
    conv.add_generation_prompt()
  with pytest.raises(ValueError, match="sampled id 400 at position 1"):
    conv.append_sampled([5, 400])
  with pytest.raises(ValueError, match="sampled id -2 at position 0"):
    conv.append_sampled([-2])
  with pytest.raises(ValueError, match="integer"):
    conv.append_sampled([1.5])
  with pytest.raises(ValueError, match="1-D"):
    conv.append_sampled([[1, 2]])
  assert not conv.loss_mask.any()  # failed appends left nothing behind
  with pytest.raises(ValueError, match=r"messages\[1\]\['role'\]"):
    render_chat(tok, [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}])
  with pytest.raises(ValueError, match=r"messages\[0\]\['content'\]"):
    render_chat(tok, [{"role": "user", "content": 3}])


def test_tokenizer_without_chatml_specials_is_named(tmp_path):
  plain = SentencePieceTokenizer.train(make_corpus(), tmp_path, 300, user_defined_symbols=())
  with pytest.raises(UnknownTokenError, match=r"<\|im_end\|>"):
    Conversation(plain)
