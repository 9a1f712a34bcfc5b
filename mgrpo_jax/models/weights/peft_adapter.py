"""A model's LoRA adapters as a PEFT adapter folder, which `peft` loads onto the base:

  base = AutoModelForCausalLM.from_pretrained(base_folder)
  model = PeftModel.from_pretrained(base, adapter_folder)

`save_peft_adapter(model, folder, base_model_name_or_path)` writes
  adapter_config.json          peft_type LORA, r, lora_alpha, target_modules (the HF
                               projection names), no dropout, no bias, the base's name
  adapter_model.safetensors    per adapted projection `base_model.model.<module>.lora_A
                               .weight` [r, in] and `.lora_B.weight` [out, r] (float32),
                               the transposes of the model's A [in, r] and B [r, out]
PEFT computes base(x) + lora_B(lora_A(x)) * lora_alpha / r, the model's own adapted
projection.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
from safetensors.numpy import save_file

from mgrpo_jax.models.config import LORA_TARGETS
from mgrpo_jax.models.lora import adapter_arrays
from mgrpo_jax.models.transformer import Transformer

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"


def peft_adapter_tensors(model: Transformer) -> dict[str, np.ndarray]:
  """The adapter tensors under PEFT's names (module docstring)."""
  out = {}
  for module, (a, b) in adapter_arrays(model).items():
    out[f"base_model.model.{module}.lora_A.weight"] = np.ascontiguousarray(a.T)
    out[f"base_model.model.{module}.lora_B.weight"] = np.ascontiguousarray(b.T)
  return out


def save_peft_adapter(model: Transformer, folder: str | os.PathLike,
                      base_model_name_or_path: str) -> pathlib.Path:
  """Writes the folder of the module docstring; returns it.

  Raises:
    ValueError: the model has no LoRA adapters.
  """
  lora = model.config.lora
  if lora is None:
    raise ValueError("the model has no LoRA adapters to save (lora.rank is 0)")
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  config = {
      "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank,
      "lora_alpha": lora.alpha, "lora_dropout": 0.0, "bias": "none",
      "target_modules": sorted(LORA_TARGETS[t] for t in lora.targets),
      "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
      "init_lora_weights": True, "inference_mode": True,
      "base_model_name_or_path": base_model_name_or_path,
  }
  (folder / ADAPTER_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
  save_file(peft_adapter_tensors(model), str(folder / ADAPTER_WEIGHTS_FILE))
  return folder
