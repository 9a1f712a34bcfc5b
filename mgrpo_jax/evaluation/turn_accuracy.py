"""Held-out turn accuracy: how many of the clean oracle's turns an agent would write itself.

The sampled accuracy of a multi-turn system multiplies the success of every turn of a
chain (M's sub-task, S's query, page, report, M's answer), so while the policies are
weak it sits at 0 and hides what they have learned. This diagnostic measures each
turn alone: the clean scripted oracles (no systematic mistakes) play the held-out test
questions, and for every assistant turn of their trajectories the agent's model reads
the demonstrated history (teacher forcing) and is scored 1 if its argmax at every token
of the turn is the demonstrated token, i.e. if greedy decoding from that history would
write exactly the oracle's turn. One forward pass per batch, no sampling noise.

  turn_accuracy = mean over turns of  prod_{t in turn} [argmax_v p(v | y_<t) = y_t]

A turn is scored up to the end of its action (`protocol.STOP_STRINGS`), where a rollout's
sampler stops: the demonstrated end-of-turn token after it is never sampled in RL (the
chat format appends it), so RL never trains it and it is not the agent's choice.

reported for all turns and per action kind ("delegate", "reason", "answer" for M and
the single agent, "search", "visit", "report" for S).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mgrpo_jax.agents import protocol
from mgrpo_jax.text import Tokenizer
from mgrpo_jax.training.batching import DEFAULT_LENGTH_BUCKETS, TokenSequence, pack_sequences


def turn_spans(loss_mask: np.ndarray) -> list[tuple[int, int]]:
  """[start, end) of every maximal run of nonzero `loss_mask` [L] (the sampled turns)."""
  sampled = np.concatenate([[0], (np.asarray(loss_mask) > 0).astype(np.int8), [0]])
  edges = np.flatnonzero(np.diff(sampled))
  return list(zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True))


def scored_end(ids: np.ndarray, begin: int, end: int, tokenizer: Tokenizer) -> int:
  """End of the part of turn `ids[begin:end]` a rollout samples: the shortest prefix that
  holds its action's stop string (`protocol.STOP_STRINGS`), or the whole turn."""
  def stops(stop: int) -> bool:
    text = tokenizer.decode(ids[begin:stop].tolist())
    return any(s in text for s in protocol.STOP_STRINGS)
  while end - 1 > begin and stops(end - 1):
    end -= 1
  return end


def turn_kind(text: str, role: str) -> str:
  """The action of a demonstrated turn: its tool's name, or "report" / "answer"."""
  action = protocol.parse_turn(text)
  if isinstance(action, protocol.ParseError):
    return "malformed"
  if action.kind == protocol.TOOL_CALL:
    return action.name
  return "report" if role == "sub" else "answer"


@functools.partial(jax.jit, static_argnums=0)
def _greedy_next(graphdef: nnx.GraphDef, params: nnx.State, ids: jax.Array) -> jax.Array:
  """argmax_v p(v | ids[:, :t + 1]) for every slot t: int32 [B, T - 1]."""
  return jnp.argmax(nnx.merge(graphdef, params)(ids)[:, :-1], axis=-1).astype(jnp.int32)


def turn_accuracy(model: nnx.Module, sequences: Sequence[TokenSequence], tokenizer: Tokenizer,
                  role: str, *, batch_rows: int = 16,
                  buckets: Sequence[int] = DEFAULT_LENGTH_BUCKETS) -> dict[str, float]:
  """Teacher-forced greedy exact match of every sampled turn of `sequences`.

  Args:
    model: the agent's model (`model(ids)` -> logits [B, T, V]).
    sequences: demonstrations (token ids and the loss mask of the demonstrated turns).
    tokenizer: decodes a turn to find its action kind.
    role: "main", "sub" or "single" (names a result "report" for S, else "answer").
    batch_rows: sequences per forward pass.
    buckets: allowed padded lengths.

  Returns:
    {"all": rate, <kind>: rate, ..., "num_turns": count}; rates are fractions of turns.
  """
  if not sequences:
    raise ValueError("turn_accuracy got no sequences")
  graphdef, params = nnx.split(model)
  right: collections.Counter = collections.Counter()
  total: collections.Counter = collections.Counter()
  for start in range(0, len(sequences), batch_rows):
    chunk = list(sequences[start:start + batch_rows])
    batch = pack_sequences(chunk, np.ones(len(chunk), np.float32), num_rows=batch_rows,
                           buckets=buckets)
    predicted = np.asarray(_greedy_next(graphdef, params, batch.ids))
    for row, sequence in enumerate(chunk):
      for begin, end in turn_spans(sequence.loss_mask):
        kind = turn_kind(tokenizer.decode(sequence.ids[begin:end].tolist()), role)
        end = scored_end(sequence.ids, begin, end, tokenizer)
        # Slot t - 1 predicts token t.
        correct = bool(np.all(predicted[row, begin - 1:end - 1] == sequence.ids[begin:end]))
        for key in ("all", kind):
          right[key] += correct
          total[key] += 1
  rates = {key: right[key] / total[key] for key in sorted(total)}
  return dict(rates, num_turns=float(total["all"]))
