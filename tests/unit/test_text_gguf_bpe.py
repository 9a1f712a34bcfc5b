"""GGUFTokenizer on small GGUF files written here (no download): ids, specials, errors."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import pre_tokenizers

from mgrpo_jax.text import GGUFTokenizer, Tokenizer, TokenizerFileError, UnknownTokenError
from mgrpo_jax.text.gguf_bpe import read_gguf_vocab
from mgrpo_jax.utils.gguf_file import read_gguf

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"),
          ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld")]
USER_DEFINED = "<tool_call>"
TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def tiny_vocab() -> list[str]:
  merged = ["".join(m) for m in MERGES]
  return SPECIALS + sorted(pre_tokenizers.ByteLevel.alphabet()) + merged + [USER_DEFINED]


def write_gguf(path, *, model="gpt2", pre="smollm", with_tokenizer=True, tokens=None):
  tokens = tokens or tiny_vocab()
  writer = gguf.GGUFWriter(str(path), arch="llama")
  if with_tokenizer:
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS) - 1) + [4]
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_chat_template(TEMPLATE)
  writer.add_tensor("dummy.weight", np.arange(8, dtype=np.float32))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
  return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def tok(gguf_path):
  return GGUFTokenizer.from_gguf(gguf_path)


def test_hand_computed_ids(tok):
  vocab = tiny_vocab()
  ids = {t: i for i, t in enumerate(vocab)}
  assert isinstance(tok, Tokenizer)
  assert tok.vocab_size == len(vocab)
  assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 2)
  assert tok.encode("hello world") == [ids["hello"], ids["Ġworld"]]
  # Two spaces: the first is its own pre-token, the second starts " world".
  assert tok.encode("hello  world!") == [ids["hello"], ids["Ġ"], ids["Ġworld"], ids["!"]]
  assert tok.encode("hell") == [ids["hell"]]
  assert tok.encode("héllo") == [ids["h"], ids["Ã"], ids["©"], ids["ll"], ids["o"]]


def test_specials_and_user_defined_tokens_are_matched_in_text(tok):
  text = "<|im_start|>user\nhello<|im_end|>\n<tool_call>x"
  ids = tok.encode(text)
  assert ids[0] == 1 and 2 in ids and tok.token_to_id(USER_DEFINED) in ids
  assert tok.decode(ids) == text
  assert tok.token_to_id("<|im_end|>") == 2
  assert tok.id_to_token(1) == "<|im_start|>"


@given(st.text(max_size=60))
def test_round_trip_arbitrary_unicode(tok, text):
  ids = tok.encode(text)
  assert tok.decode(ids) == text


def test_vocab_fields(gguf_path):
  vocab = read_gguf_vocab(gguf_path)
  assert vocab.tokens == tiny_vocab()
  assert vocab.merges == MERGES
  assert vocab.pre == "smollm" and vocab.chat_template == TEMPLATE
  assert (vocab.bos_id, vocab.eos_id, vocab.pad_id, vocab.unk_id) == (1, 2, 2, None)


def test_save_load_and_from_reader_agree(tok, gguf_path, tmp_path):
  loaded = GGUFTokenizer.load(tok.save(tmp_path / "saved"))
  from_reader = GGUFTokenizer.from_reader(read_gguf(gguf_path), source=str(gguf_path))
  texts = ["hello world", "<|im_start|>a\n<|im_end|>", "日本 🍕\t\n", ""]
  for other in (loaded, from_reader):
    assert [other.encode(t) for t in texts] == [tok.encode(t) for t in texts]
    assert (other.vocab_size, other.bos_id, other.eos_id, other.pad_id) == \
        (tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id)


def test_unknown_token_and_id_errors(tok):
  with pytest.raises(UnknownTokenError, match="<no_such_token>"):
    tok.token_to_id("<no_such_token>")
  with pytest.raises(UnknownTokenError, match=str(tok.vocab_size)):
    tok.id_to_token(tok.vocab_size)
  with pytest.raises(UnknownTokenError, match="-1"):
    tok.decode([1, -1])


def test_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError, match="absent.gguf"):
    GGUFTokenizer.from_gguf(tmp_path / "absent.gguf")


@pytest.mark.parametrize("keep_fraction", [0.0, 0.1, 0.5, 0.9])
def test_truncated_file_names_the_file(gguf_path, tmp_path, keep_fraction):
  data = gguf_path.read_bytes()
  cut = tmp_path / "cut.gguf"
  cut.write_bytes(data[:int(len(data) * keep_fraction)])
  with pytest.raises(TokenizerFileError, match="cut.gguf"):
    GGUFTokenizer.from_gguf(cut)


def test_garbage_file_names_the_file(tmp_path):
  junk = tmp_path / "junk.gguf"
  junk.write_bytes(bytes(range(256)) * 64)
  with pytest.raises(TokenizerFileError, match="junk.gguf"):
    GGUFTokenizer.from_gguf(junk)


def test_gguf_without_tokenizer(tmp_path):
  path = write_gguf(tmp_path / "weights_only.gguf", with_tokenizer=False)
  with pytest.raises(TokenizerFileError, match="weights_only.gguf holds no tokenizer"):
    GGUFTokenizer.from_gguf(path)


def test_unsupported_tokenizer_kinds(tmp_path):
  with pytest.raises(TokenizerFileError, match="'llama'"):
    GGUFTokenizer.from_gguf(write_gguf(tmp_path / "spm.gguf", model="llama"))
  with pytest.raises(TokenizerFileError, match="'qwen2'"):
    GGUFTokenizer.from_gguf(write_gguf(tmp_path / "qwen.gguf", pre="qwen2"))


def test_load_errors_name_the_file(tok, tmp_path):
  with pytest.raises(FileNotFoundError, match="tokenizer.json"):
    GGUFTokenizer.load(tmp_path / "empty")
  saved = tok.save(tmp_path / "saved")
  (saved / "tokenizer.json").write_text("{not json")
  with pytest.raises(TokenizerFileError, match="tokenizer.json"):
    GGUFTokenizer.load(saved)
  tok.save(saved)
  (saved / "special_ids.json").write_text('{"bos_id": 1}')
  with pytest.raises(TokenizerFileError, match="special_ids.json"):
    GGUFTokenizer.load(saved)
