"""The decoder on the tiny preset: KV cache vs full forward, scan vs unrolled, padding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import get_config, init_cache, init_model, token_logprobs
from mgrpo_jax.models.layers import rope_inverse_frequencies
from mgrpo_jax.models.weights.hf_layout import hf_tensors_from_model, model_from_hf_tensors

forward = nnx.jit(lambda model, ids: model(ids))
masked_forward = nnx.jit(lambda model, ids, mask: model(ids, mask))
cached_forward = nnx.jit(lambda model, ids, cache: model.forward_cached(ids, cache))


def _random_ids(seed: int, shape: tuple[int, ...], vocab: int = 256) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, vocab, size=shape).astype(np.int32)


@pytest.fixture(scope="module")
def tiny():
  return init_model(get_config("tiny"), seed=0)


@pytest.fixture(scope="module")
def tiny_scanned(tiny):
  config = tiny.config.replace(scan_layers=True)
  return model_from_hf_tensors(config, hf_tensors_from_model(tiny), "tiny")


@pytest.fixture(scope="module")
def tiny_smeared():
  """Smeared keys with a different mix weight per kv head (tests of the mix itself:
  test_models_smeared_keys.py)."""
  model = init_model(get_config("tiny", smeared_keys=True), seed=0)
  for layer in model.layers:
    layer.attn.key_smear[...] = np.asarray([-1.5, 0.0, 0.7, 2.0], np.float32)
  return model


@pytest.fixture
def variant(request, tiny, tiny_scanned, tiny_smeared):
  return {"unrolled": tiny, "scanned": tiny_scanned, "smeared": tiny_smeared}[request.param]


def test_logits_shape_and_dtype(tiny):
  logits = forward(tiny, _random_ids(0, (3, 7)))
  assert logits.shape == (3, 7, 256)
  assert logits.dtype == jnp.float32
  assert np.all(np.isfinite(logits))


@pytest.mark.parametrize("variant", ["unrolled", "scanned", "smeared"], indirect=True)
def test_kv_cache_decode_matches_full_forward(variant):
  """Left-padded prompts of lengths 3, 6, 1, then 5 decode steps; every position's logits
  equal those of an unpadded full forward of that row."""
  model = variant
  lengths, prompt_len, steps = [3, 6, 1], 6, 5
  rows = [_random_ids(i, (n + steps,)) for i, n in enumerate(lengths)]
  start = np.array([prompt_len - n for n in lengths], np.int32)
  prompt = np.zeros((3, prompt_len), np.int32)
  for i, n in enumerate(lengths):
    prompt[i, prompt_len - n:] = rows[i][:n]
  cache = init_cache(model.config, 3, prompt_len + steps, start)
  logits, cache = cached_forward(model, prompt, cache)
  got = [[logits[i, prompt_len - n:]] for i, n in enumerate(lengths)]
  for t in range(steps):
    step_ids = np.array([[rows[i][n + t]] for i, n in enumerate(lengths)], np.int32)
    logits, cache = cached_forward(model, step_ids, cache)
    for i in range(3):
      got[i].append(logits[i])
  assert int(cache.index) == prompt_len + steps
  for i in range(3):
    want = forward(model, rows[i][None])[0]
    np.testing.assert_allclose(np.concatenate(got[i]), want, atol=1e-5, rtol=0)


def test_scan_layers_matches_unrolled(tiny, tiny_scanned):
  ids = _random_ids(1, (4, 12))
  np.testing.assert_allclose(forward(tiny_scanned, ids), forward(tiny, ids), atol=1e-5, rtol=0)
  assert tiny_scanned.blocks.attn.q_proj.kernel.shape == (2, 64, 128)


@pytest.mark.parametrize("variant", ["unrolled", "smeared"], indirect=True)
def test_left_and_right_padding_match_unpadded(variant):
  rows = [_random_ids(5, (4,)), _random_ids(6, (9,))]
  width = 9
  right = np.zeros((2, width), np.int32)
  left = np.zeros((2, width), np.int32)
  right_mask, left_mask = np.zeros_like(right), np.zeros_like(left)
  for i, r in enumerate(rows):
    right[i, :len(r)], right_mask[i, :len(r)] = r, 1
    left[i, width - len(r):], left_mask[i, width - len(r):] = r, 1
  right_logits = masked_forward(variant, right, right_mask)
  left_logits = masked_forward(variant, left, left_mask)
  for i, r in enumerate(rows):
    want = forward(variant, r[None])[0]
    np.testing.assert_allclose(right_logits[i, :len(r)], want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(left_logits[i, width - len(r):], want, atol=1e-5, rtol=0)


def test_token_logprobs_matches_log_softmax_gather(tiny):
  ids = _random_ids(7, (2, 10))
  logits = np.asarray(forward(tiny, ids), np.float64)
  log_z = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  want = np.zeros((2, 10))
  for b in range(2):
    for t in range(1, 10):
      want[b, t] = logits[b, t - 1, ids[b, t]] - log_z[b, t - 1]
  got = nnx.jit(token_logprobs)(tiny, ids)
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
  hot = nnx.jit(lambda m, x: token_logprobs(m, x, temperature=0.5))(tiny, ids)
  assert not np.allclose(hot, got, atol=1e-3)


def test_token_logprobs_zero_without_context(tiny):
  ids = _random_ids(8, (2, 6))
  mask = np.array([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
  got = np.asarray(nnx.jit(token_logprobs)(tiny, ids, mask))
  assert np.all(got[0, :3] == 0) and np.all(got[1, 4:] == 0) and got[1, 0] == 0
  assert np.all(got[0, 3:] < 0) and np.all(got[1, 1:4] < 0)


def test_rope_frequencies_plain_and_llama3_scaled():
  plain = rope_inverse_frequencies(64, 500000.0)
  np.testing.assert_allclose(plain, 500000.0 ** (-np.arange(0, 64, 2) / 64), rtol=1e-6)
  scaling = get_config("llama3_2_1b").rope_scaling
  scaled = rope_inverse_frequencies(64, 500000.0, scaling)
  wavelen = 2 * np.pi / plain
  high = wavelen < 8192 / 4.0     # short wavelengths: unchanged
  low = wavelen > 8192 / 1.0      # long wavelengths: divided by the factor
  np.testing.assert_allclose(scaled[high], plain[high], rtol=1e-6)
  np.testing.assert_allclose(scaled[low], plain[low] / 32.0, rtol=1e-6)
  mid = ~high & ~low
  assert mid.any() and np.all(scaled[mid] < plain[mid]) and np.all(scaled[mid] > plain[mid] / 32)


@pytest.mark.parametrize("name,published", [
    ("smollm2_135m", 134_515_008),
    ("qwen2_5_0_5b", 494_032_768),
    ("qwen2_5_7b", 7_615_616_512),
    ("llama3_2_1b", 1_235_814_400),
])
def test_preset_parameter_counts(name, published):
  config = get_config(name)
  assert config.num_params == published
  if name in ("smollm2_135m", "qwen2_5_0_5b"):
    abstract = nnx.eval_shape(lambda: init_model(config.replace(scan_layers=True)))
    counted = sum(x.size for x in jax.tree.leaves(nnx.state(abstract)))
    assert counted == published


def test_bad_config_is_rejected():
  with pytest.raises(ValueError, match="num_kv_heads"):
    get_config("tiny", num_kv_heads=3)
  with pytest.raises(KeyError, match="unknown model preset"):
    get_config("gpt5")
