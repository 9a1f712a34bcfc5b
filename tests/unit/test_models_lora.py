"""LoRA adapters on the decoder: what an adapted projection computes, the base it shares,
the merged weights and the PEFT tensors, checked against numpy."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import get_config, init_model, load_model
from mgrpo_jax.models.config import LoraConfig
from mgrpo_jax.models.lora import FROZEN, adapter_arrays, base_model, merge_lora, with_lora
from mgrpo_jax.models.weights.hf_layout import hf_tensors_from_model
from mgrpo_jax.models.weights.peft_adapter import peft_adapter_tensors
from mgrpo_jax.models.weights.safetensors import save_hf_folder
from tests.unit.test_models_weights import numpy_llama_logits

IDS = np.array([[3, 17, 250, 9, 44, 0, 128]], np.int32)
forward = nnx.jit(lambda model, ids: model(ids))
LORA = LoraConfig(rank=4, alpha=8.0, targets=("q", "v", "down"))


def perturbed(model, seed: int):
  """`model` with every adapter drawn at random (B is zero after `with_lora`)."""
  graphdef, adapters, base = nnx.split(model, nnx.LoRAParam, FROZEN)
  leaves, treedef = jax.tree.flatten(adapters)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  noisy = [x + 0.2 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
  return nnx.merge(graphdef, jax.tree.unflatten(treedef, noisy), base)


@pytest.mark.parametrize("scan", [False, True])
def test_adapted_model_computes_base_plus_low_rank_product(scan):
  base = init_model(get_config("tiny", scan_layers=scan, tie_embeddings=False), seed=0)
  adapted = with_lora(base, LORA, seed=1)
  np.testing.assert_array_equal(forward(adapted, IDS), forward(base, IDS))  # B = 0
  adapted = perturbed(adapted, seed=2)
  # numpy: every adapted weight [out, in] becomes W + (alpha / r) (A B)^T
  tensors = hf_tensors_from_model(base)
  arrays = adapter_arrays(adapted)
  assert sorted(arrays) == sorted(f"model.layers.{i}.{m}" for i in range(2) for m in
                                  ("self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"))
  for module, (a, b) in arrays.items():
    tensors[f"{module}.weight"] = tensors[f"{module}.weight"] + 2.0 * (a @ b).T
  want = numpy_llama_logits(base.config, tensors, IDS[0])
  np.testing.assert_allclose(forward(adapted, IDS)[0], want, atol=1e-4, rtol=0)
  np.testing.assert_allclose(forward(merge_lora(adapted), IDS)[0], want, atol=1e-4, rtol=0)
  assert np.abs(want - numpy_llama_logits(base.config, hf_tensors_from_model(base),
                                          IDS[0])).max() > 0.1


def test_a_saved_adapted_model_is_its_merged_folder(tmp_path):
  """`save_hf_folder` writes the merged weights (in C order: safetensors writes memory as
  it lies, and numpy lays out a sum of SmolLM2-wide matrices like its transposed
  operand) as a plain folder, which loads without adapters and computes the same."""
  wide = get_config("tiny", hidden_size=576, num_heads=9, num_kv_heads=3, head_dim=64,
                    intermediate_size=1536, num_layers=1)
  adapted = perturbed(with_lora(init_model(wide, seed=0), LORA, seed=1), 5)
  reloaded = load_model(save_hf_folder(adapted, tmp_path / "merged"))
  assert reloaded.config.lora is None
  np.testing.assert_allclose(forward(reloaded, IDS), forward(adapted, IDS), atol=1e-5, rtol=0)


def test_the_base_is_shared_and_only_adapters_are_lora_params():
  base = init_model(get_config("tiny"), seed=0)
  adapted = with_lora(base, LORA, seed=1)
  shared = [a is b for a, b in zip(jax.tree.leaves(nnx.state(adapted, FROZEN)),
                                   jax.tree.leaves(nnx.state(base, nnx.Param)), strict=True)]
  assert all(shared)
  shapes = {k: v.shape for k, v in jax.tree_util.tree_leaves_with_path(
      nnx.state(adapted, nnx.LoRAParam))}
  assert len(shapes) == 2 * 3 * 2  # A and B of 3 projections in 2 layers
  a, b = adapter_arrays(adapted)["model.layers.0.mlp.down_proj"]
  assert a.shape == (128, 4) and b.shape == (4, 64) and not b.any()
  assert np.abs(a).max() <= 1 / np.sqrt(128) and np.abs(a).max() > 0.5 / np.sqrt(128)
  np.testing.assert_array_equal(forward(base_model(perturbed(adapted, 3)), IDS),
                                forward(base, IDS))


def test_peft_tensors_are_the_transposed_factors():
  adapted = perturbed(with_lora(init_model(get_config("tiny"), seed=0), LORA, seed=1), 4)
  tensors = peft_adapter_tensors(adapted)
  a, b = adapter_arrays(adapted)["model.layers.1.self_attn.v_proj"]
  prefix = "base_model.model.model.layers.1.self_attn.v_proj"
  np.testing.assert_array_equal(tensors[f"{prefix}.lora_A.weight"], a.T)  # [r, in]
  np.testing.assert_array_equal(tensors[f"{prefix}.lora_B.weight"], b.T)  # [out, r]
  assert len(tensors) == 12


@pytest.mark.parametrize("fields, match", [
    (dict(rank=0, alpha=8.0), "lora.rank must be positive"),
    (dict(rank=4, alpha=0.0), "lora.alpha must be positive"),
    (dict(rank=4, alpha=8.0, targets=("q", "lm_head")), "lora.targets must be"),
])
def test_bad_lora_settings_name_the_field(fields, match):
  with pytest.raises(ValueError, match=match):
    LoraConfig(**fields)


def test_an_adapted_model_cannot_be_adapted_again():
  adapted = with_lora(init_model(get_config("tiny"), seed=0), LORA, seed=1)
  with pytest.raises(ValueError, match="already has LoRA adapters"):
    with_lora(adapted, LORA, seed=2)
