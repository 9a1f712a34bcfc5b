"""The copy curriculum's sequences: one repeated span, the loss on its copy, seeded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_jax.training.batching import TokenSequence
from mgrpo_jax.warm_start.copy_curriculum import (
  copy_accuracy,
  copy_sequences,
  demonstration_token_ids,
  window_sequences,
)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), length=st.integers(17, 96), min_span=st.integers(2, 4),
       extra=st.integers(0, 4), vocab=st.integers(2, 50))
def test_every_sequence_repeats_one_span_with_the_loss_on_its_copy(seed, length, min_span,
                                                                  extra, vocab):
  max_span = min(min_span + extra, (length - 1) // 2)
  if max_span < min_span:
    return
  token_ids = np.arange(100, 100 + vocab, dtype=np.int32)
  for seq in copy_sequences(5, token_ids, length=length, min_span=min_span,
                            max_span=max_span, seed=seed):
    ids, mask = np.asarray(seq.ids), np.asarray(seq.loss_mask)
    assert ids.shape == mask.shape == (length,)
    assert np.isin(ids, token_ids).all()
    loss = np.flatnonzero(mask)
    span = loss.size + 1
    assert min_span <= span <= max_span
    np.testing.assert_array_equal(loss, np.arange(loss[0], loss[0] + loss.size))
    target = loss[0] - 1
    copies = [s for s in range(0, target - span + 1)
              if np.array_equal(ids[s:s + span], ids[target:target + span])]
    assert copies, "the masked span must occur earlier in the sequence"
    assert not np.any(seq.logp)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), length=st.integers(17, 64), min_span=st.integers(2, 4),
       extra=st.integers(0, 4))
def test_windows_are_demonstration_text_with_one_span_copied(seed, length, min_span, extra):
  max_span = min(min_span + extra, (length - 1) // 2)
  if max_span < min_span:
    return
  rng = np.random.default_rng(seed)
  demos = [TokenSequence(rng.integers(0, 30, size=n).astype(np.int32), np.zeros(n), np.zeros(n))
           for n in (length - 1, length, 3 * length)]  # the shortest can never be drawn
  for seq in window_sequences(6, demos, length=length, min_span=min_span,
                              max_span=max_span, seed=seed):
    ids, mask = np.asarray(seq.ids), np.asarray(seq.loss_mask)
    assert ids.shape == mask.shape == (length,)
    unmasked = np.flatnonzero(mask == 0)
    assert unmasked[0] == 0 and unmasked.size == 2 and mask.sum() == length - 2
    target = int(unmasked[1])
    # Outside the copy the window is a contiguous slice of one long-enough demonstration.
    windows = [d.ids[i:i + length] for d in demos[1:] for i in range(len(d.ids) - length + 1)]
    outside = np.r_[0:target]
    assert any(np.array_equal(ids[outside], w[outside]) for w in windows)
    copies = [s for s in range(0, target)
              if np.array_equal(ids[s:s + min_span], ids[target:target + min_span])]
    assert copies, "the copied span must occur earlier in the window"
  with pytest.raises(ValueError, match="no demonstration has"):
    window_sequences(1, demos[:1], length=length, min_span=min_span, max_span=max_span)


def test_seeded_and_varied():
  token_ids = np.arange(10, 60, dtype=np.int32)
  a = copy_sequences(4, token_ids, seed=3)
  b = copy_sequences(4, token_ids, seed=3)
  c = copy_sequences(4, token_ids, seed=4)
  assert all(np.array_equal(x.ids, y.ids) for x, y in zip(a, b, strict=True))
  assert not all(np.array_equal(x.ids, y.ids) for x, y in zip(a, c, strict=True))
  assert len({int(np.flatnonzero(s.loss_mask)[0]) for s in copy_sequences(50, token_ids)}) > 10


def test_demonstration_token_ids_are_the_distinct_ids_used():
  seqs = [TokenSequence(np.array([5, 9, 5]), np.zeros(3), np.zeros(3)),
          TokenSequence(np.array([2, 9]), np.zeros(2), np.zeros(2))]
  np.testing.assert_array_equal(demonstration_token_ids(seqs), [2, 5, 9])
  with pytest.raises(ValueError, match="no sequences"):
    demonstration_token_ids([])


@pytest.mark.parametrize("kwargs,match", [
    ({"token_ids": np.array([3])}, "at least 2 ids"),
    ({"min_span": 1}, "min_span"),
    ({"min_span": 9, "max_span": 5}, "min_span"),
    ({"length": 40, "max_span": 24}, "cannot hold"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
  args = {"token_ids": np.arange(10), **kwargs}
  token_ids = args.pop("token_ids")
  with pytest.raises(ValueError, match=match):
    copy_sequences(1, token_ids, **args)


def test_copy_accuracy_counts_the_masked_tokens_predicted():
  """A fake model that predicts each next token perfectly except at one copied position."""
  seqs = copy_sequences(3, np.arange(10, 40, dtype=np.int32), length=32, max_span=8, seed=5)
  wrong_row, wrong_at = 1, int(np.flatnonzero(seqs[1].loss_mask)[0])

  def model(ids):
    nxt = np.roll(np.asarray(ids), -1, axis=1)
    nxt[wrong_row, wrong_at - 1] = 0
    return np.eye(64, dtype=np.float32)[nxt]

  masked = sum(float(s.loss_mask.sum()) for s in seqs)
  assert copy_accuracy(model, seqs) == pytest.approx((masked - 1) / masked)
