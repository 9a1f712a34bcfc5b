"""Building blocks of a Llama-family decoder: Dense, RMSNorm, RoPE, GQA attention, SwiGLU.

Every parameter carries logical axis names (metadata `out_sharding`, eager sharding
off); `sharding.py` maps them to mesh axes. A projection that `ModelConfig.lora`
targets also holds a low-rank adapter (`lora_a`, `lora_b`: `nnx.LoRAParam`). Shapes use B batch, T query length, S key
length, D hidden, N query heads, K kv heads, G = N/K, H head dim, F MLP width.

RoPE follows the Hugging Face "rotate_half" convention: the head vector is split
into halves (x1, x2) and rotated as (x1 cos - x2 sin, x2 cos + x1 sin). llama.cpp's
GGUF files store q/k rows permuted for the interleaved-pair convention; the GGUF
loader un-permutes them so that this one convention serves every weight source.

Attention is `jax.nn.dot_product_attention` (XLA or cuDNN flash attention) or, on a
TPU, the Pallas splash-attention kernel; `ModelConfig.attention` picks one
(`attention_implementation`). Splash attention serves the full-sequence calls (T == S:
the trainer's forward and backward passes); calls over a KV cache run through XLA.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental.pallas.ops.tpu import splash_attention as splash
from jax.sharding import PartitionSpec

from mgrpo_jax.models.config import LoraConfig, ModelConfig, RopeScaling
from mgrpo_jax.models.sharding import ACTIVATION_RULES, logical_to_mesh_spec

# Splash attention tiles the sequence in blocks of a multiple of this many tokens.
SPLASH_BLOCK = 128
# Run the splash kernel in the Pallas interpreter (any backend) instead of lowering it
# for the TPU. Tests set it; production code never does.
_SPLASH_INTERPRET = False


def logical_param(rngs: nnx.Rngs, init: Any, shape: Sequence[int], dtype: Any,
           axes: tuple[str | None, ...]) -> nnx.Param:
  return nnx.Param(init(rngs.params(), tuple(shape), dtype), out_sharding=axes,
                   eager_sharding=False)


@jax.custom_vjp
def project(x: jax.Array, kernel: jax.Array) -> jax.Array:
  """x @ kernel: [..., in] x [in, out] -> [..., out], with the weight gradient computed
  as [out, in] and transposed.

  The values are autodiff's to the bit (the same dots, each summing in the same order);
  what changes is the layout XLA:CPU gives the dots' operands. Left to autodiff, the
  weight gradient dot(x^T, g) takes g ([..., out], e.g. the SwiGLU gate's gradient)
  with its contracting dimension minor, so the elementwise fusion that produces g writes
  it transposed, reading its inputs at a stride: a quarter of SmolLM2-135M's CPU update
  (docs/BENCHMARKS.md, "Policy update"). Computed as dot(g^T, x) -> [out, in], the
  transposed operand is x, shared by the projections that read it, and the [out, in]
  result is transposed once.
  """
  return jnp.dot(x, kernel)


def _project_fwd(x: jax.Array, kernel: jax.Array):
  return jnp.dot(x, kernel), (x, kernel)


def _project_bwd(residuals, g: jax.Array):
  x, kernel = residuals
  dx = jax.lax.dot_general(g, kernel, (((g.ndim - 1,), (1,)), ((), ())))  # [..., in]
  dkernel_t = jax.lax.dot_general(g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1]),
                                  (((0,), (0,)), ((), ())))  # [out, in]
  return dx, dkernel_t.T


project.defvjp(_project_fwd, _project_bwd)


class Dense(nnx.Module):
  """y = x @ kernel (+ bias) (+ scale * (x @ lora_a) @ lora_b); kernel [in, out] with
  logical axes `axes`.

  With `lora` (rank r, `lora_scale` = alpha / r) the layer holds an adapter: lora_a [in,
  r] drawn as PEFT draws it (uniform in +-1/sqrt(in)) and lora_b [r, out] of zeros (so
  the adapted layer starts as the base), both float32 `nnx.LoRAParam`s with axes
  (axes[0], None) / (None, axes[1]).
  """

  def __init__(self, in_features: int, out_features: int, *, axes: tuple[str, str],
               use_bias: bool = False, dtype: Any = jnp.float32,
               param_dtype: Any = jnp.float32, lora: LoraConfig | None = None,
               rngs: nnx.Rngs):
    self.dtype = dtype
    self.kernel = logical_param(rngs, nnx.initializers.lecun_normal(), (in_features, out_features),
                         param_dtype, axes)
    self.bias = (logical_param(rngs, nnx.initializers.zeros_init(), (out_features,), param_dtype,
                        (axes[1],)) if use_bias else None)
    self.lora_scale = lora.scale if lora is not None else 1.0
    self.lora_a = (nnx.LoRAParam(lora_a_init(rngs.params(), (in_features, lora.rank)),
                                 out_sharding=(axes[0], None), eager_sharding=False)
                   if lora is not None else None)
    self.lora_b = (nnx.LoRAParam(jnp.zeros((lora.rank, out_features), jnp.float32),
                                 out_sharding=(None, axes[1]), eager_sharding=False)
                   if lora is not None else None)

  def __call__(self, x: jax.Array) -> jax.Array:
    x = x.astype(self.dtype)
    y = project(x, self.kernel[...].astype(self.dtype))
    if self.bias is not None:
      y = y + self.bias[...].astype(self.dtype)
    if self.lora_a is not None:
      low = jnp.dot(x, self.lora_a[...].astype(self.dtype))
      y = y + self.lora_scale * jnp.dot(low, self.lora_b[...].astype(self.dtype))
    return y


def lora_a_init(key: jax.Array, shape: Sequence[int]) -> jax.Array:
  """An adapter's A [..., in, r] as PEFT draws it: uniform in +-1/sqrt(in), float32."""
  bound = 1.0 / np.sqrt(shape[-2])
  return jax.random.uniform(key, tuple(shape), jnp.float32, -bound, bound)


def projection_lora(config: ModelConfig, projection: str) -> LoraConfig | None:
  """`Dense`'s `lora` for the projection `projection` of `config` (None: no adapter)."""
  lora = config.lora
  return lora if lora is not None and lora.adapts(projection) else None


class RMSNorm(nnx.Module):
  """x / sqrt(mean(x^2) + eps) * scale, computed in float32, returned in `dtype`."""

  def __init__(self, dim: int, *, eps: float, dtype: Any = jnp.float32,
               param_dtype: Any = jnp.float32, rngs: nnx.Rngs):
    del rngs
    self.eps = eps
    self.dtype = dtype
    self.scale = nnx.Param(jnp.ones((dim,), param_dtype), out_sharding=("norm",),
                           eager_sharding=False)

  def __call__(self, x: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (y * self.scale[...].astype(jnp.float32)).astype(self.dtype)


def rope_inverse_frequencies(head_dim: int, theta: float,
                             scaling: RopeScaling | None = None) -> np.ndarray:
  """inv_freq [H/2] = theta^(-2i/H), optionally with Llama-3 frequency scaling."""
  inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
  if scaling is None:
    return inv_freq.astype(np.float32)
  low_wavelen = scaling.original_max_position_embeddings / scaling.low_freq_factor
  high_wavelen = scaling.original_max_position_embeddings / scaling.high_freq_factor
  wavelen = 2 * np.pi / inv_freq
  smooth = ((scaling.original_max_position_embeddings / wavelen - scaling.low_freq_factor)
            / (scaling.high_freq_factor - scaling.low_freq_factor))
  blended = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
  scaled = np.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
  medium = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
  return np.where(medium, blended, scaled).astype(np.float32)


def rope_angles(positions: jax.Array, inv_freq: np.ndarray) -> tuple[jax.Array, jax.Array]:
  """positions int [B, T] -> (cos, sin), each float32 [B, T, H/2]."""
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)
  return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """Rotates x [B, T, heads, H] by the angles cos/sin [B, T, H/2] (rotate_half style)."""
  x32 = x.astype(jnp.float32)
  x1, x2 = jnp.split(x32, 2, axis=-1)
  c, s = cos[:, :, None, :], sin[:, :, None, :]
  return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(x.dtype)


def attention_implementation(choice: str, dtype: Any, head_dim: int, query_len: int,
                             key_len: int, *, backend: str | None = None) -> str:
  """The attention kernel that `choice` selects for one call: "xla", "cudnn" or "splash".

  `backend` is the platform to decide for ("cpu", "gpu", "tpu"); by default this
  process's, whose devices and mesh are then checked too. A planner names another
  platform, and the call is decided as if a mesh were set there.

  "xla" and "cudnn" stand as chosen. "splash" serves every full-sequence call (query
  length == key length) and raises ValueError where it cannot (`_splash_unfit`); a call
  over a KV cache (a prefill into a longer cache, a decode step) runs through XLA, so
  one config serves both the trainer and the sampler. "auto" takes
    - splash on a TPU where it applies and head_dim is a multiple of 128 (the head
      sizes the kernel's own TPU tests cover);
    - cuDNN flash attention on a CUDA GPU when it applies: 16-bit activations, head_dim
      a multiple of 8 and at most 128, and query and key lengths even and longer than
      one (a decode step, T = 1, stays on XLA);
    - XLA everywhere else (CPU, decode steps).
  """
  here = backend is None
  backend = jax.default_backend() if here else backend
  if choice == "splash":
    if query_len != key_len:
      return "xla"
    reason = _splash_unfit(dtype, query_len, backend, check_devices=here)
    if reason is not None:
      raise ValueError(f"model.attention='splash': splash attention {reason}")
    return "splash"
  if choice != "auto":
    return choice
  if backend == "tpu":
    splash_ok = (query_len == key_len and head_dim % 128 == 0
                 and _splash_unfit(dtype, query_len, backend, check_devices=here) is None)
    return "splash" if splash_ok else "xla"
  cudnn_ok = (backend == "gpu" and jnp.dtype(dtype).itemsize == 2
              and head_dim % 8 == 0 and head_dim <= 128 and query_len > 1
              and query_len % 2 == 0 and key_len % 2 == 0)
  return "cudnn" if cudnn_ok else "xla"


def _splash_unfit(dtype: Any, length: int, backend: str, *,
                  check_devices: bool = True) -> str | None:
  """Why splash attention cannot serve a self-attention call over `length` tokens on
  `backend`, or None when it can (`check_devices`: also this process's devices)."""
  if backend != "tpu" and not _SPLASH_INTERPRET:
    return f"runs on TPUs only, this is a {backend} backend"
  if jnp.dtype(dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
    return f"needs float32 or bfloat16 activations, got {jnp.dtype(dtype).name}"
  if length % SPLASH_BLOCK:
    return (f"needs a sequence length that is a multiple of {SPLASH_BLOCK} (its block "
            f"size), got {length}")
  if check_devices and jax.sharding.get_abstract_mesh().empty and jax.device_count() > 1:
    return (f"on {jax.device_count()} devices needs the device mesh set with "
            "`jax.set_mesh` (the kernel runs per shard, under `jax.shard_map`)")
  return None


def grouped_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                      implementation: str) -> jax.Array:
  """Grouped-query attention: `jax.nn.dot_product_attention` or splash attention.

  Args:
    q: [B, T, N, H] queries (RoPE applied).
    k: [B, S, K, H] keys (RoPE applied).
    v: [B, S, K, H] values.
    mask: bool [B or 1, T, S], True where query t may attend to key s. A query with no
      valid key (a left-padding slot) gets a uniform distribution, not NaN. Splash
      attention (T == S) reads the mask as the model builds it, causal AND key-is-real:
      the kernel gets a causal mask and the key validity (the last query row) as
      segment ids, so a padding query attends to the padding keys up to it instead.
    implementation: "auto", "xla", "cudnn" or "splash" (`attention_implementation`).

  Returns:
    [B, T, N * H], softmax computed in float32.
  """
  b, t, n, h = q.shape
  chosen = attention_implementation(implementation, q.dtype, h, t, k.shape[1])
  if chosen == "splash":
    out = _splash_attention(q, k, v, jnp.broadcast_to(mask[:, -1, :], (b, t)))
  else:
    out = jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], implementation=chosen)
  return out.reshape(b, t, n * h)


