"""Configuration of a Llama-family decoder (Llama 2/3, SmolLM2, Qwen2/2.5, Qwen3) and its presets.

A `ModelConfig` fixes every shape of the network, the RoPE variant, the numerics
(`dtype` for activations, `param_dtype` for storage) and the logical-to-mesh sharding
rules. Presets:
  - `tiny`: a few hundred thousand parameters, for unit tests;
  - `small`: twice `tiny`'s width (about 0.5M parameters with a 1k vocabulary), for CPU
    demos that must learn in minutes;
  - `smollm2_135m`: HuggingFaceTB/SmolLM2-135M(-Instruct), loadable from GGUF;
  - the published shapes of the families loaded from Hugging Face folders, for the
    dry-run planner (`--config.<agent>.model.preset`); their weights come from the
    folder (`<agent>.model.preset=<folder>`, the safetensors loader):
      Qwen3 dense   `qwen3_0_6b`, `qwen3_1_7b`, `qwen3_4b`, `qwen3_8b`, `qwen3_14b`,
                    `qwen3_32b` (per-head q/k RMSNorm, head_dim 128);
      Qwen2.5       `qwen2_5_0_5b`, `qwen2_5_1_5b`, `qwen2_5_3b`, `qwen2_5_7b`,
                    `qwen2_5_14b`, `qwen2_5_32b` (q/k/v biases);
      Llama 3.x     `llama3_2_1b`, `llama3_2_3b`, `llama3_1_8b` (llama3 RoPE scaling);
      SmolLM2       `smollm2_360m`, `smollm2_1_7b`.
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


# LoRA targets: the projection each name adapts (`LoraConfig.targets`).
LORA_TARGETS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
                "gate": "gate_proj", "up": "up_proj", "down": "down_proj"}


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """Low-rank adapters on some projections (Hu et al. 2021; `models/lora.py`).

  A targeted projection y = x W becomes y = x W + (alpha / rank) (x A) B, with A [in,
  rank] and B [rank, out] the adapter (float32, trained) and W the frozen base.

  Attributes:
    rank: r, the adapters' inner width (> 0).
    alpha: the adapters' output is scaled by alpha / rank.
    targets: names among `LORA_TARGETS` (q, k, v, o, gate, up, down).
  """

  rank: int
  alpha: float
  targets: tuple[str, ...] = tuple(LORA_TARGETS)

  def __post_init__(self):
    if self.rank <= 0:
      raise ValueError(f"lora.rank must be positive, got {self.rank}")
    if self.alpha <= 0:
      raise ValueError(f"lora.alpha must be positive, got {self.alpha}")
    unknown = sorted(set(self.targets) - set(LORA_TARGETS))
    if unknown or not self.targets:
      raise ValueError(f"lora.targets must be a non-empty subset of {list(LORA_TARGETS)}, "
                       f"got {list(self.targets)}")

  @property
  def scale(self) -> float:
    return self.alpha / self.rank

  @classmethod
  def from_config(cls, lora: Any) -> LoraConfig | None:
    """From an agent's `lora` section (rank, alpha, comma-separated targets); None for
    rank 0 (full fine-tuning)."""
    if int(lora["rank"]) == 0:
      return None
    return cls(rank=int(lora["rank"]), alpha=float(lora["alpha"]),
               targets=tuple(t.strip() for t in str(lora["targets"]).split(",")))

  def adapts(self, projection: str) -> bool:
    """Whether the projection named `projection` (e.g. "q_proj") carries an adapter."""
    return any(LORA_TARGETS[t] == projection for t in self.targets)


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
    qk_norm: each query and key head is RMS-normalized over its H values, with a learned
      scale [H] shared by the heads, before RoPE (Qwen3).
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
    lora: low-rank adapters on the projections `lora.targets` (None: none); the
      adapters are `nnx.LoRAParam`s in float32, the rest of the model their frozen base.
    dtype: activation / matmul dtype.
    param_dtype: storage dtype of the parameters (with `lora`: of the base).
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
  qk_norm: bool = False
  max_seq_len: int = 2048
  rope_scaling: RopeScaling | None = None
  scan_layers: bool = False
  smeared_keys: bool = False
  attention: str = "auto"
  lora: LoraConfig | None = None
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
    block = attn + 3 * d * self.intermediate_size + 2 * d + (2 * h if self.qk_norm else 0)
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
}


def _qwen3(hidden: int, layers: int, heads: int, mlp: int, tie: bool) -> ModelConfig:
  return ModelConfig(vocab_size=151936, hidden_size=hidden, num_layers=layers,
                     num_heads=heads, num_kv_heads=8, head_dim=128, intermediate_size=mlp,
                     rope_theta=1000000.0, rms_norm_eps=1e-6, tie_embeddings=tie,
                     qk_norm=True, max_seq_len=40960)


def _qwen2_5(vocab: int, hidden: int, layers: int, heads: int, kv: int, mlp: int,
             tie: bool) -> ModelConfig:
  return ModelConfig(vocab_size=vocab, hidden_size=hidden, num_layers=layers, num_heads=heads,
                     num_kv_heads=kv, head_dim=hidden // heads, intermediate_size=mlp,
                     rope_theta=1000000.0, rms_norm_eps=1e-6, tie_embeddings=tie,
                     qkv_bias=True, max_seq_len=32768)


def _llama3(hidden: int, layers: int, heads: int, mlp: int, tie: bool,
            factor: float) -> ModelConfig:
  return ModelConfig(vocab_size=128256, hidden_size=hidden, num_layers=layers,
                     num_heads=heads, num_kv_heads=8, head_dim=hidden // heads,
                     intermediate_size=mlp, rope_theta=500000.0, rms_norm_eps=1e-5,
                     tie_embeddings=tie, max_seq_len=131072,
                     rope_scaling=RopeScaling(factor=factor, low_freq_factor=1.0,
                                              high_freq_factor=4.0,
                                              original_max_position_embeddings=8192))


def _smollm2(hidden: int, layers: int, heads: int, kv: int, mlp: int,
             theta: float) -> ModelConfig:
  return ModelConfig(vocab_size=49152, hidden_size=hidden, num_layers=layers, num_heads=heads,
                     num_kv_heads=kv, head_dim=64, intermediate_size=mlp, rope_theta=theta,
                     rms_norm_eps=1e-5, tie_embeddings=True, max_seq_len=8192)


# The published shapes (each model's config.json), for the planner and the presets.
PRESETS.update({
    "smollm2_360m": _smollm2(960, 32, 15, 5, 2560, 100000.0),
    "smollm2_1_7b": _smollm2(2048, 24, 32, 32, 8192, 130000.0),
    "qwen3_0_6b": _qwen3(1024, 28, 16, 3072, tie=True),
    "qwen3_1_7b": _qwen3(2048, 28, 16, 6144, tie=True),
    "qwen3_4b": _qwen3(2560, 36, 32, 9728, tie=True),
    "qwen3_8b": _qwen3(4096, 36, 32, 12288, tie=False),
    "qwen3_14b": _qwen3(5120, 40, 40, 17408, tie=False),
    "qwen3_32b": _qwen3(5120, 64, 64, 25600, tie=False),
    "qwen2_5_0_5b": _qwen2_5(151936, 896, 24, 14, 2, 4864, tie=True),
    "qwen2_5_1_5b": _qwen2_5(151936, 1536, 28, 12, 2, 8960, tie=True),
    "qwen2_5_3b": _qwen2_5(151936, 2048, 36, 16, 2, 11008, tie=True),
    "qwen2_5_7b": _qwen2_5(152064, 3584, 28, 28, 4, 18944, tie=False),
    "qwen2_5_14b": _qwen2_5(152064, 5120, 48, 40, 8, 13824, tie=False),
    "qwen2_5_32b": _qwen2_5(152064, 5120, 64, 40, 8, 27648, tie=False),
    "llama3_2_1b": _llama3(2048, 16, 32, 8192, tie=True, factor=32.0),
    "llama3_2_3b": _llama3(3072, 28, 24, 8192, tie=True, factor=32.0),
    "llama3_1_8b": _llama3(4096, 32, 32, 14336, tie=False, factor=8.0),
})


def get_config(name: str, **overrides: Any) -> ModelConfig:
  """Returns the preset `name` with `overrides` applied (e.g. `scan_layers=True`)."""
  if name not in PRESETS:
    raise KeyError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}")
  return PRESETS[name].replace(**overrides)
