"""Smeared keys (`ModelConfig.smeared_keys`): the math, the KV cache, padding, the off switch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import get_config, init_cache, init_model
from mgrpo_jax.models.layers import apply_rope, rope_angles, rope_inverse_frequencies, smear_keys
from mgrpo_jax.models.weights.hf_layout import WeightFileError, hf_tensors_from_model

forward = nnx.jit(lambda model, ids: model(ids))
masked_forward = nnx.jit(lambda model, ids, mask: model(ids, mask))
cached_forward = nnx.jit(lambda model, ids, cache: model.forward_cached(ids, cache))


def _random_ids(seed: int, shape: tuple[int, ...], vocab: int = 256) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, vocab, size=shape).astype(np.int32)


def _smeared_model(logits: list[float]) -> nnx.Module:
  """The tiny preset with smeared keys and per-layer, per-kv-head weight logits."""
  model = init_model(get_config("tiny", smeared_keys=True), seed=0)
  for layer in model.layers:
    layer.attn.key_smear[...] = np.asarray(logits, np.float32)
  return model


@pytest.fixture(scope="module")
def smeared():
  return _smeared_model([-1.5, 0.0, 0.7, 2.0])


def test_smear_equals_mixing_raw_keys_before_rope():
  """smear(RoPE(k)) == RoPE(a k_s + (1 - a) k_{s-1}), the first real slot keeping a k_s;
  row 1 is left-padded by 2 slots, so its real positions start at slot 2."""
  rng = np.random.default_rng(0)
  b, s, kv, h = 2, 7, 3, 16
  raw = rng.normal(size=(b, s, kv, h)).astype(np.float32)
  valid = np.ones((b, s), bool)
  valid[1, :2] = False
  positions = np.maximum(np.cumsum(valid, axis=1) - 1, 0)
  inv_freq = rope_inverse_frequencies(h, 10000.0)
  cos, sin = rope_angles(positions, inv_freq)
  logit = rng.normal(size=(kv,)).astype(np.float32)
  a = 1.0 / (1.0 + np.exp(-logit))
  mixed = a[None, None, :, None] * raw
  for row in range(b):
    for slot in range(s):
      if slot > 0 and valid[row, slot] and valid[row, slot - 1]:
        mixed[row, slot] += (1.0 - a[:, None]) * raw[row, slot - 1]
  want = np.asarray(apply_rope(mixed, cos, sin))
  got = np.asarray(smear_keys(apply_rope(raw, cos, sin), valid, logit, inv_freq))
  np.testing.assert_allclose(got[valid], want[valid], atol=1e-5, rtol=0)


def test_parameter_exists_only_when_enabled(smeared):
  plain = init_model(get_config("tiny"), seed=0)
  assert plain.layers[0].attn.key_smear is None
  assert smeared.layers[0].attn.key_smear.shape == (plain.config.num_kv_heads,)


def test_hugging_face_export_refuses_rather_than_dropping_the_smear_weights(smeared):
  with pytest.raises(WeightFileError, match="smeared keys"):
    hf_tensors_from_model(smeared)


def test_weight_one_is_the_plain_model():
  """a = sigmoid(30) ~ 1 keeps every key as it is: the logits of the same seeded model
  without smeared keys (the smear parameter takes no random draws)."""
  plain = init_model(get_config("tiny"), seed=0)
  ids = _random_ids(0, (2, 9))
  np.testing.assert_allclose(forward(_smeared_model([30.0] * 4), ids), forward(plain, ids),
                             atol=1e-5, rtol=0)
  assert not np.allclose(forward(_smeared_model([0.0] * 4), ids), forward(plain, ids),
                         atol=1e-3)


def test_kv_cache_decode_matches_full_forward(smeared):
  """Left-padded prompts of lengths 3, 6, 1 and 5 decode steps equal an unpadded forward
  of each row: the cached path smears the same keys as the full one."""
  lengths, prompt_len, steps = [3, 6, 1], 6, 5
  rows = [_random_ids(i, (n + steps,)) for i, n in enumerate(lengths)]
  start = np.array([prompt_len - n for n in lengths], np.int32)
  prompt = np.zeros((3, prompt_len), np.int32)
  for i, n in enumerate(lengths):
    prompt[i, prompt_len - n:] = rows[i][:n]
  cache = init_cache(smeared.config, 3, prompt_len + steps, start)
  logits, cache = cached_forward(smeared, prompt, cache)
  got = [[logits[i, prompt_len - n:]] for i, n in enumerate(lengths)]
  for t in range(steps):
    step_ids = np.array([[rows[i][n + t]] for i, n in enumerate(lengths)], np.int32)
    logits, cache = cached_forward(smeared, step_ids, cache)
    for i in range(3):
      got[i].append(logits[i])
  for i in range(3):
    want = forward(smeared, rows[i][None])[0]
    np.testing.assert_allclose(np.concatenate(got[i]), want, atol=1e-5, rtol=0)


def test_left_and_right_padding_match_unpadded(smeared):
  rows = [_random_ids(5, (4,)), _random_ids(6, (9,))]
  width = 9
  right, left = np.zeros((2, width), np.int32), np.zeros((2, width), np.int32)
  right_mask, left_mask = np.zeros_like(right), np.zeros_like(left)
  for i, r in enumerate(rows):
    right[i, :len(r)], right_mask[i, :len(r)] = r, 1
    left[i, width - len(r):], left_mask[i, width - len(r):] = r, 1
  right_logits = masked_forward(smeared, right, right_mask)
  left_logits = masked_forward(smeared, left, left_mask)
  for i, r in enumerate(rows):
    want = forward(smeared, r[None])[0]
    np.testing.assert_allclose(right_logits[i, :len(r)], want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(left_logits[i, width - len(r):], want, atol=1e-5, rtol=0)


def test_scanned_layers_match_unrolled():
  """With `scan_layers` the smear weights are stacked per layer and give the same logits."""
  config = get_config("tiny", smeared_keys=True)
  unrolled = _smeared_model([-1.0, 0.5, 1.0, 3.0])
  scanned = init_model(config.replace(scan_layers=True), seed=1)
  stacked = jax.tree.map(lambda *layers: jnp.stack(layers),
                         *[nnx.state(layer) for layer in unrolled.layers])
  nnx.update(scanned.blocks, stacked)
  nnx.update(scanned, {"embedding": nnx.state(unrolled)["embedding"],
                       "final_norm": nnx.state(unrolled)["final_norm"]})
  assert scanned.blocks.attn.key_smear.shape == (config.num_layers, config.num_kv_heads)
  ids = _random_ids(3, (2, 8))
  np.testing.assert_allclose(forward(scanned, ids), forward(unrolled, ids), atol=1e-5, rtol=0)
