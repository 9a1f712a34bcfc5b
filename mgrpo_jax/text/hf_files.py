"""Hugging Face tokenizer files of the project's tokenizers (`AutoTokenizer` loads them).

`write_hf_tokenizer(tokenizer, folder, chat_template=...)` writes `tokenizer.json` (the
fast-tokenizer format of HF `tokenizers`) and `tokenizer_config.json` (the class
`PreTrainedTokenizerFast`, the special tokens, the chat template), so that
`AutoTokenizer.from_pretrained(folder)` encodes text to the same ids as the project's
tokenizer and decodes them back.

- `GGUFTokenizer` (SmolLM2's byte-level BPE) is already a `tokenizers` backend: it is
  written as is, with the GGUF's chat template.
- `SentencePieceTokenizer` (the world tokenizers, trained BPE models) is rebuilt as a
  `tokenizers` BPE: spaces are SentencePiece's U+2581 ("▁", a normalizer replaces them;
  there is no dummy prefix), the merges are ordered by the score of the merged piece (as
  transformers' own SentencePiece conversion does), unknown characters fall back to the
  byte pieces, and the user-defined symbols (ChatML specials, protocol tags, the symbolic
  world's names) are added tokens matched wherever they occur. One difference remains:
  a literal "▁" in the text decodes as a space (the project's tokenizer keeps it).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import tokenizers
from tokenizers import decoders, models, normalizers

from mgrpo_jax.text.chat import IM_END, IM_START
from mgrpo_jax.text.gguf_bpe import GGUFTokenizer
from mgrpo_jax.text.sentencepiece_tokenizer import SentencePieceTokenizer

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG_JSON = "tokenizer_config.json"

_SPACE = "\u2581"
# SentencePiece `ModelProto.SentencePiece.Type` values.
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED = 1, 2, 3, 4
# Added tokens that `skip_special_tokens` drops (as in SmolLM2's tokenizer).
_SPECIAL_SYMBOLS = (IM_START, IM_END)


def sentencepiece_backend(tokenizer: SentencePieceTokenizer) -> tokenizers.Tokenizer:
  """The `tokenizers` BPE equivalent to a trained SentencePiece BPE model.

  Raises:
    ValueError: the model is not a BPE model (unigram models have no merges).
  """
  from sentencepiece import sentencepiece_model_pb2

  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(tokenizer.model_proto)
  model_types = sentencepiece_model_pb2.TrainerSpec.ModelType
  if proto.trainer_spec.model_type != model_types.Value("BPE"):
    raise ValueError("only SentencePiece BPE models convert to a Hugging Face tokenizer; this "
                     f"one is {model_types.Name(proto.trainer_spec.model_type)}")
  if proto.normalizer_spec.add_dummy_prefix:
    raise ValueError("the SentencePiece model adds a dummy prefix; the project's tokenizers "
                     "are trained without one")
  pieces = list(proto.pieces)
  vocab = {p.piece: i for i, p in enumerate(pieces)}
  normal = {p.piece for p in pieces if p.type == _NORMAL}
  scored = sorted(((p.score, i, p.piece) for i, p in enumerate(pieces) if p.type == _NORMAL),
                  key=lambda t: (-t[0], t[1]))
  merges = []
  for _, _, piece in scored:
    splits = [(piece[:k], piece[k:]) for k in range(1, len(piece))
              if piece[:k] in normal and piece[k:] in normal]
    merges.extend(sorted(splits, key=lambda pair: (vocab[pair[0]], vocab[pair[1]])))
  unk = next(p.piece for p in pieces if p.type == _UNKNOWN)
  backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk,
                                            byte_fallback=True, fuse_unk=True))
  backend.normalizer = normalizers.Replace(" ", _SPACE)
  backend.decoder = decoders.Sequence([decoders.Replace(_SPACE, " "), decoders.ByteFallback(),
                                       decoders.Fuse()])
  specials = [p.piece for p in pieces
              if p.type in (_UNKNOWN, _CONTROL) or p.piece in _SPECIAL_SYMBOLS]
  backend.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False)
                              for s in specials])
  backend.add_tokens([tokenizers.AddedToken(p.piece, special=False, normalized=True)
                      for p in pieces
                      if p.type == _USER_DEFINED and p.piece not in _SPECIAL_SYMBOLS])
  return backend


def _token(tokenizer: Any, token_id: int | None) -> str | None:
  return None if token_id is None else tokenizer.id_to_token(token_id)


def write_hf_tokenizer(tokenizer: Any, folder: str | os.PathLike, *, chat_template: str,
                       model_max_length: int) -> list[pathlib.Path]:
  """Writes `tokenizer.json` and `tokenizer_config.json` into `folder`.

  Args:
    tokenizer: a `SentencePieceTokenizer` or `GGUFTokenizer`.
    folder: the output folder (created if needed).
    chat_template: the Jinja chat template the exported model is prompted with.
    model_max_length: the longest context, in tokens.

  Returns:
    the paths written.

  Raises:
    TypeError: any other tokenizer type.
  """
  if isinstance(tokenizer, GGUFTokenizer):
    backend = tokenizer.backend
  elif isinstance(tokenizer, SentencePieceTokenizer):
    backend = sentencepiece_backend(tokenizer)
  else:
    raise TypeError(f"cannot export a {type(tokenizer).__name__} as a Hugging Face tokenizer "
                    "(supported: SentencePieceTokenizer, GGUFTokenizer)")
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  backend.save(str(folder / TOKENIZER_JSON))
  config = {
      "tokenizer_class": "PreTrainedTokenizerFast",
      "bos_token": _token(tokenizer, tokenizer.bos_id),
      "eos_token": _token(tokenizer, tokenizer.eos_id),
      "pad_token": _token(tokenizer, tokenizer.pad_id),
      "add_bos_token": False,
      "add_eos_token": False,
      "clean_up_tokenization_spaces": False,
      "model_max_length": int(model_max_length),
      "chat_template": chat_template,
  }
  config = {k: v for k, v in config.items() if v is not None}
  (folder / TOKENIZER_CONFIG_JSON).write_text(json.dumps(config, indent=2, ensure_ascii=False)
                                              + "\n")
  return [folder / TOKENIZER_JSON, folder / TOKENIZER_CONFIG_JSON]
