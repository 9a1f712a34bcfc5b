"""Held-out turn accuracy: turns found from the loss mask, scored by teacher-forced argmax."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.agents import protocol
from mgrpo_jax.evaluation.turn_accuracy import turn_accuracy, turn_kind, turn_spans
from mgrpo_jax.training.batching import TokenSequence

VOCAB = 16


class BigramModel(nnx.Module):
  """logits[b, t] = one-hot of table[ids[b, t]]: predicts the next token from the current."""

  def __init__(self, table):
    self.table = nnx.Variable(jnp.asarray(table, jnp.int32))

  def __call__(self, ids):
    return jnp.where(jnp.arange(VOCAB) == self.table[...][ids][..., None], 10.0, 0.0)


class FixedTokenizer:
  """Decodes ids to the text the test assigns to that exact id tuple (others: "")."""

  def __init__(self, texts):
    self.texts = texts

  def decode(self, ids):
    return self.texts.get(tuple(ids), "")


def _sequence(ids, mask):
  ids, mask = np.asarray(ids, np.int32), np.asarray(mask, np.float32)
  return TokenSequence(ids, mask, np.zeros(len(ids), np.float32))


def test_turn_spans_are_the_runs_of_the_loss_mask():
  assert turn_spans(np.array([0, 1, 1, 0, 0, 1, 0, 1])) == [(1, 3), (5, 6), (7, 8)]
  assert turn_spans(np.zeros(4)) == []


@given(st.lists(st.booleans(), max_size=40))
def test_turn_spans_cover_exactly_the_sampled_tokens(mask):
  spans = turn_spans(np.array(mask, np.float32))
  covered = [i for start, end in spans for i in range(start, end)]
  assert covered == [i for i, m in enumerate(mask) if m]
  for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
    assert start > end  # maximal: two runs never touch
  assert all(start < end for start, end in spans)


def test_turn_kinds_name_the_action():
  call = protocol.render_tool_call("delegate", {"subtask": "Find X."}, "t")
  answer = protocol.render_result("42", "t")
  assert turn_kind(call + "<|im_end|>", "main") == "delegate"
  assert turn_kind(protocol.render_tool_call("visit", {"page": 3}, "t"), "sub") == "visit"
  assert turn_kind(answer, "main") == "answer" and turn_kind(answer, "single") == "answer"
  assert turn_kind(answer, "sub") == "report"
  assert turn_kind("<thinking>t</thinking><result>4", "main") == "malformed"


def test_a_turn_counts_only_if_every_token_is_the_argmax_of_the_slot_before():
  # The bigram table predicts 1->2, 2->3, 3->4, 4->5 and 5->9 (not 6).
  table = np.arange(VOCAB)
  table[[1, 2, 3, 4, 5]] = [2, 3, 4, 5, 9]
  model = BigramModel(table)
  first = protocol.render_tool_call("search", {"query": "q"}, "t")
  second = protocol.render_result("r", "t")
  # Turn [2, 3] follows 1 (all right); turn [5, 6] follows 4: 5 is right, 6 is not.
  seq = _sequence([1, 2, 3, 4, 5, 6], [0, 1, 1, 0, 1, 1])
  tokenizer = FixedTokenizer({(2, 3): first, (5, 6): second})
  rates = turn_accuracy(model, [seq], tokenizer, "sub", batch_rows=4, buckets=(8,))
  assert rates == {"all": 0.5, "report": 0.0, "search": 1.0, "num_turns": 2.0}
  table[5] = 6  # now the last token is predicted too
  rates = turn_accuracy(BigramModel(table), [seq, seq], tokenizer, "sub", batch_rows=1,
                        buckets=(8,))
  assert rates == {"all": 1.0, "report": 1.0, "search": 1.0, "num_turns": 4.0}


def test_a_turn_is_scored_up_to_its_stop_string_not_the_end_of_turn_token():
  # Turn [2, 3, 4]: its action ends at 3 (the stop string), 4 is the end-of-turn token
  # the chat format appends in a rollout. The model predicts 2 and 3, then 9 for 4.
  table = np.arange(VOCAB)
  table[[1, 2, 3]] = [2, 3, 9]
  result = protocol.render_result("r", "t")
  seq = _sequence([1, 2, 3, 4], [0, 1, 1, 1])
  tokenizer = FixedTokenizer({(2, 3, 4): result + protocol.END_OF_TURN, (2, 3): result})
  rates = turn_accuracy(BigramModel(table), [seq], tokenizer, "sub", buckets=(8,))
  assert rates == {"all": 1.0, "report": 1.0, "num_turns": 1.0}
  # Without the stop string before the last token, every token of the turn counts.
  tokenizer = FixedTokenizer({(2, 3, 4): result, (2, 3): "<thinking>t</thinking><result>r"})
  rates = turn_accuracy(BigramModel(table), [seq], tokenizer, "sub", buckets=(8,))
  assert rates == {"all": 0.0, "report": 0.0, "num_turns": 1.0}


def test_no_sequences_is_an_error():
  with pytest.raises(ValueError, match="no sequences"):
    turn_accuracy(BigramModel(np.arange(VOCAB)), [], FixedTokenizer({}), "main")