def _splash_attention(q: jax.Array, k: jax.Array, v: jax.Array,
                      key_valid: jax.Array) -> jax.Array:
  """Causal splash attention, per shard of the mesh set with `jax.set_mesh` if any.

  Rows shard over the mesh's batch axes and heads over `tensor` (when N and K both
  divide by its size, so each shard keeps whole groups), as `ACTIVATION_RULES` say.

  Args:
    q: [B, T, N, H] queries; k, v: [B, T, K, H]; key_valid: bool [B, T].

  Returns:
    [B, T, N, H].
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return _splash_local(q, k, v, key_valid)
  batch = logical_to_mesh_spec(("batch",), q.shape[:1], ACTIVATION_RULES, mesh)[0]
  q_heads = logical_to_mesh_spec(("act_heads",), q.shape[2:3], ACTIVATION_RULES, mesh)[0]
  kv_heads = logical_to_mesh_spec(("act_kv",), k.shape[2:3], ACTIVATION_RULES, mesh)[0]
  heads = q_heads if q_heads == kv_heads else None
  qkv = PartitionSpec(batch, None, heads, None)
  # check_vma off: the kernel's output shapes declare no mesh axes they vary over.
  return jax.shard_map(_splash_local, mesh=mesh, in_specs=(qkv, qkv, qkv, PartitionSpec(batch)),
                       out_specs=qkv, check_vma=False)(q, k, v, key_valid)


def _splash_local(q: jax.Array, k: jax.Array, v: jax.Array,
                  key_valid: jax.Array) -> jax.Array:
  """Causal splash attention on one device: q [B, T, N, H], k/v [B, T, K, H], key_valid
  bool [B, T] -> [B, T, N, H].

  Real tokens form segment 1 and padding segment 0, so a real query sees exactly the
  real keys up to it. Query head n reads kv head n // (N / K), as in
  `jax.nn.dot_product_attention`. q is scaled by 1/sqrt(H) (the kernel does not scale).
  """
  _, t, n, h = q.shape
  block = next(size for size in (512, 256, SPLASH_BLOCK) if t % size == 0)
  kernel = splash.make_splash_mha(
      splash.MultiHeadMask([splash.CausalMask((t, t))] * n),
      block_sizes=splash.BlockSizes(
          block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
          block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block),
      head_shards=1, q_seq_shards=1, interpret=_SPLASH_INTERPRET)
  segments = key_valid.astype(jnp.int32)
  scaled = (q.astype(jnp.float32) * (1.0 / np.sqrt(h))).astype(q.dtype)

  def one_row(q1, k1, v1, segments1):  # [N, T, H], [K, T, H], [K, T, H], [T]
    return kernel(q1, k1, v1, segment_ids=splash.SegmentIds(q=segments1, kv=segments1))

  heads_first = (0, 2, 1, 3)
  out = jax.vmap(one_row)(scaled.transpose(heads_first), k.transpose(heads_first),
                          v.transpose(heads_first), segments)
  return out.transpose(heads_first)


class KVSlots:
  """Where a block reads and writes its keys/values in a stacked KV cache.

  Attributes:
    k, v: [L, B, S, K, H] caches of all layers.
    write_index: int32 scalar, first slot written by this call.
  """

  def __init__(self, k: jax.Array, v: jax.Array, write_index: jax.Array):
    self.k, self.v, self.write_index = k, v, write_index

  def store(self, layer: int | jax.Array, k_new: jax.Array,
            v_new: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Writes k_new/v_new [B, T, K, H] for `layer`; returns that layer's [B, S, K, H]."""
    start = (layer, 0, self.write_index, 0, 0)
    self.k = jax.lax.dynamic_update_slice(self.k, k_new[None].astype(self.k.dtype), start)
    self.v = jax.lax.dynamic_update_slice(self.v, v_new[None].astype(self.v.dtype), start)
    k_layer = jax.lax.dynamic_index_in_dim(self.k, layer, axis=0, keepdims=False)
    v_layer = jax.lax.dynamic_index_in_dim(self.v, layer, axis=0, keepdims=False)
    return k_layer, v_layer


