"""Low-rank adapters (LoRA) on a pretrained model: attach, read, merge.

`with_lora(model, lora, seed)` returns the model with an adapter on each projection
`lora.targets` names (`layers.Dense`: y = x W + (alpha / r) (x A) B), holding the base
model's own arrays (nothing copied) and fresh adapters (A uniform in +-1/sqrt(in), B
zero: the adapted model starts as the base). The adapters are `nnx.LoRAParam`s,
everything else the frozen base (`FROZEN`): `nnx.split(model, nnx.LoRAParam, FROZEN)`
separates what an optimizer trains from what it never touches, so two agents' adapters
can sit on one base.

`adapter_arrays(model)` reads the adapters per projection under their Hugging Face
module names (`model.layers.3.self_attn.q_proj`), whatever the layer layout (scanned or
not); `merged_hf_tensors` adds each one into its base weight, W + (alpha / r) A B, in
the Hugging Face layout (a plain folder that any Llama-family loader reads), and
`merge_lora` makes that a model without adapters; `base_model` is the model without its
adapters (the frozen base).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mgrpo_jax.models.config import LoraConfig
from mgrpo_jax.models.layers import lora_a_init
from mgrpo_jax.models.transformer import Transformer
from mgrpo_jax.models.weights.hf_layout import (
    hf_parameter_map,
    hf_tensors_from_model,
    model_from_hf_tensors,
)

# The frozen part of a model with adapters: every parameter but the adapters.
FROZEN = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))


def _key_name(key) -> str | int:
  return getattr(key, "key", getattr(key, "idx", getattr(key, "name", key)))


def with_lora(model: Transformer, lora: LoraConfig, seed: int) -> Transformer:
  """`model` with adapters on `lora.targets` (module docstring); its base arrays are
  shared with `model`, not copied.

  Raises:
    ValueError: `model` already has adapters.
  """
  if model.config.lora is not None:
    raise ValueError("the model already has LoRA adapters")
  config = model.config.replace(lora=lora)
  abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(seed)))
  graphdef, adapters, _ = nnx.split(abstract, nnx.LoRAParam, ...)
  leaves, treedef = jax.tree_util.tree_flatten_with_path(adapters)
  key = jax.random.key(seed)

  def init(i: int, path, leaf) -> jax.Array:
    if _key_name(path[-1]) == "value":
      path = path[:-1]
    if _key_name(path[-1]) == "lora_a":
      return lora_a_init(jax.random.fold_in(key, i), leaf.shape)
    return jnp.zeros(leaf.shape, leaf.dtype)

  adapters = jax.tree_util.tree_unflatten(
      treedef, [init(i, path, leaf) for i, (path, leaf) in enumerate(leaves)])
  return nnx.merge(graphdef, adapters, nnx.state(model, nnx.Param))


def base_model(model: Transformer) -> Transformer:
  """`model` without its adapters: the frozen base (its arrays shared, not copied)."""
  config = model.config.replace(lora=None)
  plain = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
  return nnx.merge(nnx.graphdef(plain), nnx.state(model, FROZEN))


def adapter_arrays(model: Transformer) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """{Hugging Face module name: (A [in, r], B [r, out]) float32} of every adapter."""
  config = model.config
  if config.lora is None:
    return {}
  flat = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(nnx.state(model, nnx.LoRAParam))[0]:
    names = tuple(_key_name(k) for k in path if _key_name(k) != "value")
    flat[names] = np.asarray(leaf, np.float32)
  out = {}
  for name, (path, _) in hf_parameter_map(config.replace(lora=None)).items():
    if path[-1] != "kernel" or not config.lora.adapts(path[-2]):
      continue
    layer_path = ("blocks", *path[2:-1]) if config.scan_layers else path[:-1]
    a, b = flat[(*layer_path, "lora_a")], flat[(*layer_path, "lora_b")]
    if config.scan_layers:
      a, b = a[path[1]], b[path[1]]
    out[name.removesuffix(".weight")] = (a, b)
  return out


def merged_hf_tensors(model: Transformer) -> dict[str, np.ndarray]:
  """The model's tensors in the Hugging Face layout with every adapter added into its
  base weight: W [out, in] + (alpha / r) (A B)^T, float32."""
  tensors = hf_tensors_from_model(model)
  if model.config.lora is None:
    return tensors
  scale = model.config.lora.scale
  for module, (a, b) in adapter_arrays(model).items():
    # C order: numpy would lay the sum out like the transposed product, and safetensors
    # writes an array's memory as it lies.
    tensors[f"{module}.weight"] = np.ascontiguousarray(
        tensors[f"{module}.weight"] + scale * (a @ b).T)
  return tensors


def merge_lora(model: Transformer) -> Transformer:
  """A model without adapters computing what `model` computes (`merged_hf_tensors`)."""
  config = model.config.replace(lora=None)
  return model_from_hf_tensors(config, merged_hf_tensors(model), "the merged LoRA model")
