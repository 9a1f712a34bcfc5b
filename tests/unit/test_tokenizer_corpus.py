"""The world tokenizer's corpus holds the agents' own protocol text, which it then encodes
in whole pieces instead of characters."""

from __future__ import annotations

import pytest

from configs.local_demo import get_config
from mgrpo_jax.agents import protocol
from mgrpo_jax.text import SentencePieceTokenizer
from mgrpo_jax.training import tokenizer_corpus as corpus_lib

FRAME = protocol.render_tool_call("visit", {"page": 203}, "I will call visit.")


@pytest.fixture(scope="module")
def corpus():
  return corpus_lib.tokenizer_corpus(get_config("natural"))


def test_the_corpus_is_deterministic_and_holds_transcripts(corpus):
  assert corpus == corpus_lib.tokenizer_corpus(get_config("natural"))
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
