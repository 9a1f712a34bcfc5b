"""Attention through `jax.nn.dot_product_attention`: the same numbers as the explicit
grouped-query einsum it replaced, with left padding, the KV cache and smeared keys."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import get_config, init_cache, init_model, layers
from mgrpo_jax.models.kv_cache import cache_positions_and_mask


def einsum_attention(q, k, v, mask, implementation):
  """The explicit formulation: q [B, T, N, H], k/v [B, S, K, H], mask [B, T, S]."""
  del implementation
  b, t, n, h = q.shape
  kv_heads = k.shape[2]
  q = q.reshape(b, t, kv_heads, n // kv_heads, h)
  scores = jnp.einsum("btkgh,bskh->bkgts", q, k, preferred_element_type=jnp.float32)
  scores = scores * (1.0 / np.sqrt(h)) + jnp.where(mask, 0.0, -1e30)[:, None, None]
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  return jnp.einsum("bkgts,bskh->btkgh", probs, v).reshape(b, t, n * h)


def _left_padded_cache(lengths: list[int], prompt_len: int, capacity: int):
  start = np.array([prompt_len - n for n in lengths], np.int32)
  return init_cache(get_config("tiny"), len(lengths), capacity, start)


@pytest.mark.parametrize("num_new,index", [(6, 0), (1, 6), (1, 9)])
def test_grouped_attention_equals_einsum(num_new, index):
  """Prefill (6 queries) and decode steps (1 query) of left-padded rows (lengths 3, 6, 1),
  8 query heads over 4 kv heads; padding queries (no valid key) included."""
  rng = np.random.default_rng(0)
  cache = _left_padded_cache([3, 6, 1], 6, 12)
  cache = dataclasses.replace(cache, index=jnp.int32(index))
  _, mask = cache_positions_and_mask(cache, num_new)
  q = rng.normal(size=(3, num_new, 8, 16)).astype(np.float32)
  k, v = (rng.normal(size=(3, 12, 4, 16)).astype(np.float32) for _ in range(2))
  got = jax.jit(layers.grouped_attention, static_argnums=4)(q, k, v, mask, "xla")
  want = einsum_attention(q, k, v, mask, "xla")
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("smeared", [False, True])
def test_model_prefill_and_decode_equal_the_einsum_attention(smeared, monkeypatch):
  """Logits of a left-padded prefill and 4 decode steps, new attention vs einsum."""
  model = init_model(get_config("tiny", smeared_keys=smeared), seed=0)
  if smeared:
    for layer in model.layers:
      layer.attn.key_smear[...] = np.asarray([-1.5, 0.0, 0.7, 2.0], np.float32)
  rng = np.random.default_rng(1)
  prompt = rng.integers(0, 256, (3, 6)).astype(np.int32)
  steps = rng.integers(0, 256, (4, 3, 1)).astype(np.int32)

  def run():  # a fresh jit per run: it traces whichever attention is installed
    step = nnx.jit(lambda m, x, c: m.forward_cached(x, c))
    cache = _left_padded_cache([3, 6, 1], 6, 10)
    outs = []
    for ids in [prompt, *steps]:
      logits, cache = step(model, ids, cache)
      outs.append(np.asarray(logits))
    return np.concatenate(outs, axis=1)

  new = run()
  monkeypatch.setattr(layers, "grouped_attention", einsum_attention)
  old = run()
  np.testing.assert_allclose(new, old, atol=1e-5, rtol=0)


def test_auto_takes_xla_on_cpu_and_cudnn_only_where_it_applies(monkeypatch):
  pick = layers.attention_implementation
  assert pick("auto", jnp.bfloat16, 64, 128, 128) == "xla"  # this test runs on a CPU
  assert pick("cudnn", jnp.float32, 64, 1, 9) == "cudnn"     # an explicit choice stands
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert pick("auto", jnp.bfloat16, 64, 128, 128) == "cudnn"
  assert pick("auto", jnp.float32, 64, 128, 128) == "xla"
  assert pick("auto", jnp.bfloat16, 64, 1, 128) == "xla"     # a decode step
  assert pick("auto", jnp.bfloat16, 256, 128, 128) == "xla"
  assert pick("auto", jnp.bfloat16, 64, 127, 127) == "xla"


def test_unknown_attention_is_refused():
  with pytest.raises(ValueError, match=r"ModelConfig\.attention must be one of"):
    get_config("tiny", attention="flash")
