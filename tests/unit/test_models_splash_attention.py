"""Splash attention (Pallas, TPU) run in the Pallas interpreter on the CPU: the same
outputs and gradients as XLA's `jax.nn.dot_product_attention` at every real query of
left-padded rows, alone, sharded over a mesh and inside the model; and which kernel
`attention_implementation` picks."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.models import get_config, init_model, layers
from mgrpo_jax.models.sharding import make_mesh

B, N, K = 2, 4, 2


@pytest.fixture
def interpret(monkeypatch):
  """The splash kernel runs in the Pallas interpreter (it is lowered for TPUs only)."""
  monkeypatch.setattr(layers, "_SPLASH_INTERPRET", True)


def _mesh_context(shape, monkeypatch):
  """No mesh on one device (shape None), else the mesh of that (data, fsdp, tensor) shape."""
  if shape is None:
    monkeypatch.setattr(jax, "device_count", lambda: 1)
    return contextlib.nullcontext()
  size = int(np.prod(shape))
  return jax.set_mesh(make_mesh(shape, jax.devices()[:size]))


def _left_padded(t: int, h: int, pads: list[int], dtype=np.float32, seed: int = 0):
  """q [B, T, N, H], k/v [B, T, K, H], the model's mask (causal AND key is real) [B, T, T]
  and the real-token flags [B, T] of rows left-padded by `pads` slots."""
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, t, N, h)).astype(dtype)
  k, v = (rng.normal(size=(B, t, K, h)).astype(dtype) for _ in range(2))
  real = np.arange(t)[None, :] >= np.asarray(pads)[:, None]
  mask = np.tril(np.ones((t, t), bool))[None] & real[:, None, :]
  return q, k, v, mask, real


def _attend(implementation: str):
  return jax.jit(lambda q, k, v, mask: layers.grouped_attention(q, k, v, mask, implementation))


# (T, H, left padding of each row, mesh shape; None: no mesh, one device): padding that
# is absent, ends inside the first block or a later one, or fills all but the last token.
CASES = [
    (128, 64, [0, 37], None),
    (256, 128, [130, 5], None),
    (256, 64, [0, 255], (2, 1, 2)),   # rows over `data`, heads over `tensor`
    (128, 128, [11, 64], (1, 2, 1)),  # rows over `fsdp`
    (128, 64, [100, 0], (1, 1, 4)),   # heads replicated: 4 divides N but not K
]


@pytest.mark.parametrize("t,h,pads,mesh_shape", CASES)
def test_splash_equals_xla_at_real_queries(t, h, pads, mesh_shape, interpret, monkeypatch):
  q, k, v, mask, real = _left_padded(t, h, pads)
  want = np.asarray(_attend("xla")(q, k, v, mask))
  with _mesh_context(mesh_shape, monkeypatch):
    got = np.asarray(_attend("splash")(q, k, v, mask))
  assert got.shape == (B, t, N * h)
  np.testing.assert_allclose(got[real], want[real], atol=1e-5, rtol=0)
  assert np.isfinite(got[~real]).all()


def test_splash_bfloat16_is_xla_up_to_rounding(interpret, monkeypatch):
  q, k, v, mask, real = _left_padded(256, 128, [3, 200], dtype=jnp.bfloat16)
  want = np.asarray(_attend("xla")(q, k, v, mask), np.float32)
  with _mesh_context(None, monkeypatch):
    got = np.asarray(_attend("splash")(q, k, v, mask), np.float32)
  np.testing.assert_allclose(got[real], want[real], atol=3e-2, rtol=0)


@pytest.mark.parametrize("mesh_shape", [None, (2, 1, 2)])
def test_splash_gradients_equal_xla(mesh_shape, interpret, monkeypatch):
  """d/d(q, k, v) of a loss over the real queries only (the padding queries' outputs
  differ between the kernels and are never used)."""
  q, k, v, mask, real = _left_padded(256, 64, [0, 150], seed=1)
  weights = np.random.default_rng(2).normal(size=(B, 256, N * 64)).astype(np.float32)
  weights *= real[:, :, None]

  def grads(implementation):
    def loss(q, k, v):
      return jnp.sum(layers.grouped_attention(q, k, v, mask, implementation) * weights)

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)

  want = grads("xla")
  with _mesh_context(mesh_shape, monkeypatch):
    got = grads("splash")
  for g, w in zip(got, want, strict=True):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5, rtol=0)


@pytest.mark.parametrize("padded", [False, True])
def test_model_logits_with_splash_equal_xla(padded, interpret, monkeypatch):
  """The model's own mask: causal only ([1, T, T]) or causal AND its attention_mask."""
  config = get_config("tiny", head_dim=32, max_seq_len=128)
  tokens = np.random.default_rng(3).integers(0, 256, (B, 128)).astype(np.int32)
  attention_mask = (np.arange(128)[None, :] >= np.array([[0], [90]])).astype(np.int32)
  real = attention_mask != 0 if padded else np.ones((B, 128), bool)

  def logits(attention):
    model = init_model(config.replace(attention=attention), seed=0)
    return np.asarray(model(tokens, attention_mask if padded else None))

  want = logits("xla")
  with _mesh_context(None, monkeypatch):
    got = logits("splash")
  np.testing.assert_allclose(got[real], want[real], atol=5e-5, rtol=0)


