"""SentencePieceTokenizer: training, save/load, specials, byte fallback, determinism."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.text import (
    DEFAULT_USER_DEFINED_SYMBOLS,
    SentencePieceTokenizer,
    Tokenizer,
    TokenizerFileError,
    UnknownTokenError,
)

WORDS = ("the capital of france is paris search visit report answer question tool result "
         "thinking plan agent sub main delegate judge score query document page city river "
         "population year café naïve").split()
VOCAB_SIZE = 512


def make_corpus(seed: int, n: int = 400) -> list[str]:
  rng = random.Random(seed)
  docs = []
  for _ in range(n):
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 25))]
    if rng.random() < 0.3:
      words.insert(rng.randrange(len(words)), str(rng.randint(0, 99999)))
    if rng.random() < 0.2:
      words = ["<tool_call>"] + words + ["</tool_call>"]
    docs.append(" ".join(words) + rng.choice([".", "?", "!\n", "\n\n", "\t", ",  "]))
  return docs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  out_dir = tmp_path_factory.mktemp("spm")
  return SentencePieceTokenizer.train(make_corpus(0), out_dir, VOCAB_SIZE), out_dir


def test_train_writes_model_and_layout(trained):
  tok, out_dir = trained
  assert isinstance(tok, Tokenizer)
  assert (out_dir / "tokenizer.model").read_bytes() == tok.model_proto
  assert tok.vocab_size == VOCAB_SIZE
  assert [tok.id_to_token(i) for i in range(2)] == ["<unk>", "<pad>"]
  symbols = [tok.id_to_token(2 + i) for i in range(len(DEFAULT_USER_DEFINED_SYMBOLS))]
  assert symbols == list(DEFAULT_USER_DEFINED_SYMBOLS)
  assert (tok.bos_id, tok.eos_id, tok.pad_id) == (2, 3, 1)
  first_byte = 2 + len(DEFAULT_USER_DEFINED_SYMBOLS)
  assert tok.id_to_token(first_byte) == "<0x00>"
  assert tok.id_to_token(first_byte + 255) == "<0xFF>"


def test_save_load_round_trip(trained, tmp_path):
  tok, out_dir = trained
  saved = tok.save(tmp_path / "copy")
  for loaded in (SentencePieceTokenizer.load(out_dir),
                 SentencePieceTokenizer.load(saved)):
    assert loaded.model_proto == tok.model_proto
    for text in make_corpus(1, n=50):
      assert loaded.encode(text) == tok.encode(text)
    assert (loaded.bos_id, loaded.eos_id, loaded.pad_id) == (tok.bos_id, tok.eos_id, tok.pad_id)


def test_learned_pieces_compress_corpus_text(trained):
  tok, _ = trained
  text = "the capital of france is paris"
  ids = tok.encode(text)
  assert len(ids) < len(text) / 2  # learned merges, not bytes or characters
  assert tok.decode(ids) == text


@pytest.mark.parametrize("symbol", DEFAULT_USER_DEFINED_SYMBOLS)
def test_specials_are_single_tokens_anywhere(trained, symbol):
  tok, _ = trained
  symbol_id = tok.token_to_id(symbol)
  assert tok.encode(symbol) == [symbol_id]
  text = f"plan{symbol}paris {symbol} x{symbol}{symbol}"
  ids = tok.encode(text)
  assert ids.count(symbol_id) == 4
  assert tok.decode(ids) == text


def test_unseen_characters_use_byte_pieces(trained):
  tok, _ = trained
  ids = tok.encode("語")
  assert [tok.id_to_token(i) for i in ids] == ["<0xE8>", "<0xAA>", "<0x9E>"]


@pytest.mark.parametrize("text", [
    "", " ", "  two  spaces  ", "\n\n\t\r\n", "a\x00b", "▁", "x▁▁y ▁", "日本語 🍕 👨‍👩‍👧",
    "Ångström Straße", "<|im_start|>user\nhi<|im_end|>\n", "12345 67.89",
])
def test_round_trip_examples(trained, text):
  tok, _ = trained
  assert tok.decode(tok.encode(text)) == text


# Arbitrary unicode mixed with the characters SentencePiece treats specially.
unicode_texts = st.lists(
    st.one_of(st.text(max_size=20), st.sampled_from(["▁", " ", "  ", "\n", "\t", "▁▁ "])),
    max_size=8).map("".join)


@given(unicode_texts)
def test_round_trip_arbitrary_unicode(trained, text):
  tok, _ = trained
  ids = tok.encode(text)
  assert all(0 <= i < tok.vocab_size for i in ids)
  assert tok.decode(ids) == text


def test_training_is_deterministic(tmp_path):
  for name, seed in (("a", 0), ("b", 0), ("c", 7)):
    SentencePieceTokenizer.train(make_corpus(seed), tmp_path / name, VOCAB_SIZE)
  model_bytes = {name: (tmp_path / name / "tokenizer.model").read_bytes() for name in "abc"}
  assert model_bytes["a"] == model_bytes["b"]
  assert model_bytes["a"] != model_bytes["c"]  # the comparison can tell corpora apart


def test_custom_symbols(tmp_path):
  tok = SentencePieceTokenizer.train(make_corpus(0), tmp_path, VOCAB_SIZE,
                                     user_defined_symbols=("<a>", "</a>"))
  assert tok.encode("<a>x</a>")[0] == tok.token_to_id("<a>") == 2
  assert tok.bos_id is None and tok.eos_id is None
  with pytest.raises(UnknownTokenError, match="<tool_call>"):
    tok.token_to_id("<tool_call>")


def test_unknown_token_and_id_errors(trained):
  tok, _ = trained
  with pytest.raises(UnknownTokenError, match="<no_such_token>"):
    tok.token_to_id("<no_such_token>")
  with pytest.raises(UnknownTokenError, match=str(VOCAB_SIZE)):
    tok.id_to_token(VOCAB_SIZE)
  with pytest.raises(UnknownTokenError, match="-1"):
    tok.decode([5, -1])


def test_load_errors_name_the_file(tmp_path):
  missing = tmp_path / "nowhere" / "tokenizer.model"
  with pytest.raises(FileNotFoundError, match="nowhere"):
    SentencePieceTokenizer.load(missing)
  corrupt = tmp_path / "corrupt.model"
  corrupt.write_bytes(b"\x00\xffnot a sentencepiece model" * 10)
  with pytest.raises(TokenizerFileError, match="corrupt.model"):
    SentencePieceTokenizer.load(corrupt)


def test_train_argument_errors(tmp_path):
  with pytest.raises(ValueError, match="vocab_size=200"):
    SentencePieceTokenizer.train(make_corpus(0), tmp_path, 200)
  with pytest.raises(ValueError, match="duplicates"):
    SentencePieceTokenizer.train(make_corpus(0), tmp_path, VOCAB_SIZE,
                                 user_defined_symbols=("<a>", "<a>"))
