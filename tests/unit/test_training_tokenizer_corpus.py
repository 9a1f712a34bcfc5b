"""The world tokenizer's corpus holds the agents' own protocol text, which it then encodes
in whole pieces instead of characters."""

from __future__ import annotations

import pytest

from configs.local_demo import get_config
from mgrpo_jax.agents import protocol, specs
from mgrpo_jax.agents.oracle_policy import render_oracle_action
from mgrpo_jax.tasks.oracle import Action
from mgrpo_jax.text import DEFAULT_USER_DEFINED_SYMBOLS, SentencePieceTokenizer
from mgrpo_jax.text.chat import message_text
from mgrpo_jax.training import tokenizer_corpus as corpus_lib

FRAME = protocol.render_tool_call("visit", {"page": 203}, "I will call visit.")


def _natural_corpus() -> list[str]:
  return corpus_lib.tokenizer_corpus(corpus_lib.TokenizerSetup.from_config(get_config("natural")))


@pytest.fixture(scope="module")
def corpus():
  return _natural_corpus()


def test_the_corpus_is_deterministic_and_holds_transcripts(corpus):
  assert corpus == _natural_corpus()
  transcripts = corpus[-corpus_lib.TRANSCRIPT_QUESTIONS:]
  assert all('"name": "delegate"' in t or '"name": "reason"' in t for t in transcripts)
  text = "\n".join(transcripts)
  for piece in ('"name": "search"', '"name": "visit"', "<result>The ", "(page ",
                "Find the ", "<thinking>I will give the next look-up"):
    assert piece in text, piece


def test_transcripts_make_the_protocol_whole_tokens(corpus, tmp_path):
  without = corpus[:-corpus_lib.TRANSCRIPT_QUESTIONS]
  small = SentencePieceTokenizer.train(without, tmp_path / "without", 1024)
  full = SentencePieceTokenizer.train(corpus, tmp_path / "with", 1024)
  assert len(full.encode(FRAME)) < 0.7 * len(small.encode(FRAME))  # measured 31 -> 18
  assert full.decode(full.encode(FRAME)) == FRAME


def test_protocol_symbols_make_each_fixed_string_one_token(corpus, tmp_path):
  """Role headers, system prompts, the first messages' literals, tool-call openings and
  the scripted thoughts are one token each, so a delegation turn is its decisions and
  its copied values: 22 tokens on this corpus, against 52 in learned pieces."""
  symbols = corpus_lib.protocol_symbols("short")
  tok = SentencePieceTokenizer.train(corpus, tmp_path / "symbols", 1024,
                                     user_defined_symbols=DEFAULT_USER_DEFINED_SYMBOLS + symbols)
  for symbol in symbols:
    text = symbol.replace("\u2581", " ")
    assert len(tok.encode(text)) == 1 and tok.decode(tok.encode(text)) == text, symbol
  for role in corpus_lib.ROLES:
    assert len(tok.encode(specs.spec_for(role, "short").system_prompt())) == 1
  turn = message_text("assistant", render_oracle_action(Action.delegate("Ada Lovelace boss")))
  pieces = [tok.id_to_token(i) for i in tok.encode(turn)]
  assert pieces[:7] == ["<|im_start|>", "assistant\n", "<thinking>",
                        "I\u2581will\u2581give\u2581the\u2581next\u2581look-up\u2581to\u2581the"
                        "\u2581sub-agent.", "</thinking>", "<tool_call>",
                        '{"name":\u2581"delegate",\u2581"arguments":\u2581{"subtask":\u2581"']
  assert pieces[-4:] == ['"}}', "</tool_call>", "<|im_end|>", "\n"]
  assert tok.decode(tok.encode(turn)) == turn
  plain = SentencePieceTokenizer.train(corpus, tmp_path / "plain", 1024)
  assert len(tok.encode(turn)) < 0.6 * len(plain.encode(turn))