def test_auto_takes_splash_on_a_tpu_only_where_it_applies(monkeypatch):
  pick = layers.attention_implementation
  assert pick("auto", jnp.bfloat16, 128, 256, 256) == "xla"  # this test runs on a CPU
  monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
  assert pick("auto", jnp.bfloat16, 128, 256, 256) == "xla"  # 8 devices and no mesh
  with jax.set_mesh(make_mesh((2, 2, 2))):
    assert pick("auto", jnp.bfloat16, 128, 256, 256) == "splash"
  monkeypatch.setattr(jax, "device_count", lambda: 1)
  assert pick("auto", jnp.bfloat16, 128, 256, 256) == "splash"
  assert pick("auto", jnp.float32, 256, 1024, 1024) == "splash"
  assert pick("auto", jnp.bfloat16, 128, 1, 300) == "xla"    # a decode step
  assert pick("auto", jnp.bfloat16, 128, 128, 384) == "xla"  # a prefill into a longer cache
  assert pick("auto", jnp.bfloat16, 128, 200, 200) == "xla"  # not whole blocks
  assert pick("auto", jnp.bfloat16, 64, 256, 256) == "xla"   # head_dim not a multiple of 128
  assert pick("auto", jnp.float16, 128, 256, 256) == "xla"


def test_explicit_splash_serves_full_sequences_and_leaves_caches_to_xla(interpret,
                                                                        monkeypatch):
  pick = layers.attention_implementation
  monkeypatch.setattr(jax, "device_count", lambda: 1)
  assert pick("splash", jnp.float32, 64, 256, 256) == "splash"
  assert pick("splash", jnp.bfloat16, 64, 1, 300) == "xla"      # a decode step
  assert pick("splash", jnp.bfloat16, 64, 128, 384) == "xla"    # a prefill into a cache


def test_explicit_splash_refuses_other_backends():
  with pytest.raises(ValueError, match=r"model\.attention='splash': splash attention runs "
                     r"on TPUs only, this is a cpu backend"):
    layers.attention_implementation("splash", jnp.float32, 128, 256, 256)


@pytest.mark.parametrize("dtype,length,devices,reason", [
    (jnp.float32, 200, 1, r"needs a sequence length that is a multiple of 128 .*got 200"),
    (jnp.float16, 256, 1, r"needs float32 or bfloat16 activations, got float16"),
    (jnp.float32, 256, 8, r"on 8 devices needs the device mesh set with `jax\.set_mesh`"),
])
def test_explicit_splash_refuses_what_it_cannot_run(dtype, length, devices, reason,
                                                    monkeypatch):
  monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
  monkeypatch.setattr(jax, "device_count", lambda: devices)
  with pytest.raises(ValueError, match=r"model\.attention='splash': splash attention " + reason):
    layers.attention_implementation("splash", dtype, 64, length, length)


def test_splash_is_a_model_attention_choice():
  assert get_config("tiny", attention="splash").attention == "splash"
