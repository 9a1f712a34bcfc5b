"""Sampling parts against numpy references: top-k/top-p filters, stop matching, buckets;
and the sampler over a scanned-layers model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.models.weights.hf_layout import hf_tensors_from_model, model_from_hf_tensors
from mgrpo_jax.sampling import (
    Sampler,
    SamplerConfig,
    SamplingParams,
    filter_logits,
    pack_stop_sequences,
    pick_bucket,
    powers_of_two,
    stop_hits,
)
from mgrpo_jax.sampling.buckets import decode_windows, doubling_lengths
from mgrpo_jax.sampling.filters import choose_tokens


def numpy_keep_set(logits: np.ndarray, top_k: int, top_p: float) -> set[int]:
  """HF order: top-k, then the smallest prefix (by probability) with mass >= top_p."""
  order = np.argsort(-logits, kind="stable")
  if top_k > 0:
    order = order[:top_k]
  probs = np.exp(logits[order] - logits[order].max())
  probs /= probs.sum()
  kept, mass = [], 0.0
  for idx, p in zip(order, probs, strict=True):
    kept.append(int(idx))
    mass += p
    if mass >= top_p:
      break
  return set(kept)


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (5, 1.0), (0, 0.3), (0, 0.9), (7, 0.6),
                                         (1, 1.0), (0, 0.0)])
def test_filter_keeps_the_reference_set(top_k, top_p):
  logits = np.random.default_rng(top_k + int(10 * top_p)).standard_normal((4, 50)) * 2
  got = np.asarray(filter_logits(jnp.asarray(logits, jnp.float32), jnp.int32(top_k),
                                 jnp.float32(top_p)))
  for row in range(4):
    kept = set(np.flatnonzero(np.isfinite(got[row])).tolist())
    assert kept == numpy_keep_set(logits[row], top_k, top_p)
    np.testing.assert_allclose(got[row, sorted(kept)], logits[row, sorted(kept)], rtol=1e-6)


def test_sampled_frequencies_follow_the_tempered_distribution():
  logits = jnp.asarray([[2.0, 1.0, 0.0, -1.0]])
  keys = jax.random.split(jax.random.key(0), 4000)
  draw = jax.vmap(lambda k: choose_tokens(k, logits, jnp.float32(0.5), jnp.int32(0),
                                          jnp.float32(1.0), False)[0][0])
  counts = np.bincount(np.asarray(draw(keys)), minlength=4) / 4000
  want = np.exp(np.array([4.0, 2.0, 0.0, -2.0]))
  np.testing.assert_allclose(counts, want / want.sum(), atol=0.03)


def test_stop_hits_matches_suffixes_only():
  packed, lengths = pack_stop_sequences([(7, 8, 9), (4,)], max_sequences=3, max_length=4)
  assert packed.tolist() == [[-1, 7, 8, 9], [-1, -1, -1, 4], [-1, -1, -1, -1]]
  tail = jnp.asarray([[1, 7, 8, 9], [7, 8, 9, 1], [-1, -1, 8, 4], [-1, -1, -1, -1],
                      [7, 8, 9, 4]])
  assert np.asarray(stop_hits(tail, packed, lengths)).tolist() == [True, False, True, False,
                                                                   True]
  with pytest.raises(ValueError, match="exceed max_stop_sequences=1"):
    pack_stop_sequences([(1,), (2,)], max_sequences=1, max_length=4)
  with pytest.raises(ValueError, match="must have 1..2 ids"):
    pack_stop_sequences([(1, 2, 3)], max_sequences=1, max_length=2)


def test_buckets():
  assert powers_of_two(16, 100) == (16, 32, 64, 128)
  assert pick_bucket(17, (16, 32), "prompt length") == 32
  assert pick_bucket(16, (32, 16), "prompt length") == 16
  with pytest.raises(ValueError, match="batch size 9 exceeds the largest bucket 8"):
    pick_bucket(9, (1, 8), "batch size")
  assert decode_windows(128, 3) == (32, 64, 128)
  assert decode_windows(100, 3) == (25, 50, 100)
  assert decode_windows(100, 1) == (100,)
  assert decode_windows(2, 3) == (1, 2)
  assert doubling_lengths(128, 1024) == (128, 256, 512, 1024)
  assert doubling_lengths(64, 160) == (64, 128, 160)  # the context caps the last one
  assert doubling_lengths(160, 160) == (160,)


def test_scanned_model_samples_the_same_tokens():
  model = init_model(get_config("tiny"), seed=0)
  scanned = model_from_hf_tensors(model.config.replace(scan_layers=True),
                                  hf_tensors_from_model(model), "tiny")
  config = SamplerConfig(prompt_buckets=(8,), generation_buckets=(8,), batch_buckets=(2,))
  prompts, params = [[5, 6, 7], [1]], SamplingParams(max_new_tokens=8, stop_on_eos=False)
  a = Sampler(model, eos_ids=[3], config=config).generate(prompts, params, jax.random.key(3))
  b = Sampler(scanned, eos_ids=[3], config=config).generate(prompts, params, jax.random.key(3))
  np.testing.assert_array_equal(a.tokens, b.tokens)
  np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
