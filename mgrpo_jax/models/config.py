"""Configuration of a Llama-family decoder (Llama 2/3, SmolLM2, Qwen2/2.5) and its presets.

A `ModelConfig` fixes every shape of the network, the RoPE variant, the numerics
(`dtype` for activations, `param_dtype` for storage) and the logical-to-mesh sharding
rules. Presets:
  - `tiny`: a few hundred thousand parameters, for unit tests;
  - `small`: twice `tiny`'s width (about 0.5M parameters with a 1k vocabulary), for CPU
    demos that must learn in minutes;
  - `smollm2_135m`: HuggingFaceTB/SmolLM2-135M(-Instruct), loadable from GGUF;
  - `qwen2_5_0_5b`, `qwen2_5_7b`, `llama3_2_1b`: the published shapes (for shape,
    memory and sharding planning; load their weights with the safetensors loader).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

# Values of `ModelConfig.attention`: the kernels of `jax.nn.dot_product_attention` (xla,
# cudnn) and Pallas splash attention (splash, TPU); see `layers.attention_implementation`.
ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "cudnn", "splash")

# Logical axis names carried by the parameters (see `sharding.py`).
LogicalRules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

DEFAULT_RULES: LogicalRules = (
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", "tensor"),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
    ("norm", None),
    ("layers", None),
)


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """Llama-3 style frequency-dependent RoPE scaling (HF `rope_type="llama3"`)."""

  factor: float
  low_freq_factor: float
  high_freq_factor: float
  original_max_position_embeddings: int


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Shapes and numerics of a Llama-family decoder.

  Attributes:
    vocab_size: V, rows of the embedding table.
    hidden_size: D, width of the residual stream.
    num_layers: L, number of decoder blocks.
    num_heads: N, query heads.
    num_kv_heads: K, key/value heads (grouped-query attention; N % K == 0).
    head_dim: H, width of one head.
    intermediate_size: F, width of the SwiGLU hidden layer.
    rope_theta: RoPE base frequency.
    rms_norm_eps: epsilon of RMSNorm.
    tie_embeddings: the LM head reuses the embedding table.
    qkv_bias: q/k/v projections carry biases (Qwen2).
    max_seq_len: the longest context the model is meant for (bounds the KV cache).
    rope_scaling: optional Llama-3 RoPE scaling.
    scan_layers: run the blocks with one `jax.lax.scan` over stacked parameters
      (shorter compile; identical outputs).
    smeared_keys: each attention key mixes in the previous token's key, with a learned
      weight per kv head (Olsson et al. 2022, "smeared keys"): one layer can then
      implement an induction head (find the earlier occurrence of the current token,
      copy what followed it), which small models trained from scratch otherwise take
      thousands of steps to form. Off for pretrained checkpoints (they have no such
      parameter).
    attention: the attention kernel, one of `ATTENTION_IMPLEMENTATIONS`: "xla" (any
      platform), "cudnn" (cuDNN flash attention; CUDA GPUs, 16-bit dtypes), "splash"
      (Pallas splash attention; TPUs, float32 or bfloat16, for the full-sequence passes
      with a length that is a multiple of 128; calls over a KV cache use XLA), or "auto"
      (splash on a TPU, cuDNN on a GPU, each where its shape and dtype rules allow; XLA
      elsewhere; see `layers.attention_implementation`). Numerics are the same up to
      rounding.
    dtype: activation / matmul dtype.
    param_dtype: storage dtype of the parameters.
    sharding_rules: logical axis name -> mesh axis (or None: replicated).
  """

  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  intermediate_size: int
  rope_theta: float = 10000.0
  rms_norm_eps: float = 1e-5
  tie_embeddings: bool = True
  qkv_bias: bool = False
  max_seq_len: int = 2048
  rope_scaling: RopeScaling | None = None
  scan_layers: bool = False
  smeared_keys: bool = False
  attention: str = "auto"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  sharding_rules: LogicalRules = DEFAULT_RULES

  def __post_init__(self):
    for field in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                  "head_dim", "intermediate_size", "max_seq_len"):
      if getattr(self, field) <= 0:
        raise ValueError(f"ModelConfig.{field} must be positive, got {getattr(self, field)}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of "
                       f"num_kv_heads ({self.num_kv_heads})")
    if self.attention not in ATTENTION_IMPLEMENTATIONS:
      raise ValueError(f"ModelConfig.attention must be one of {ATTENTION_IMPLEMENTATIONS}, "
                       f"got {self.attention!r}")
    if self.head_dim % 2:
      raise ValueError(f"ModelConfig.head_dim must be even for RoPE, got {self.head_dim}")

  def replace(self, **changes: Any) -> ModelConfig:
    return dataclasses.replace(self, **changes)

  @property
  def num_params(self) -> int:
    """Number of parameters (counting a tied embedding once)."""
    d, h = self.hidden_size, self.head_dim
    q, kv = self.num_heads * h, self.num_kv_heads * h
    attn = d * q + 2 * d * kv + q * d + (q + 2 * kv if self.qkv_bias else 0)
    block = attn + 3 * d * self.intermediate_size + 2 * d
    head = 0 if self.tie_embeddings else d * self.vocab_size
    return self.vocab_size * d + self.num_layers * block + d + head


PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        vocab_size=256, hidden_size=64, num_layers=2, num_heads=8, num_kv_heads=4,
        head_dim=16, intermediate_size=128, rope_theta=10000.0, max_seq_len=256),
    "small": ModelConfig(
        vocab_size=1024, hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=4,
        head_dim=32, intermediate_size=384, rope_theta=10000.0, max_seq_len=1024),
    "smollm2_135m": ModelConfig(
        vocab_size=49152, hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3,
        head_dim=64, intermediate_size=1536, rope_theta=100000.0, rms_norm_eps=1e-5,
        tie_embeddings=True, max_seq_len=8192),
    "qwen2_5_0_5b": ModelConfig(
        vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
        head_dim=64, intermediate_size=4864, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_embeddings=True, qkv_bias=True, max_seq_len=32768),
    "qwen2_5_7b": ModelConfig(
        vocab_size=152064, hidden_size=3584, num_layers=28, num_heads=28, num_kv_heads=4,
        head_dim=128, intermediate_size=18944, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_embeddings=False, qkv_bias=True, max_seq_len=32768),
    "llama3_2_1b": ModelConfig(
        vocab_size=128256, hidden_size=2048, num_layers=16, num_heads=32, num_kv_heads=8,
        head_dim=64, intermediate_size=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
        tie_embeddings=True, max_seq_len=131072,
        rope_scaling=RopeScaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_position_embeddings=8192)),
}


def get_config(name: str, **overrides: Any) -> ModelConfig:
  """Returns the preset `name` with `overrides` applied (e.g. `scan_layers=True`)."""
  if name not in PRESETS:
    raise KeyError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}")
  return PRESETS[name].replace(**overrides)
