"""The tokenizer interface shared by every policy (SentencePiece and GGUF byte-level BPE).

Token-in, token-out: the sampler produces ids, training consumes the same ids, and text
is only decoded for tools and judges. `encode` never adds BOS/EOS on its own, and maps
special-token strings (e.g. `<|im_start|>`) that occur in the text to their ids, as the
Hugging Face tokenizers do, so a rendered chat string and a chat built from ids agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


class UnknownTokenError(KeyError):
  """A token string (or id) that the vocabulary does not hold."""

  def __str__(self) -> str:
    # KeyError's own __str__ shows repr(message) with extra quotes; show the message.
    return str(self.args[0]) if self.args else ""


class TokenizerFileError(ValueError):
  """A tokenizer file that is missing, truncated, corrupt or of the wrong kind."""


@runtime_checkable
class Tokenizer(Protocol):
  """What the models, sampler, chat rendering and agents need from a tokenizer."""

  @property
  def vocab_size(self) -> int:
    """Number of ids, specials included; every id is in `[0, vocab_size)`."""

  @property
  def bos_id(self) -> int | None:
    """Beginning-of-sequence id (for ChatML models `<|im_start|>`), or None."""

  @property
  def eos_id(self) -> int | None:
    """End-of-turn id the sampler stops on (for ChatML models `<|im_end|>`), or None."""

  @property
  def pad_id(self) -> int | None:
    """Padding id, or None."""

  def encode(self, text: str) -> list[int]:
    """Text -> ids; no specials are added, special-token strings map to their ids."""

  def decode(self, ids: Sequence[int]) -> str:
    """Ids -> text, special tokens included as their strings."""

  def token_to_id(self, token: str) -> int:
    """The id of one vocabulary entry; raises UnknownTokenError naming the token."""

  def id_to_token(self, token_id: int) -> str:
    """The vocabulary entry of one id; raises UnknownTokenError when out of range."""


def check_id_range(token_id: int, vocab_size: int) -> int:
  """Returns `token_id` as an int, or raises UnknownTokenError when out of range."""
  token_id = int(token_id)
  if not 0 <= token_id < vocab_size:
    raise UnknownTokenError(f"token id {token_id} is outside the vocabulary [0, {vocab_size})")
  return token_id


class SpecialIdsMixin:
  """`vocab_size`, `bos_id`, `eos_id` and `pad_id` read from the attributes a tokenizer sets
  in its constructor (`_vocab_size`, `_bos_id`, `_eos_id`, `_pad_id`).

  `chat_template` is the Jinja chat template chats are rendered with
  (`chat_template.chat_format`); None: ChatML. A GGUF or Hugging Face tokenizer starts
  with the model's own; the agent's config may replace it (`<agent>.chat_template`).
  """

  chat_template: str | None = None
  _vocab_size: int
  _bos_id: int | None
  _eos_id: int | None
  _pad_id: int | None

  @property
  def vocab_size(self) -> int:
    return self._vocab_size

  @property
  def bos_id(self) -> int | None:
    return self._bos_id

  @property
  def eos_id(self) -> int | None:
    return self._eos_id

  @property
  def pad_id(self) -> int | None:
    return self._pad_id
