"""Stop conditions on token ids: EOS ids and stop strings such as `</tool_call>`.

The exact rule: a stop string s is turned, once, into token-id sequences:
`tokenizer.encode(s)` and `tokenizer.encode(" " + s)` (a byte-level BPE merges a
preceding space into the first punctuation token, e.g. " </"). A row stops right after
the step at which its *generated* ids (never the prompt) end with one of these
sequences; the matched ids stay in the output. A stop string the model spells with a
different tokenization is not detected; pass such id sequences explicitly
(`SamplingParams.stop_sequences`). Sequences are packed right-aligned into a fixed
[max_stop_sequences, max_stop_length] array so their number does not change shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def stop_token_sequences(tokenizer, stop_strings: Sequence[str]) -> list[tuple[int, ...]]:
  """The distinct token-id sequences that end generation for each stop string."""
  out: list[tuple[int, ...]] = []
  for s in stop_strings:
    if not s:
      raise ValueError("stop strings must be non-empty")
    for variant in (s, " " + s):
      ids = tuple(int(i) for i in tokenizer.encode(variant))
      if ids and ids not in out:
        out.append(ids)
  return out


def pack_stop_sequences(sequences: Sequence[Sequence[int]], max_sequences: int,
                        max_length: int) -> tuple[np.ndarray, np.ndarray]:
  """Right-aligned int32 [max_sequences, max_length] (-1 padded) and lengths [max_sequences]."""
  if len(sequences) > max_sequences:
    raise ValueError(f"{len(sequences)} stop sequences exceed max_stop_sequences="
                     f"{max_sequences}")
  packed = np.full((max_sequences, max_length), -1, np.int32)
  lengths = np.zeros((max_sequences,), np.int32)
  for i, seq in enumerate(sequences):
    if not 0 < len(seq) <= max_length:
      raise ValueError(f"stop sequence {list(seq)} must have 1..{max_length} ids")
    packed[i, max_length - len(seq):] = seq
    lengths[i] = len(seq)
  return packed, lengths


def stop_hits(tail: jax.Array, packed: jax.Array, lengths: jax.Array) -> jax.Array:
  """Whether each row's recent ids end with a stop sequence.

  Args:
    tail: int32 [B, L], the last L generated ids of each row (-1 before the first).
    packed: int32 [S, L] right-aligned sequences; lengths: int32 [S] (0 = unused).

  Returns:
    bool [B].
  """
  width = packed.shape[1]
  used = jnp.arange(width)[None, :] >= (width - lengths)[:, None]            # [S, L]
  equal = (tail[:, None, :] == packed[None]) | ~used[None]                    # [B, S, L]
  return jnp.any(jnp.all(equal, axis=-1) & (lengths > 0)[None], axis=-1)
