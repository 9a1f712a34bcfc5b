"""SmolLM2 GGUF tokenizer and chat rendering against the recorded transformers reference.

The reference is `tests/data/smollm2_reference.json`, written by
`tools/record_reference.py` with transformers' GGUF tokenizer for the same file.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from mgrpo_jax.text import (
    SMOLLM2_DEFAULT_SYSTEM_PROMPT,
    Conversation,
    GGUFTokenizer,
    Role,
    TokenizerFileError,
    render_chat,
    render_text,
)
from mgrpo_jax.text.gguf_bpe import read_gguf_vocab

REFERENCE = json.loads(
    (pathlib.Path(__file__).parents[1] / "data" / "smollm2_reference.json").read_text("utf-8"))


@pytest.fixture(scope="module")
def gguf_path(smollm2_gguf):
  return smollm2_gguf


@pytest.fixture(scope="module")
def vocab(gguf_path):
  return read_gguf_vocab(gguf_path)


@pytest.fixture(scope="module")
def tokenizers_under_test(vocab, tmp_path_factory):
  """The tokenizer built from the GGUF fields, and the same after save/load."""
  built = GGUFTokenizer.from_vocab(vocab)
  loaded = GGUFTokenizer.load(built.save(tmp_path_factory.mktemp("smollm2_tok")))
  return {"from_gguf": built, "saved_and_loaded": loaded}


@pytest.fixture(params=["from_gguf", "saved_and_loaded"])
def tok(request, tokenizers_under_test):
  return tokenizers_under_test[request.param]


def test_special_ids_match_reference(tok):
  special = REFERENCE["special_ids"]
  assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id) == (
      special["vocab_size"], special["bos"], special["eos"], special["pad"])
  assert tok.token_to_id("<|im_start|>") == 1 and tok.token_to_id("<|im_end|>") == 2


@pytest.mark.parametrize("name", sorted(REFERENCE["tokenizer"]))
def test_ids_match_reference(tok, name):
  case = REFERENCE["tokenizer"][name]
  assert tok.encode(case["text"]) == case["ids"]
  assert tok.decode(case["ids"]) == case["decoded"] == case["text"]


def test_logits_prompt_ids(tok):
  case = REFERENCE["logits"]
  assert tok.encode(case["prompt"]) == case["ids"] == [504, 3575, 282, 4649, 314]
  assert tok.id_to_token(case["argmax"]) == case["argmax_token"] == "ĠParis"


@pytest.mark.parametrize("name", sorted(REFERENCE["chat_template"]))
def test_chat_rendering_matches_apply_chat_template(tok, name):
  case = REFERENCE["chat_template"][name]
  kwargs = dict(add_generation_prompt=case["add_generation_prompt"],
                default_system_prompt=SMOLLM2_DEFAULT_SYSTEM_PROMPT)
  assert render_text(case["messages"], **kwargs) == case["text"]
  conv = render_chat(tok, case["messages"], **kwargs)
  assert conv.ids.tolist() == case["ids"]
  assert conv.roles.tolist()[-1] == (Role.ASSISTANT if case["add_generation_prompt"]
                                     else Role.USER)
  assert not conv.loss_mask.any()


def test_chat_decode_prompt_and_sampled_ids(tok):
  case = REFERENCE["chat_decode"]
  conv = render_chat(tok, case["messages"], add_generation_prompt=True,
                     default_system_prompt=SMOLLM2_DEFAULT_SYSTEM_PROMPT)
  assert conv.ids.tolist() == case["prompt_ids"]
  first_eos = case["first_eos_index"]
  assert case["generated_ids"][first_eos] == tok.eos_id
  reply = case["generated_ids"][:first_eos + 1]  # what a sampler stopping on EOS returns
  conv.append_sampled(reply)
  conv.end_turn()
  assert conv.ids.tolist() == case["prompt_ids"] + reply + tok.encode("\n")
  assert conv.ids[conv.loss_mask].tolist() == reply
  assert tok.decode(reply) == "The capital of France is Paris.<|im_end|>"


def test_gguf_template_holds_the_default_system_prompt(vocab):
  template = vocab.chat_template
  assert f"<|im_start|>system\n{SMOLLM2_DEFAULT_SYSTEM_PROMPT}<|im_end|>" in template
  assert "messages[0]['role'] != 'system'" in template


def _chatml(tok) -> GGUFTokenizer:
  """The same tokenizer without its chat template: the built-in ChatML."""
  chatml = GGUFTokenizer(tok.backend, bos_id=tok.bos_id, eos_id=tok.eos_id, pad_id=tok.pad_id)
  assert chatml.chat_template is None
  return chatml


def test_chatml_conversation_without_default_prompt_has_no_system(tok):
  conv = Conversation(_chatml(tok))
  conv.append_message("user", "Hi")
  assert conv.ids.tolist() == tok.encode("<|im_start|>user\nHi<|im_end|>\n")


def test_template_conversation_inserts_the_default_system_prompt(tok):
  """SmolLM2's own template (GGUF `tokenizer.chat_template`) adds its system message."""
  conv = Conversation(tok)
  conv.append_message("user", "Hi")
  assert conv.ids.tolist() == tok.encode(
      f"<|im_start|>system\n{SMOLLM2_DEFAULT_SYSTEM_PROMPT}<|im_end|>\n"
      "<|im_start|>user\nHi<|im_end|>\n")


@pytest.mark.parametrize("system", [False, True])
def test_template_rendering_equals_chatml(tok, system):
  """The agents' conversations (system prompt, task, sampled turns, observations) rendered
  through SmolLM2's template have exactly the ids of the built-in ChatML."""
  messages = ([{"role": "system", "content": "You are the main agent."}] if system else [])
  messages += [{"role": "user", "content": "Task: who founded Lumen Press?"}]
  sampled = tok.encode('<thinking>search first</thinking>\n<tool_call>{"name": "search"}'
                       "</tool_call><|im_end|>")
  conversations = []
  for tokenizer in (tok, _chatml(tok)):
    default = None if tokenizer.chat_template or system else SMOLLM2_DEFAULT_SYSTEM_PROMPT
    conv = render_chat(tokenizer, messages, add_generation_prompt=True,
                       default_system_prompt=default)
    conv.append_sampled(sampled)
    conv.end_turn()
    conv.append_message("user", "<tool_response>\n[1] Lumen Press\n</tool_response>")
    conv.add_generation_prompt()
    conv.append_sampled(tok.encode("<result>Ada</result>"))  # stopped on a stop string
    conv.end_turn()
    conversations.append(conv)
  templated, chatml = conversations
  assert templated.ids.tolist() == chatml.ids.tolist()
  assert templated.loss_mask.tolist() == chatml.loss_mask.tolist()
  if system:  # else the template's own system message takes the first message's role
    assert templated.roles.tolist() == chatml.roles.tolist()
  assert tok.decode(templated.ids.tolist()).endswith(
      "<|im_start|>assistant\n<result>Ada</result><|im_end|>\n")


def test_truncated_smollm2_file_is_named(gguf_path, tmp_path):
  cut = tmp_path / "smollm2_cut.gguf"
  with gguf_path.open("rb") as f:
    cut.write_bytes(f.read(3_000_000))  # ends inside the tensor-info section
  with pytest.raises(TokenizerFileError, match="smollm2_cut.gguf"):
    GGUFTokenizer.from_gguf(cut)
