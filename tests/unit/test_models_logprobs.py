"""Token log-probs in LM-head chunks and per-block rematerialization: the same values and
gradients as the full logits without rematerialization, and less memory."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_jax.models import get_config, init_model, token_logprobs
from mgrpo_jax.models.transformer import REMAT_POLICIES

B, T = 3, 13  # 12 predicted positions per row: chunks of 4 divide them, 5 do not
_logprobs = nnx.jit(lambda model, ids, mask, chunk: token_logprobs(model, ids, mask, chunk=chunk),
                    static_argnums=3)


def _model(variant: str) -> nnx.Module:
  overrides = {"tied": {}, "untied": {"tie_embeddings": False},
               "smeared": {"smeared_keys": True}, "scanned": {"scan_layers": True}}[variant]
  model = init_model(get_config("tiny", **overrides), seed=0)
  if variant == "smeared":
    for layer in model.layers:
      layer.attn.key_smear[...] = np.asarray([-1.5, 0.0, 0.7, 2.0], np.float32)
  return model


@pytest.fixture(scope="module")
def tiny():
  return _model("tied")


@pytest.fixture(scope="module")
def inputs():
  """ids [B, T]; mask: row 0 left-padded, row 1 right-padded, row 2 full; weights [B, T]."""
  rng = np.random.default_rng(0)
  mask = np.ones((B, T), np.int32)
  mask[0, :4] = 0
  mask[1, -3:] = 0
  return (rng.integers(0, 256, (B, T)).astype(np.int32), mask,
          rng.standard_normal((B, T)).astype(np.float32))


@functools.partial(jax.jit, static_argnums=(0, 5, 6))
def _logprobs_and_grads(graphdef, params, ids, mask, weights, chunk, remat):
  """(log-probs [B, T] at temperature 0.7, d sum(weights * log-probs) / d params)."""

  def objective(p):
    lp = token_logprobs(nnx.merge(graphdef, p), ids, mask, 0.7, chunk=chunk, remat=remat)
    return jnp.sum(weights * lp), lp

  grads, lp = jax.grad(objective, has_aux=True)(params)
  return lp, grads


def _run(model, inputs, chunk=0, remat="none"):
  graphdef, params = nnx.split(model)
  return _logprobs_and_grads(graphdef, params, *inputs, chunk, remat)


def _assert_same(got, want):
  (lp, grads), (want_lp, want_grads) = got, want
  np.testing.assert_allclose(lp, want_lp, atol=1e-5, rtol=0)
  for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True):
    np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("variant", ["tied", "untied", "smeared", "scanned"])
@pytest.mark.parametrize("chunk", [4, 5, 64])
def test_chunked_logprobs_and_grads_equal_the_full_logits(variant, chunk, inputs):
  model = _model(variant)
  _assert_same(_run(model, inputs, chunk), _run(model, inputs))


@pytest.mark.parametrize("variant", ["tied", "smeared", "scanned"])
@pytest.mark.parametrize("remat", [r for r in REMAT_POLICIES if r != "none"])
def test_every_remat_policy_gives_the_same_logprobs_and_grads(variant, remat, inputs):
  model = _model(variant)
  _assert_same(_run(model, inputs, 5, remat), _run(model, inputs, 5))


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 3), length=st.integers(2, 20), chunk=st.integers(1, 24),
       left_pad=st.integers(0, 19), seed=st.integers(0, 2**16))
def test_chunking_never_changes_the_logprobs(tiny, rows, length, chunk, left_pad, seed):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, 256, (rows, length)).astype(np.int32)
  mask = np.ones((rows, length), np.int32)
  mask[0, :min(left_pad, length - 1)] = 0
  want = _logprobs(tiny, ids, mask, 0)
  np.testing.assert_allclose(_logprobs(tiny, ids, mask, chunk), want, atol=1e-5, rtol=0)


def test_chunked_backward_does_not_keep_the_full_logits():
  """Compiled scratch memory of the gradient: chunks of 8 save at least the logits
  [B, T - 1, V] float32 that the unchunked backward keeps."""
  model = init_model(get_config("tiny", vocab_size=8192), seed=0)
  graphdef, params = nnx.split(model)
  ids = jnp.zeros((2, 64), jnp.int32)

  def scratch_bytes(chunk):
    grad = jax.grad(lambda p: jnp.sum(token_logprobs(nnx.merge(graphdef, p), ids, chunk=chunk)))
    return jax.jit(grad).lower(params).compile().memory_analysis().temp_size_in_bytes

  assert scratch_bytes(0) - scratch_bytes(8) >= 2 * 63 * 8192 * 4


def test_bad_chunk_and_remat_are_rejected(tiny):
  ids = np.zeros((1, 4), np.int32)
  with pytest.raises(ValueError, match="chunk must be >= 0"):
    token_logprobs(tiny, ids, chunk=-1)
  with pytest.raises(ValueError, match="remat must be one of"):
    token_logprobs(tiny, ids, remat="everything")


@pytest.mark.parametrize("chunk", [0, 5])
def test_entropy_is_each_positions_distribution_and_chunks_change_nothing(tiny, chunk):
  """entropy[t] = H(softmax(logits[t - 1])), the distribution ids[t] was drawn from; 0
  where there is no context; its gradient through chunks equals the full logits'."""
  ids = np.random.default_rng(3).integers(0, 256, (2, 9)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, :3] = 0
  graphdef, params = nnx.split(tiny)

  @jax.jit
  def scores(params, ids, mask):
    return token_logprobs(nnx.merge(graphdef, params), ids, mask, chunk=chunk,
                          with_entropy=True)

  logp, entropy = scores(params, ids, mask)
  logits = np.asarray(tiny(jnp.asarray(ids), jnp.asarray(mask)), np.float64)
  log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  want = -(np.exp(log_softmax) * log_softmax).sum(-1)[:, :-1]
  valid = (mask[:, 1:] != 0) & (mask[:, :-1] != 0)
  np.testing.assert_allclose(entropy[:, 1:], np.where(valid, want, 0.0), atol=1e-5)
  assert not np.asarray(entropy[:, 0]).any() and not np.asarray(entropy[1, 1:3]).any()
  np.testing.assert_allclose(logp, _logprobs(tiny, ids, mask, chunk), atol=1e-6)
  grad = jax.jit(jax.grad(lambda p, c: jnp.sum(token_logprobs(
      nnx.merge(graphdef, p), ids, mask, chunk=c, with_entropy=True)[1]), argnums=0),
                 static_argnums=1)
  for a, b in zip(jax.tree.leaves(grad(params, chunk)), jax.tree.leaves(grad(params, 0)),
                  strict=True):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)
