"""A model and its tokenizer as a Hugging Face folder that transformers (and servers) load.

`export_hf_folder(model, tokenizer, folder, chat_template=...)` writes:
  config.json              Llama architecture (Qwen2 with q/k/v biases, Qwen3 with per-head
                           q/k norms); a smeared-key model is `mgrpo_llama` with an
                           `auto_map` to its modeling file
  model.safetensors        float32 tensors in the HF layout (`hf_layout`)
  generation_config.json   the tokenizer's BOS/EOS/pad ids (generation stops at EOS)
  tokenizer.json, tokenizer_config.json
                           the tokenizer and the chat template (`text.hf_files`)
  modeling_mgrpo.py        smeared-key models only (`hf_modeling_smeared_keys.py`):
                           load with `trust_remote_code=True`
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from typing import Any

from mgrpo_jax.models.transformer import Transformer
from mgrpo_jax.models.weights.hf_layout import SMEARED_MODELING_MODULE
from mgrpo_jax.models.weights.safetensors import CONFIG_FILE, save_hf_folder
from mgrpo_jax.text.hf_files import write_hf_tokenizer

MODELING_SOURCE = pathlib.Path(__file__).with_name("hf_modeling_smeared_keys.py")
GENERATION_CONFIG_FILE = "generation_config.json"


def export_hf_folder(model: Transformer, tokenizer: Any, folder: str | os.PathLike, *,
                     chat_template: str) -> pathlib.Path:
  """Writes `model` and `tokenizer` as the folder of the module docstring; returns it.

  Args:
    model: the model; float32 weights are written whatever its `param_dtype`, LoRA
      adapters merged into their base weights.
    tokenizer: the model's `SentencePieceTokenizer` or `GGUFTokenizer` (its vocabulary
      size must be the model's).
    folder: the output folder (created; files of the same names are replaced).
    chat_template: the Jinja chat template the model was prompted with.

  Raises:
    ValueError: the tokenizer's vocabulary does not fit the model's embedding.
  """
  config = model.config
  if tokenizer.vocab_size > config.vocab_size:
    raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids but the model's embedding "
                     f"only {config.vocab_size} rows")
  folder = pathlib.Path(folder)
  save_hf_folder(model, folder)
  special = {"bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id,
             "pad_token_id": tokenizer.pad_id}
  special = {k: v for k, v in special.items() if v is not None}
  hf_config = json.loads((folder / CONFIG_FILE).read_text())
  (folder / CONFIG_FILE).write_text(json.dumps({**hf_config, **special}, indent=2) + "\n")
  (folder / GENERATION_CONFIG_FILE).write_text(json.dumps(special, indent=2) + "\n")
  write_hf_tokenizer(tokenizer, folder, chat_template=chat_template,
                     model_max_length=config.max_seq_len)
  if config.smeared_keys:
    shutil.copyfile(MODELING_SOURCE, folder / f"{SMEARED_MODELING_MODULE}.py")
  return folder
