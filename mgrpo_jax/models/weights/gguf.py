"""GGUF (llama.cpp) checkpoints of the Llama and Qwen2 families, e.g. SmolLM2-135M Q4_1.

Reads the architecture from the metadata (`{arch}.block_count`, ...), dequantizes every
tensor to float32 with `gguf.quants.dequantize`, renames it to the HF layout
(`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`), and checks its
shape against the config (`hf_layout.model_from_hf_tensors`, errors name the GGUF
tensor and the file).

The q/k permutation trap: for `llama` files, llama.cpp's converter reorders the rows of
every head of `attn_q` / `attn_k` so that its interleaved-pair RoPE applies. This loader
undoes it (per head: rows [0, 2, 4, ..., 1, 3, 5, ...] back to halves), so the model's
one rotate_half RoPE serves GGUF and HF weights alike. `qwen2` files are not permuted.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
from gguf.quants import dequantize

from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.transformer import Transformer
from mgrpo_jax.models.weights.hf_layout import WeightFileError, model_from_hf_tensors
from mgrpo_jax.utils.gguf_file import GGUFFile, GGUFFormatError, read_gguf

_SUPPORTED_ARCHS = ("llama", "qwen2")
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_REQUIRED = object()


def open_gguf(path: str | pathlib.Path) -> GGUFFile:
  """`path` parsed (`utils.gguf_file.read_gguf`); a missing, unparsable or truncated file
  raises `WeightFileError`."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise WeightFileError(f"{path}: GGUF file not found")
  try:
    return read_gguf(path)
  except GGUFFormatError as e:
    raise WeightFileError(f"{path}: not a readable GGUF file: {e.detail}") from e


def _field(reader: GGUFFile, key: str, source: str, default: Any = _REQUIRED) -> Any:
  value = reader.metadata.get(key)
  if value is None:
    if default is _REQUIRED:
      raise WeightFileError(f"{source}: metadata key {key!r} is missing")
    return default
  return value


def gguf_config(reader: GGUFFile, source: str, **overrides: Any) -> ModelConfig:
  """The `ModelConfig` described by the file's metadata (plus `overrides`)."""
  arch = _field(reader, "general.architecture", source)
  if arch not in _SUPPORTED_ARCHS:
    raise WeightFileError(f"{source}: architecture {arch!r} is not supported "
                          f"(supported: {_SUPPORTED_ARCHS})")
  names = {t.name for t in reader.tensors}
  if "rope_freqs.weight" in names:
    raise WeightFileError(f"{source}: tensor 'rope_freqs.weight' (scaled RoPE) is not "
                          "supported; load the Hugging Face safetensors folder instead")
  hidden = int(_field(reader, f"{arch}.embedding_length", source))
  heads = int(_field(reader, f"{arch}.attention.head_count", source))
  vocab = _field(reader, f"{arch}.vocab_size", source, None)
  if vocab is None:
    tokens = reader.metadata.get("tokenizer.ggml.tokens")
    if tokens is None:
      raise WeightFileError(f"{source}: neither '{arch}.vocab_size' nor "
                            "'tokenizer.ggml.tokens' gives the vocabulary size")
    vocab = len(tokens)
  fields = dict(
      vocab_size=int(vocab), hidden_size=hidden,
      num_layers=int(_field(reader, f"{arch}.block_count", source)), num_heads=heads,
      num_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", source, heads)),
      head_dim=int(_field(reader, f"{arch}.rope.dimension_count", source, hidden // heads)),
      intermediate_size=int(_field(reader, f"{arch}.feed_forward_length", source)),
      rope_theta=float(_field(reader, f"{arch}.rope.freq_base", source, 10000.0)),
      rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", source)),
      tie_embeddings="output.weight" not in names,
      qkv_bias="blk.0.attn_q.bias" in names,
      max_seq_len=int(_field(reader, f"{arch}.context_length", source, 2048)))
  fields.update(overrides)
  return ModelConfig(**fields)


def unpermute_qk(weight: np.ndarray, num_heads: int) -> np.ndarray:
  """Undoes llama.cpp's q/k row permutation: [out, ...] rows back to rotate_half order."""
  out = weight.shape[0]
  per_head = weight.reshape(num_heads, out // num_heads // 2, 2, *weight.shape[1:])
  return per_head.swapaxes(1, 2).reshape(weight.shape)


def _hf_name(gguf_name: str) -> str | None:
  if gguf_name in _GLOBAL_NAMES:
    return _GLOBAL_NAMES[gguf_name]
  parts = gguf_name.split(".", 2)
  if len(parts) == 3 and parts[0] == "blk" and parts[2] in _BLOCK_NAMES:
    return f"model.layers.{parts[1]}.{_BLOCK_NAMES[parts[2]]}"
  return None


def read_gguf_tensors(reader: GGUFFile, config: ModelConfig, source: str,
                      arch: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
  """Dequantized float32 tensors in HF layout, and HF name -> GGUF name."""
  tensors, display = {}, {}
  for t in reader.tensors:
    hf_name = _hf_name(t.name)
    if hf_name is None:
      raise WeightFileError(f"{source}: unexpected tensor {t.name!r}")
    try:
      array = dequantize(t.data, t.tensor_type).reshape(tuple(reversed(t.shape)))
    except (ValueError, NotImplementedError) as e:
      raise WeightFileError(f"{source}: cannot dequantize tensor {t.name!r} "
                            f"({t.tensor_type.name}): {e}") from e
    array = np.asarray(array, np.float32)
    if arch == "llama" and t.name.split(".")[-2] in ("attn_q", "attn_k"):
      heads = config.num_heads if t.name.split(".")[-2] == "attn_q" else config.num_kv_heads
      if array.shape[0] % (2 * heads):
        raise WeightFileError(f"{source}: tensor {t.name!r} has shape {array.shape}, whose "
                              f"rows do not split into {heads} heads")
      array = unpermute_qk(array, heads)
    tensors[hf_name], display[hf_name] = array, t.name
  return tensors, display


def model_from_gguf_reader(reader: GGUFFile, source: str, **overrides: Any) -> Transformer:
  """A `Transformer` from an open GGUF file (share the reader with the tokenizer)."""
  config = gguf_config(reader, source, **overrides)
  arch = _field(reader, "general.architecture", source)
  tensors, display = read_gguf_tensors(reader, config, source, arch)
  return model_from_hf_tensors(config, tensors, source, display)


def load_gguf(path: str | pathlib.Path, **overrides: Any) -> Transformer:
  """A `Transformer` holding the weights of a GGUF file; `overrides` change config fields."""
  return model_from_gguf_reader(open_gguf(path), str(path), **overrides)
