"""Llama-family decoders (SmolLM2, Llama 3, Qwen2) in Flax NNX, with weight loaders.

Public entry points:
  model, tokenizer = load_pretrained("smollm2_135m")  # or a GGUF file / HF folder path
  logits = model(token_ids)                           # int32 [B, T] -> float32 [B, T, V]
  model = init_model(get_config("tiny"), seed=0)      # random weights
"""

from __future__ import annotations

import pathlib
from typing import Any

from flax import nnx

from mgrpo_jax.models.config import PRESETS, ModelConfig, get_config
from mgrpo_jax.models.kv_cache import KVCache, init_cache
from mgrpo_jax.models.logprobs import logprobs_from_logits, token_logprobs
from mgrpo_jax.models.transformer import Transformer
from mgrpo_jax.models.weights.hf_layout import WeightFileError

# Presets whose weights this package can fetch by itself.
_DOWNLOADABLE = ("smollm2_135m",)

__all__ = [
    "KVCache", "ModelConfig", "PRESETS", "Transformer", "WeightFileError", "get_config",
    "init_cache", "init_model", "load_model", "load_pretrained", "logprobs_from_logits",
    "token_logprobs",
]


def init_model(config: ModelConfig, seed: int = 0) -> Transformer:
  """A `Transformer` with random weights."""
  return Transformer(config, rngs=nnx.Rngs(seed))


def _resolve(name_or_path: str | pathlib.Path) -> pathlib.Path:
  if str(name_or_path) in _DOWNLOADABLE:
    from mgrpo_jax.models.weights.fetch import fetch_smollm2_gguf
    return fetch_smollm2_gguf()
  path = pathlib.Path(name_or_path)
  if not path.exists():
    raise WeightFileError(f"{path}: no such file or folder, and not a downloadable preset "
                          f"(known: {list(_DOWNLOADABLE)})")
  return path


def load_model(name_or_path: str | pathlib.Path, **overrides: Any) -> Transformer:
  """The model of `load_pretrained`, without a tokenizer."""
  path = _resolve(name_or_path)
  if path.is_dir():
    from mgrpo_jax.models.weights.safetensors import load_hf_folder
    return load_hf_folder(path, **overrides)
  from mgrpo_jax.models.weights.gguf import load_gguf
  return load_gguf(path, **overrides)


def load_pretrained(name_or_path: str | pathlib.Path, **overrides: Any) -> tuple[Transformer, Any]:
  """Loads a model and its tokenizer.

  Args:
    name_or_path: "smollm2_135m" (fetched once into the cache), a `.gguf` file, or a
      Hugging Face folder (config.json + *.safetensors + tokenizer.json).
    **overrides: `ModelConfig` fields to change (e.g. `scan_layers=True`, `dtype`).

  Returns:
    (model, tokenizer); the tokenizer follows `mgrpo_jax.text.tokenizer.Tokenizer`.
  """
  path = _resolve(name_or_path)
  if path.is_dir():
    from mgrpo_jax.models.weights.safetensors import load_folder_tokenizer
    return load_model(path, **overrides), load_folder_tokenizer(path)
  from mgrpo_jax.models.weights.gguf import model_from_gguf_reader, open_gguf
  from mgrpo_jax.text.gguf_bpe import GGUFTokenizer
  reader = open_gguf(path)
  model = model_from_gguf_reader(reader, str(path), **overrides)
  return model, GGUFTokenizer.from_reader(reader, source=str(path))
