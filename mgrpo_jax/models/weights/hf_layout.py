"""The Hugging Face (transformers) tensor layout, the common ground of all weight loaders.

Loaders (GGUF, safetensors) produce a mapping from HF parameter names
(`model.layers.3.self_attn.q_proj.weight`, matrices stored [out, in]) to numpy arrays.
This module converts such a mapping into a `Transformer` (checking every shape against
the config and naming the offending tensor), converts a model back into it, and reads
and writes the `config.json` fields of the Llama (Llama 3.x, SmolLM2), Qwen2 (Qwen2.5)
and Qwen3 (dense) families.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mgrpo_jax.models.config import ModelConfig, RopeScaling
from mgrpo_jax.models.transformer import Transformer


class WeightFileError(ValueError):
  """A weight file or folder is missing, unreadable, or does not fit the config."""


_BLOCK_TENSORS = {
    # HF suffix -> (model path below the block, transposed)
    "input_layernorm.weight": (("attn_norm", "scale"), False),
    "post_attention_layernorm.weight": (("mlp_norm", "scale"), False),
    "self_attn.q_proj.weight": (("attn", "q_proj", "kernel"), True),
    "self_attn.k_proj.weight": (("attn", "k_proj", "kernel"), True),
    "self_attn.v_proj.weight": (("attn", "v_proj", "kernel"), True),
    "self_attn.o_proj.weight": (("attn", "o_proj", "kernel"), True),
    "self_attn.q_proj.bias": (("attn", "q_proj", "bias"), False),
    "self_attn.k_proj.bias": (("attn", "k_proj", "bias"), False),
    "self_attn.v_proj.bias": (("attn", "v_proj", "bias"), False),
    "self_attn.q_norm.weight": (("attn", "q_norm", "scale"), False),
    "self_attn.k_norm.weight": (("attn", "k_norm", "scale"), False),
    "mlp.gate_proj.weight": (("mlp", "gate_proj", "kernel"), True),
    "mlp.up_proj.weight": (("mlp", "up_proj", "kernel"), True),
    "mlp.down_proj.weight": (("mlp", "down_proj", "kernel"), True),
}
_QK_NORM_SUFFIXES = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")
# Tensors some folders hold that the model computes or ties instead: old checkpoints'
# RoPE frequencies, and an LM head stored beside tied embeddings (transformers ties it
# to the embedding on load, so does this loader).
_IGNORED = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")
# The key-smear logits [K] of a smeared-key model (`ModelConfig.smeared_keys`); only the
# `mgrpo_llama` model type (its modeling file ships with an export) has them.
SMEAR_SUFFIX = "self_attn.key_smear"
_LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.(.+)")


def hf_parameter_map(config: ModelConfig) -> dict[str, tuple[tuple[str | int, ...], bool]]:
  """HF tensor name -> (unrolled model state path, stored transposed) for `config`."""
  names: dict[str, tuple[tuple[str | int, ...], bool]] = {
      "model.embed_tokens.weight": (("embedding",), False),
      "model.norm.weight": (("final_norm", "scale"), False),
  }
  if not config.tie_embeddings:
    names["lm_head.weight"] = (("lm_head", "kernel"), True)
  for i in range(config.num_layers):
    for suffix, (path, transposed) in _BLOCK_TENSORS.items():
      if suffix.endswith(".bias") and not config.qkv_bias:
        continue
      if suffix in _QK_NORM_SUFFIXES and not config.qk_norm:
        continue
      names[f"model.layers.{i}.{suffix}"] = (("layers", i, *path), transposed)
    if config.smeared_keys:
      names[f"model.layers.{i}.{SMEAR_SUFFIX}"] = (("layers", i, "attn", "key_smear"), False)
  return names


def _state_path(keys) -> tuple[str | int, ...]:
  return tuple(k.key for k in keys if isinstance(k, jax.tree_util.DictKey))


def model_from_hf_tensors(config: ModelConfig, tensors: Mapping[str, np.ndarray], source: str,
                          display_names: Mapping[str, str] | None = None) -> Transformer:
  """Builds a `Transformer` for `config` holding `tensors` (HF names, [out, in] matrices).

  Args:
    config: the architecture; every tensor's shape is checked against it.
    tensors: HF name -> array (any float dtype; cast to `config.param_dtype`).
    source: the file or folder the tensors came from (for error messages).
    display_names: optional HF name -> name in the source file (e.g. GGUF names).

  Raises:
    WeightFileError: a tensor is missing, has the wrong shape, or belongs to a layer
      the config does not have; the message names the tensor and `source`.
  """
  display_names = display_names or {}
  show = lambda name: display_names.get(name, name)  # noqa: E731
  expected_names = hf_parameter_map(config)
  for name in tensors:
    match = _LAYER_NAME.fullmatch(name)
    if match and int(match.group(1)) >= config.num_layers:
      raise WeightFileError(f"{source}: tensor {show(name)!r} belongs to layer "
                            f"{match.group(1)} but the config has {config.num_layers} layers")
    tied_head = name == "lm_head.weight" and config.tie_embeddings
    if name not in expected_names and not tied_head and not _IGNORED.fullmatch(name):
      raise WeightFileError(f"{source}: tensor {show(name)!r} has no place in this "
                            "architecture (a bias, norm or layer the config does not "
                            "describe)")
  unrolled = config.replace(scan_layers=False)
  by_path: dict[tuple[str | int, ...], np.ndarray] = {}
  expected_shapes = nnx.state(nnx.eval_shape(lambda: Transformer(unrolled, rngs=nnx.Rngs(0))))
  flat_expected = {_state_path(p): x.shape for p, x in
                   jax.tree_util.tree_flatten_with_path(expected_shapes)[0]}
  for name, (path, transposed) in expected_names.items():
    if name not in tensors:
      raise WeightFileError(f"{source}: missing tensor {show(name)!r}")
    array = np.asarray(tensors[name])
    want = flat_expected[path][::-1] if transposed else flat_expected[path]
    if array.shape != tuple(want):
      raise WeightFileError(f"{source}: tensor {show(name)!r} has shape {array.shape}, but the "
                            f"config expects {tuple(want)}")
    by_path[path] = array.T if transposed else array

  def value_at(keys, abstract):
    path = _state_path(keys)
    if path[0] == "blocks":
      array = np.stack([by_path[("layers", i, *path[1:])] for i in range(config.num_layers)])
    else:
      array = by_path[path]
    return jnp.asarray(array, dtype=abstract.dtype)

  abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract)
  return nnx.merge(graphdef, jax.tree_util.tree_map_with_path(value_at, state))


def hf_tensors_from_model(model: Transformer) -> dict[str, np.ndarray]:
  """The inverse of `model_from_hf_tensors`: HF name -> float32 numpy array."""
  config = model.config
  flat = {_state_path(p): np.asarray(x, np.float32) for p, x in
          jax.tree_util.tree_flatten_with_path(nnx.state(model))[0]}
  out = {}
  for name, (path, transposed) in hf_parameter_map(config).items():
    if config.scan_layers and path[0] == "layers":
      array = flat[("blocks", *path[2:])][path[1]]
    else:
      array = flat[path]
    out[name] = np.ascontiguousarray(array.T if transposed else array)
  return out


SMEARED_MODEL_TYPE = "mgrpo_llama"
_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                  "qwen3": "Qwen3ForCausalLM", SMEARED_MODEL_TYPE: "MgrpoLlamaForCausalLM"}
# The modeling file of `mgrpo_llama` (a Llama with smeared keys) in an exported folder.
SMEARED_MODELING_MODULE = "modeling_mgrpo"


def _check_unsupported(hf: Mapping[str, Any], model_type: str, source: str) -> None:
  """Raises for config fields that change the computation in ways this model lacks."""
  if hf.get("use_sliding_window") or "sliding_attention" in (hf.get("layer_types") or ()):
    raise WeightFileError(f"{source}: use_sliding_window / layer_types: sliding-window "
                          "attention is not supported")
  if hf.get("mlp_bias"):
    raise WeightFileError(f"{source}: mlp_bias: MLP biases are not supported")
  if model_type != "qwen2" and hf.get("attention_bias"):
    raise WeightFileError(f"{source}: attention_bias: attention biases of the {model_type} "
                          "type (o_proj included) are not supported")


def config_from_hf_dict(hf: Mapping[str, Any], source: str, **overrides: Any) -> ModelConfig:
  """Reads a Llama, Qwen2 or Qwen3 `config.json` into a `ModelConfig`."""
  model_type = hf.get("model_type")
  if model_type not in _ARCHITECTURES:
    raise WeightFileError(f"{source}: model_type {model_type!r} is not supported "
                          f"(supported: {sorted(_ARCHITECTURES)})")
  _check_unsupported(hf, model_type, source)
  try:
    heads = int(hf["num_attention_heads"])
    hidden = int(hf["hidden_size"])
    rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "llama3"):
      raise WeightFileError(f"{source}: rope_scaling type {rope_type!r} is not supported")
    scaling = None
    if rope_type == "llama3":
      scaling = RopeScaling(
          factor=float(rope["factor"]), low_freq_factor=float(rope["low_freq_factor"]),
          high_freq_factor=float(rope["high_freq_factor"]),
          original_max_position_embeddings=int(rope["original_max_position_embeddings"]))
    theta = hf.get("rope_theta", rope.get("rope_theta", 10000.0))
    fields = dict(
        vocab_size=int(hf["vocab_size"]), hidden_size=hidden,
        num_layers=int(hf["num_hidden_layers"]), num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        head_dim=int(hf.get("head_dim") or hidden // heads),
        intermediate_size=int(hf["intermediate_size"]), rope_theta=float(theta),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qkv_bias=bool(hf.get("attention_bias", model_type == "qwen2")),
        qk_norm=model_type == "qwen3",
        max_seq_len=int(hf.get("max_position_embeddings", 2048)), rope_scaling=scaling,
        smeared_keys=model_type == SMEARED_MODEL_TYPE)
  except KeyError as e:
    raise WeightFileError(f"{source}: config field {e.args[0]!r} is missing") from e
  act = hf.get("hidden_act", "silu")
  if act != "silu":
    raise WeightFileError(f"{source}: hidden_act {act!r} is not supported (only 'silu')")
  fields.update(overrides)
  return ModelConfig(**fields)


def hf_model_type(config: ModelConfig) -> str:
  """The Hugging Face model type of `config`'s architecture: qwen3 (per-head q/k norms),
  qwen2 (q/k/v biases), else llama; `hf_config_dict` makes a smeared-key model
  `mgrpo_llama`."""
  if config.qk_norm:
    return "qwen3"
  return "qwen2" if config.qkv_bias else "llama"


def hf_config_dict(config: ModelConfig, model_type: str | None = None) -> dict[str, Any]:
  """The `config.json` content describing `config` (inverse of `config_from_hf_dict`);
  `model_type` defaults to `hf_model_type(config)`.

  A smeared-key model is always model type `mgrpo_llama`, whose `auto_map` names the
  modeling file an export ships (`trust_remote_code=True` loads it).
  """
  model_type = model_type or hf_model_type(config)
  if model_type not in _ARCHITECTURES:
    raise ValueError(f"model_type must be one of {sorted(_ARCHITECTURES)}, got {model_type!r}")
  if config.qk_norm != (model_type == "qwen3"):
    raise ValueError(f"model_type {model_type!r} with qk_norm={config.qk_norm}: per-head q/k "
                     "norms are the qwen3 type's, and only its")
  if config.smeared_keys:
    model_type = SMEARED_MODEL_TYPE
  elif model_type == SMEARED_MODEL_TYPE:
    raise ValueError(f"model_type {SMEARED_MODEL_TYPE!r} is for smeared-key models only")
  out: dict[str, Any] = {
      "architectures": [_ARCHITECTURES[model_type]], "model_type": model_type,
      "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
      "num_key_value_heads": config.num_kv_heads, "head_dim": config.head_dim,
      "intermediate_size": config.intermediate_size, "rope_theta": config.rope_theta,
      "rms_norm_eps": config.rms_norm_eps, "tie_word_embeddings": config.tie_embeddings,
      "attention_bias": config.qkv_bias, "max_position_embeddings": config.max_seq_len,
      "hidden_act": "silu", "torch_dtype": "float32",
  }
  if config.smeared_keys:
    out["auto_map"] = {
        "AutoConfig": f"{SMEARED_MODELING_MODULE}.MgrpoLlamaConfig",
        "AutoModelForCausalLM": f"{SMEARED_MODELING_MODULE}.MgrpoLlamaForCausalLM"}
  if config.rope_scaling is not None:
    s = config.rope_scaling
    out["rope_scaling"] = {
        "rope_type": "llama3", "factor": s.factor, "low_freq_factor": s.low_freq_factor,
        "high_freq_factor": s.high_freq_factor,
        "original_max_position_embeddings": s.original_max_position_embeddings}
  return out
