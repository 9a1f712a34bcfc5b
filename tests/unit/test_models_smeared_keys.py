"""Smeared keys (`ModelConfig.smeared_keys`): the math, scan, HF layout, the off switch.

The KV cache and padding tests run on a smeared model too: test_models_transformer.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.models.layers import apply_rope, rope_angles, rope_inverse_frequencies, smear_keys
from mgrpo_jax.models.weights.hf_layout import (
    WeightFileError,
    config_from_hf_dict,
    hf_config_dict,
    hf_tensors_from_model,
    model_from_hf_tensors,
)

forward = nnx.jit(lambda model, ids: model(ids))


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


def test_hugging_face_layout_keeps_the_smear_weights(smeared):
  """The HF tensors hold each layer's smear logits and load back into the same logits
  (config.json round trip: model type `mgrpo_llama` means smeared keys)."""
  tensors = hf_tensors_from_model(smeared)
  np.testing.assert_array_equal(tensors["model.layers.1.self_attn.key_smear"],
                                np.float32([-1.5, 0.0, 0.7, 2.0]))
  hf = hf_config_dict(smeared.config)
  assert hf["model_type"] == "mgrpo_llama"
  assert hf["auto_map"]["AutoModelForCausalLM"] == "modeling_mgrpo.MgrpoLlamaForCausalLM"
  config = config_from_hf_dict(hf, "config.json")
  assert config.smeared_keys
  loaded = model_from_hf_tensors(config, tensors, "memory")
  ids = _random_ids(5, (2, 9))
  np.testing.assert_allclose(forward(loaded, ids), forward(smeared, ids), atol=1e-6, rtol=0)
  del tensors["model.layers.0.self_attn.key_smear"]
  with pytest.raises(WeightFileError, match="key_smear"):
    model_from_hf_tensors(config, tensors, "memory")


def test_weight_one_is_the_plain_model():
  """a = sigmoid(30) ~ 1 keeps every key as it is: the logits of the same seeded model
  without smeared keys (the smear parameter takes no random draws)."""
  plain = init_model(get_config("tiny"), seed=0)
  ids = _random_ids(0, (2, 9))
  np.testing.assert_allclose(forward(_smeared_model([30.0] * 4), ids), forward(plain, ids),
                             atol=1e-5, rtol=0)
  assert not np.allclose(forward(_smeared_model([0.0] * 4), ids), forward(plain, ids),
                         atol=1e-3)


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
