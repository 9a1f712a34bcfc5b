"""Byte-level BPE tokenizer carried in a GGUF file (e.g. SmolLM2), built with HF `tokenizers`.

A GGUF file with `tokenizer.ggml.model == "gpt2"` stores the vocabulary
(`tokenizer.ggml.tokens`), the merge list (`tokenizer.ggml.merges`, "a b" strings in
rank order), token kinds (`tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control,
4 user-defined, 5 unused, 6 byte) and the special ids. This module rebuilds the
tokenizer as a `tokenizers` BPE with a byte-level pre-tokenizer and decoder, and adds
control tokens as special tokens, which gives the same ids as transformers' GGUF
tokenizer. Parsing the GGUF strings is slow (seconds), so `save`/`load` keep the
result as a `tokenizer.json` plus a small file with the special ids.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Sequence

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, processors

from mgrpo_jax.text.tokenizer import (
  SpecialIdsMixin,
  TokenizerFileError,
  UnknownTokenError,
  check_id_range,
)

TOKENIZER_JSON = "tokenizer.json"
SPECIAL_IDS_JSON = "special_ids.json"

# GGUF `tokenizer.ggml.pre` values whose split rule is GPT-2's byte-level regex.
GPT2_REGEX_PRE_TOKENIZERS = ("default", "gpt2", "smollm")

_TOKEN_TYPE_NORMAL = 1
_TOKEN_TYPE_UNKNOWN = 2
_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4


@dataclasses.dataclass(frozen=True)
class GGUFVocab:
  """The tokenizer fields of a GGUF file.

  Attributes:
    tokens: vocabulary strings, indexed by id, in GPT-2 byte-to-unicode form.
    merges: BPE merges in rank order, each as the two merged strings.
    token_types: GGUF token kind per id (see module docstring).
    pre: the `tokenizer.ggml.pre` name of the split rule.
    bos_id, eos_id, pad_id, unk_id: special ids, None when absent.
    chat_template: the Jinja chat template (`tokenizer.chat_template`), None when absent.
  """

  tokens: list[str]
  merges: list[tuple[str, str]]
  token_types: list[int]
  pre: str
  bos_id: int | None
  eos_id: int | None
  pad_id: int | None
  unk_id: int | None
  chat_template: str | None = None


def _field(reader, key: str):
  return reader.metadata.get(key)


def read_gguf_vocab(path: str | os.PathLike) -> GGUFVocab:
  """Reads the tokenizer fields of a GGUF file.

  Raises:
    FileNotFoundError: the file does not exist.
    TokenizerFileError: the file is not a readable GGUF file, has no tokenizer, or holds a
      tokenizer kind this module does not build.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"GGUF tokenizer file not found: {path}")
  # Imported here: only GGUF parsing needs it, and `gguf` is slow to import.
  from mgrpo_jax.utils.gguf_file import GGUFFormatError, read_gguf
  try:
    reader = read_gguf(path)
  except GGUFFormatError as e:
    raise TokenizerFileError(f"{path} is not a readable GGUF file: {e.detail}") from e
  return vocab_from_reader(reader, source=str(path))


def vocab_from_reader(reader, *, source: str) -> GGUFVocab:
  """The tokenizer fields of a parsed `utils.gguf_file.GGUFFile` (`source` names it in
  errors)."""
  model = _field(reader, "tokenizer.ggml.model")
  tokens = _field(reader, "tokenizer.ggml.tokens")
  if model is None or tokens is None:
    missing = "tokenizer.ggml.model" if model is None else "tokenizer.ggml.tokens"
    raise TokenizerFileError(f"{source} holds no tokenizer: missing GGUF key {missing!r}")
  if model != "gpt2":
    raise TokenizerFileError(
        f"{source}: tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') is supported")
  pre = _field(reader, "tokenizer.ggml.pre") or "default"
  if pre not in GPT2_REGEX_PRE_TOKENIZERS:
    raise TokenizerFileError(
        f"{source}: tokenizer.ggml.pre is {pre!r}; supported: {GPT2_REGEX_PRE_TOKENIZERS}")
  merges_raw = _field(reader, "tokenizer.ggml.merges")
  if merges_raw is None:
    raise TokenizerFileError(f"{source} holds no BPE merges (tokenizer.ggml.merges)")
  merges = []
  for rank, merge in enumerate(merges_raw):
    left, sep, right = merge.partition(" ")
    if not sep:
      raise TokenizerFileError(f"{source}: merge {rank} {merge!r} is not of the form 'a b'")
    merges.append((left, right))
  token_types = _field(reader, "tokenizer.ggml.token_type") or [_TOKEN_TYPE_NORMAL] * len(tokens)
  if len(token_types) != len(tokens):
    raise TokenizerFileError(
        f"{source}: {len(token_types)} token types for {len(tokens)} tokens")

  def special(name: str) -> int | None:
    value = _field(reader, f"tokenizer.ggml.{name}_token_id")
    if value is not None and not 0 <= value < len(tokens):
      raise TokenizerFileError(
          f"{source}: tokenizer.ggml.{name}_token_id {value} is outside [0, {len(tokens)})")
    return value

  return GGUFVocab(tokens=tokens, merges=merges, token_types=token_types, pre=pre,
                   bos_id=special("bos"), eos_id=special("eos"), pad_id=special("padding"),
                   unk_id=special("unknown"),
                   chat_template=_field(reader, "tokenizer.chat_template"))


