"""A SentencePiece tokenizer trained on a corpus, for policies trained from scratch.

Training is set up so that any text round-trips exactly and ids are reproducible:
- identity normalization, no dummy prefix, no whitespace cleanup: the text is kept as is;
- byte fallback: characters outside the learned pieces become UTF-8 byte pieces;
- ChatML specials and the agents' protocol tags are user-defined symbols, so each is
  one token wherever it occurs in the text (as the specials of HF tokenizers are);
- one training thread and no sentence sampling: the same corpus and arguments give a
  byte-identical model file.

SentencePiece writes spaces as U+2581 ("▁") inside pieces and turns every "▁" back into
a space on decoding, so a literal "▁" in the input is encoded here as its three UTF-8
byte pieces, which decode back to "▁".

Ids: 0 `<unk>`, 1 `<pad>`, then the user-defined symbols in order, then the 256 byte
pieces, then the learned pieces. `bos_id`/`eos_id` are `<|im_start|>`/`<|im_end|>` when
they are among the symbols (as in SmolLM2), else None.
"""

from __future__ import annotations

import io
import os
import pathlib
from collections.abc import Iterable, Sequence

import sentencepiece as spm

from mgrpo_jax.text.tokenizer import (
  SpecialIdsMixin,
  TokenizerFileError,
  UnknownTokenError,
  check_id_range,
)

MODEL_FILE = "tokenizer.model"
CHATML_SPECIALS = ("<|im_start|>", "<|im_end|>")
PROTOCOL_TAGS = ("<thinking>", "</thinking>", "<tool_call>", "</tool_call>",
                 "<tool_response>", "</tool_response>", "<result>", "</result>")
DEFAULT_USER_DEFINED_SYMBOLS = CHATML_SPECIALS + PROTOCOL_TAGS

_SPACE_SYMBOL = "\u2581"
_UNK_PIECE, _PAD_PIECE = "<unk>", "<pad>"


def _trainer_args(vocab_size: int, user_defined_symbols: Sequence[str], model_type: str,
                  split_digits: bool, max_sentence_length: int) -> dict:
  return dict(
      vocab_size=vocab_size,
      model_type=model_type,
      user_defined_symbols=list(user_defined_symbols),
      byte_fallback=True,
      character_coverage=1.0,
      normalization_rule_name="identity",
      add_dummy_prefix=False,
      remove_extra_whitespaces=False,
      allow_whitespace_only_pieces=True,
      split_digits=split_digits,
      max_sentence_length=max_sentence_length,
      unk_id=0, pad_id=1, bos_id=-1, eos_id=-1,
      unk_piece=_UNK_PIECE, pad_piece=_PAD_PIECE,
      num_threads=1,
      input_sentence_size=0,
      shuffle_input_sentence=False,
      minloglevel=2,
  )


class SentencePieceTokenizer(SpecialIdsMixin):
  """The `Tokenizer` protocol over a SentencePiece model."""

  def __init__(self, model_proto: bytes, *, source: str = "<in memory>"):
    self._proto = bytes(model_proto)
    self._sp = spm.SentencePieceProcessor()
    try:
      self._sp.LoadFromSerializedProto(self._proto)
    except Exception as e:  # sentencepiece raises RuntimeError/OSError on bad protos.
      raise TokenizerFileError(f"{source} is not a valid SentencePiece model: {e}") from e
    self._vocab_size = self._sp.get_piece_size()
    self._space_bytes = [self.token_to_id(f"<0x{b:02X}>") for b in _SPACE_SYMBOL.encode()]
    self._bos_id = self._optional_id(CHATML_SPECIALS[0])
    self._eos_id = self._optional_id(CHATML_SPECIALS[1])
    self._pad_id = self._optional_id(_PAD_PIECE)

  @classmethod
  def train(cls, texts: Iterable[str], out_dir: str | os.PathLike, vocab_size: int, *,
            user_defined_symbols: Sequence[str] = DEFAULT_USER_DEFINED_SYMBOLS,
            model_type: str = "bpe", split_digits: bool = True,
            max_sentence_length: int = 1 << 16) -> SentencePieceTokenizer:
    """Trains on `texts` and saves `tokenizer.model` into `out_dir`.

    Args:
      texts: training documents; each is one SentencePiece "sentence" (may hold newlines).
      out_dir: folder for `tokenizer.model` (created if needed).
      vocab_size: total ids, including the 2 + len(user_defined_symbols) + 256 fixed ones.
      user_defined_symbols: strings that always become one token each.
      model_type: "bpe" or "unigram".
      split_digits: split numbers into single digits (as SmolLM2's vocabulary does).
      max_sentence_length: longer documents (in bytes) are skipped by the trainer.
    """
    fixed = 2 + len(user_defined_symbols) + 256
    if vocab_size <= fixed:
      raise ValueError(f"vocab_size={vocab_size} leaves no room for learned pieces: "
                       f"{fixed} ids are fixed (unk, pad, symbols, 256 bytes)")
    if len(set(user_defined_symbols)) != len(user_defined_symbols):
      raise ValueError(f"user_defined_symbols has duplicates: {list(user_defined_symbols)}")
    sentences = (text for text in texts if text)
    buffer = io.BytesIO()
    try:
      spm.SentencePieceTrainer.train(
          sentence_iterator=sentences, model_writer=buffer,
          **_trainer_args(vocab_size, user_defined_symbols, model_type, split_digits,
                          max_sentence_length))
    except RuntimeError as e:
      raise ValueError(f"SentencePiece training failed (vocab_size={vocab_size}, "
                       f"model_type={model_type!r}): {e}") from e
    tokenizer = cls(buffer.getvalue())
    tokenizer.save(out_dir)
    return tokenizer

  def save(self, out_dir: str | os.PathLike) -> pathlib.Path:
    """Writes `tokenizer.model` into `out_dir`; returns the file's path."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / MODEL_FILE
    path.write_bytes(self._proto)
    return path

  @classmethod
  def load(cls, path: str | os.PathLike) -> SentencePieceTokenizer:
    """Loads a model file, or `tokenizer.model` inside a folder."""
    path = pathlib.Path(path)
    if path.is_dir():
      path = path / MODEL_FILE
    if not path.is_file():
      raise FileNotFoundError(f"SentencePiece model file not found: {path}")
    return cls(path.read_bytes(), source=str(path))

  @property
  def model_proto(self) -> bytes:
    """The serialized model (what `save` writes)."""
    return self._proto

  def encode(self, text: str) -> list[int]:
    segments = text.split(_SPACE_SYMBOL)
    ids = self._sp.encode(segments[0]) if segments[0] else []
    for segment in segments[1:]:
      ids.extend(self._space_bytes)
      if segment:
        ids.extend(self._sp.encode(segment))
    return ids

  def decode(self, ids: Sequence[int]) -> str:
    return self._sp.decode([check_id_range(i, self._vocab_size) for i in ids])

  def token_to_id(self, token: str) -> int:
    token_id = self._sp.piece_to_id(token)
    if self._sp.id_to_piece(token_id) != token:  # piece_to_id maps unknown pieces to unk.
      raise UnknownTokenError(f"token {token!r} is not in the SentencePiece vocabulary")
    return token_id

  def id_to_token(self, token_id: int) -> str:
    return self._sp.id_to_piece(check_id_range(token_id, self._vocab_size))

  def _optional_id(self, token: str) -> int | None:
    try:
      return self.token_to_id(token)
    except UnknownTokenError:
      return None
