"""Copy curriculum: synthetic sequences that teach a model trained from scratch to copy.

Every sequence is L random tokens in which one span of s tokens occurs twice; the loss
is on the second occurrence, after its first token (nothing predicts that one). The
only way to predict the rest is an induction head: find the earlier occurrence of the
current token and copy what followed it. The agents need exactly that skill to carry
an unseen entity name from the question into a sub-task, a page id from search results
into a visit, or a number into a `reason` expression.

A pretrained LLM arrives with it; a small model initialized from scratch does not, and
on the demonstrations alone it memorizes the training world's names instead. With
smeared keys (`ModelConfig.smeared_keys`) a few hundred steps on these sequences form
the circuit (docs/RESULTS.md); the warm start runs them before its supervised
fine-tuning (`warm_start.copy_steps`).

Tokens are drawn from the ids that the demonstrations use (`demonstration_token_ids`),
so the curriculum stays inside the vocabulary the agents speak.

Random tokens never repeat a token by chance, so the circuit they form copies wherever
a token recurs, and loops on repeated digits or words in real text
(`"... is 11111111"`). `window_sequences` is the second phase
(`warm_start.window_copy_steps`): windows of the agent's own demonstrations, one span
of each copied later inside it, the loss on every token, so that natural repeats are
seen with what really follows them while copies still pay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from mgrpo_jax.training.batching import TokenSequence


def demonstration_token_ids(sequences: Sequence[TokenSequence]) -> np.ndarray:
  """int32 [V'] sorted distinct ids occurring in `sequences`."""
  if not sequences:
    raise ValueError("demonstration_token_ids got no sequences")
  return np.unique(np.concatenate([np.asarray(s.ids) for s in sequences])).astype(np.int32)


def copy_sequences(num: int, token_ids: np.ndarray, *, length: int = 128, min_span: int = 4,
                   max_span: int = 24, seed: int = 0) -> list[TokenSequence]:
  """`num` copy-task sequences of `length` tokens.

  Args:
    num: sequences to draw.
    token_ids: int [V'] ids to draw tokens from (at least 2).
    length: L, tokens per sequence (>= 2 * max_span + 1).
    min_span, max_span: bounds of s, the repeated span's length (inclusive).
    seed: seeds every draw.

  Returns:
    `TokenSequence`s with ids [L] and loss_mask [L]: 1 on the second occurrence's tokens
    but its first, 0 elsewhere; logp is 0 (the sequences were not sampled).
  """
  token_ids = np.asarray(token_ids, np.int32)
  if token_ids.ndim != 1 or token_ids.size < 2:
    raise ValueError(f"copy_sequences: token_ids must hold at least 2 ids, got {token_ids.size}")
  _check_spans(length, min_span, max_span)
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(num):
    ids = token_ids[rng.integers(0, token_ids.size, size=length)]
    span, source, target = _spans(rng, length, min_span, max_span)
    ids[target:target + span] = ids[source:source + span]
    mask = np.zeros(length, np.float32)
    mask[target + 1:target + span] = 1.0
    out.append(TokenSequence(ids=ids, loss_mask=mask, logp=np.zeros(length, np.float32)))
  return out


def _check_spans(length: int, min_span: int, max_span: int) -> None:
  if not 2 <= min_span <= max_span:
    raise ValueError(f"copy_curriculum: need 2 <= min_span <= max_span, got {min_span}, "
                     f"{max_span}")
  if length < 2 * max_span + 1:
    raise ValueError(f"copy_curriculum: length {length} cannot hold two spans of {max_span}")


def _spans(rng: np.random.Generator, length: int, min_span: int, max_span: int
           ) -> tuple[int, int, int]:
  """(span, source, target) of one repeated span inside `length` tokens."""
  span = int(rng.integers(min_span, max_span + 1))
  source = int(rng.integers(0, length - 2 * span + 1))
  return span, source, int(rng.integers(source + span, length - span + 1))


def window_sequences(num: int, demonstrations: Sequence[TokenSequence], *, length: int = 128,
                     min_span: int = 4, max_span: int = 24, seed: int = 0
                     ) -> list[TokenSequence]:
  """`num` windows of `length` tokens of `demonstrations`, each with one span copied.

  Args:
    num: sequences to draw.
    demonstrations: the agent's demonstrations; windows come from those of at least
      `length` tokens, at seeded random offsets.
    length: L, tokens per window.
    min_span, max_span: bounds of the copied span's length (inclusive).
    seed: seeds every draw.

  Returns:
    `TokenSequence`s with ids [L]: the window with the span at `source` written over
    the tokens at a later `target`; loss_mask [L] 1 on every token but the first and
    the copy's first (nothing predicts those); logp 0.
  """
  _check_spans(length, min_span, max_span)
  rng = np.random.default_rng(seed)
  sources = [np.asarray(d.ids, np.int32) for d in demonstrations if len(d.ids) >= length]
  if not sources:
    raise ValueError(f"window_sequences: no demonstration has {length} tokens")
  out = []
  for _ in range(num):
    ids = sources[int(rng.integers(len(sources)))]
    start = int(rng.integers(0, len(ids) - length + 1))
    ids = ids[start:start + length].copy()
    span, source, target = _spans(rng, length, min_span, max_span)
    ids[target:target + span] = ids[source:source + span]
    mask = np.ones(length, np.float32)
    mask[[0, target]] = 0.0
    out.append(TokenSequence(ids=ids, loss_mask=mask, logp=np.zeros(length, np.float32)))
  return out


def copy_accuracy(model: Any, sequences: Sequence[TokenSequence]) -> float:
  """Fraction of the loss-masked tokens of `sequences` (equal lengths) that `model`
  predicts greedily, teacher-forced: 1.0 is a model that copies every span."""
  ids = jnp.asarray(np.stack([np.asarray(s.ids) for s in sequences]), jnp.int32)
  mask = np.stack([np.asarray(s.loss_mask) for s in sequences])[:, 1:]
  predicted = np.asarray(jnp.argmax(model(ids), axis=-1))[:, :-1]
  return float(((predicted == np.asarray(ids)[:, 1:]) * mask).sum() / mask.sum())