def build_byte_level_bpe(vocab: GGUFVocab) -> tokenizers.Tokenizer:
  """Builds the `tokenizers` byte-level BPE equivalent to the GGUF vocabulary."""
  token_ids = {token: i for i, token in enumerate(vocab.tokens)}
  if len(token_ids) != len(vocab.tokens):
    raise TokenizerFileError("the GGUF vocabulary holds duplicate token strings")
  backend = tokenizers.Tokenizer(
      models.BPE(vocab=token_ids, merges=vocab.merges, byte_fallback=False))
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  backend.decoder = decoders.ByteLevel()
  backend.post_processor = processors.ByteLevel(trim_offsets=False)
  specials, user_defined = [], []
  for token, kind in zip(vocab.tokens, vocab.token_types, strict=True):
    if kind in (_TOKEN_TYPE_CONTROL, _TOKEN_TYPE_UNKNOWN):
      specials.append(tokenizers.AddedToken(token, special=True, normalized=False))
    elif kind == _TOKEN_TYPE_USER_DEFINED:
      user_defined.append(tokenizers.AddedToken(token, special=False, normalized=False))
  backend.add_special_tokens(specials)
  backend.add_tokens(user_defined)
  return backend


class GGUFTokenizer(SpecialIdsMixin):
  """The `Tokenizer` protocol over a byte-level BPE read from a GGUF file."""

  def __init__(self, backend: tokenizers.Tokenizer, *, bos_id: int | None,
               eos_id: int | None, pad_id: int | None, chat_template: str | None = None):
    self._backend = backend
    self.chat_template = chat_template
    self._vocab_size = backend.get_vocab_size(with_added_tokens=True)
    for value in (bos_id, eos_id, pad_id):
      if value is not None:
        check_id_range(value, self._vocab_size)
    self._bos_id, self._eos_id, self._pad_id = bos_id, eos_id, pad_id

  @classmethod
  def from_gguf(cls, path: str | os.PathLike) -> GGUFTokenizer:
    """Builds the tokenizer from a GGUF file's metadata."""
    return cls.from_vocab(read_gguf_vocab(path))

  @classmethod
  def from_reader(cls, reader, *, source: str) -> GGUFTokenizer:
    """Builds the tokenizer from an already parsed `utils.gguf_file.GGUFFile` (no second
    parse)."""
    return cls.from_vocab(vocab_from_reader(reader, source=source))

  @classmethod
  def from_vocab(cls, vocab: GGUFVocab) -> GGUFTokenizer:
    return cls(build_byte_level_bpe(vocab), bos_id=vocab.bos_id, eos_id=vocab.eos_id,
               pad_id=vocab.pad_id, chat_template=vocab.chat_template)

  def save(self, directory: str | os.PathLike) -> pathlib.Path:
    """Writes `tokenizer.json` and `special_ids.json` (with the chat template) into
    `directory`; returns it."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    self._backend.save(str(directory / TOKENIZER_JSON))
    special = {"bos_id": self._bos_id, "eos_id": self._eos_id, "pad_id": self._pad_id,
               "chat_template": self.chat_template}
    (directory / SPECIAL_IDS_JSON).write_text(json.dumps(special, indent=1) + "\n")
    return directory

  @classmethod
  def load(cls, directory: str | os.PathLike) -> GGUFTokenizer:
    """Loads what `save` wrote (fast: no GGUF parsing)."""
    directory = pathlib.Path(directory)
    tokenizer_json, special_json = directory / TOKENIZER_JSON, directory / SPECIAL_IDS_JSON
    for required in (tokenizer_json, special_json):
      if not required.is_file():
        raise FileNotFoundError(f"saved tokenizer file not found: {required}")
    try:
      backend = tokenizers.Tokenizer.from_file(str(tokenizer_json))
    except Exception as e:  # tokenizers raises its own Exception type on bad JSON.
      raise TokenizerFileError(f"{tokenizer_json} is not a valid tokenizer.json: {e}") from e
    try:
      special = json.loads(special_json.read_text())
      ids = {key: special[key] for key in ("bos_id", "eos_id", "pad_id")}
      template = special.get("chat_template")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
      raise TokenizerFileError(
          f"{special_json} must be a JSON object with bos_id, eos_id and pad_id: {e}") from e
    if template is not None and not isinstance(template, str):
      raise TokenizerFileError(f"{special_json}: chat_template must be a string or null")
    return cls(backend, **ids, chat_template=template)

  @property
  def backend(self) -> tokenizers.Tokenizer:
    """The HF `tokenizers` object (what `tokenizer.json` holds)."""
    return self._backend

  def encode(self, text: str) -> list[int]:
    return self._backend.encode(text, add_special_tokens=False).ids

  def decode(self, ids: Sequence[int]) -> str:
    ids = [check_id_range(i, self._vocab_size) for i in ids]
    return self._backend.decode(ids, skip_special_tokens=False)

  def token_to_id(self, token: str) -> int:
    token_id = self._backend.token_to_id(token)
    if token_id is None:
      raise UnknownTokenError(f"token {token!r} is not in the GGUF tokenizer's vocabulary")
    return token_id

  def id_to_token(self, token_id: int) -> str:
    return self._backend.id_to_token(check_id_range(token_id, self._vocab_size))