def smear_keys(k: jax.Array, key_valid: jax.Array, weight_logit: jax.Array,
               inv_freq: np.ndarray) -> jax.Array:
  """Smeared keys: k'_s = a k_s + (1 - a) k_{s-1}, per kv head (Olsson et al. 2022).

  The mix happens before RoPE: k'_s is rotated to slot s's position. Since `k` is
  already rotated, the previous slot's key is rotated on by one position (positions of
  consecutive real tokens differ by 1), which is the same as mixing the raw keys and
  rotating the result. A slot whose previous slot is not a real token of the same row
  (the first token, the first after left padding) keeps a k_s.

  Args:
    k: [B, S, K, H] keys, RoPE applied.
    key_valid: bool [B, S], True at slots holding real tokens.
    weight_logit: [K] logits of a = sigmoid(logit), the weight of the current key.
    inv_freq: [H/2] RoPE inverse frequencies (`rope_inverse_frequencies`).

  Returns:
    [B, S, K, H] smeared keys, in k's dtype.
  """
  k32 = k.astype(jnp.float32)
  prev = jnp.pad(k32, ((0, 0), (1, 0), (0, 0), (0, 0)))[:, :-1]
  prev_valid = jnp.pad(key_valid, ((0, 0), (1, 0)))[:, :-1] & key_valid
  step = inv_freq.astype(np.float32)[None, None, :]  # [1, 1, H/2]: one position's angles
  prev = apply_rope(prev, np.cos(step), np.sin(step)) * prev_valid[:, :, None, None]
  a = jax.nn.sigmoid(weight_logit.astype(jnp.float32))[None, None, :, None]
  return (a * k32 + (1.0 - a) * prev).astype(k.dtype)


class Attention(nnx.Module):
  """Multi-head attention: grouped kv heads, RoPE, optional q/k/v bias, per-head q/k
  RMSNorm (Qwen3) and smeared keys."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    c = config
    self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
    kw = dict(dtype=c.dtype, param_dtype=c.param_dtype, rngs=rngs)
    self.q_proj = Dense(c.hidden_size, c.num_heads * c.head_dim, axes=("embed", "heads"),
                        use_bias=c.qkv_bias, **kw, lora=projection_lora(c, "q_proj"))
    self.k_proj = Dense(c.hidden_size, c.num_kv_heads * c.head_dim, axes=("embed", "kv"),
                        use_bias=c.qkv_bias, **kw, lora=projection_lora(c, "k_proj"))
    self.v_proj = Dense(c.hidden_size, c.num_kv_heads * c.head_dim, axes=("embed", "kv"),
                        use_bias=c.qkv_bias, **kw, lora=projection_lora(c, "v_proj"))
    self.o_proj = Dense(c.num_heads * c.head_dim, c.hidden_size, axes=("heads", "embed"), **kw,
                        lora=projection_lora(c, "o_proj"))
    norm_kw = dict(eps=c.rms_norm_eps, dtype=c.dtype, param_dtype=c.param_dtype, rngs=rngs)
    self.q_norm = RMSNorm(c.head_dim, **norm_kw) if c.qk_norm else None
    self.k_norm = RMSNorm(c.head_dim, **norm_kw) if c.qk_norm else None
    self.key_smear = (nnx.Param(jnp.zeros((c.num_kv_heads,), c.param_dtype),
                                out_sharding=(None,), eager_sharding=False)
                      if c.smeared_keys else None)
    self.rope = (c.head_dim, c.rope_theta, c.rope_scaling)
    self.implementation = c.attention

  def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
               slots: KVSlots | None = None, layer: int | jax.Array = 0) -> jax.Array:
    """x [B, T, D] -> [B, T, D]; with `slots`, k/v go through the cache of `layer`.

    The last query row of `mask` [B, T, S] sees every real key up to it (causal), so it
    is the key-validity mask that smeared keys need, in both the full and cached paths.
    """
    b, t, _ = x.shape
    q = self.q_proj(x).reshape(b, t, self.num_heads, self.head_dim)
    k = self.k_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
    v = self.v_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim)
    if self.q_norm is not None:
      q, k = self.q_norm(q), self.k_norm(k)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    if slots is not None:
      k, v = slots.store(layer, k, v)
    if self.key_smear is not None:
      k = smear_keys(k, mask[:, -1, :], self.key_smear[...],
                     rope_inverse_frequencies(*self.rope))
    return self.o_proj(grouped_attention(q, k.astype(q.dtype), v.astype(q.dtype), mask,
                                         self.implementation))


class SwiGLU(nnx.Module):
  """down(silu(gate(x)) * up(x))."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    c = config
    kw = dict(dtype=c.dtype, param_dtype=c.param_dtype, rngs=rngs)
    self.gate_proj = Dense(c.hidden_size, c.intermediate_size, axes=("embed", "mlp"), **kw,
                           lora=projection_lora(c, "gate_proj"))
    self.up_proj = Dense(c.hidden_size, c.intermediate_size, axes=("embed", "mlp"), **kw,
                         lora=projection_lora(c, "up_proj"))
    self.down_proj = Dense(c.intermediate_size, c.hidden_size, axes=("mlp", "embed"), **kw,
                           lora=projection_lora(c, "down_proj"))

  def __call__(self, x: jax.Array) -> jax.Array:
    return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nnx.Module):
  """Pre-norm decoder block: x + attn(norm(x)), then + mlp(norm(x))."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    c = config
    kw = dict(eps=c.rms_norm_eps, dtype=c.dtype, param_dtype=c.param_dtype, rngs=rngs)
    self.attn_norm = RMSNorm(c.hidden_size, **kw)
    self.attn = Attention(c, rngs=rngs)
    self.mlp_norm = RMSNorm(c.hidden_size, **kw)
    self.mlp = SwiGLU(c, rngs=rngs)

  def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
               slots: KVSlots | None = None, layer: int | jax.Array = 0) -> jax.Array:
    x = x + self.attn(self.attn_norm(x), cos, sin, mask, slots, layer)
    return x + self.mlp(self.mlp_norm(x))
