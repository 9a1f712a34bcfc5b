"""Hugging Face style checkpoint folders: `config.json` + `*.safetensors` (Llama, Qwen2, Qwen3).

A folder holds either one `model.safetensors` or several shards listed by
`model.safetensors.index.json` (`{"weight_map": {tensor name: file name}}`). Tensors are
read with the safetensors numpy API (bfloat16 via ml_dtypes) and handed to
`hf_layout.model_from_hf_tensors`, which checks every shape against the config.
`save_hf_folder` writes the same layout (used to export GGUF weights and in tests).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.lora import merged_hf_tensors
from mgrpo_jax.models.transformer import Transformer
from mgrpo_jax.models.weights.hf_layout import (
    WeightFileError,
    config_from_hf_dict,
    hf_config_dict,
    model_from_hf_tensors,
)

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"


def _read_json(path: pathlib.Path) -> Any:
  if not path.is_file():
    raise WeightFileError(f"{path}: file not found")
  try:
    return json.loads(path.read_text())
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise WeightFileError(f"{path}: not valid JSON ({e})") from e


def read_hf_config(folder: str | pathlib.Path, **overrides: Any) -> ModelConfig:
  """The `ModelConfig` described by `folder/config.json`."""
  path = pathlib.Path(folder) / CONFIG_FILE
  return config_from_hf_dict(_read_json(path), str(path), **overrides)


def _shard_files(folder: pathlib.Path) -> list[pathlib.Path]:
  index = folder / INDEX_FILE
  if index.exists():
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
      raise WeightFileError(f"{index}: no 'weight_map' object")
    files = [folder / name for name in sorted(set(weight_map.values()))]
  else:
    files = sorted(folder.glob("*.safetensors"))
  if not files:
    raise WeightFileError(f"{folder}: no *.safetensors files")
  for f in files:
    if not f.is_file():
      raise WeightFileError(f"{f}: file not found (listed in {index.name})")
  return files


def read_hf_tensors(folder: str | pathlib.Path) -> dict[str, np.ndarray]:
  """All tensors of the folder's safetensors files, by name."""
  tensors: dict[str, np.ndarray] = {}
  for path in _shard_files(pathlib.Path(folder)):
    try:
      with safe_open(str(path), framework="np") as f:
        for name in f.keys():
          tensors[name] = f.get_tensor(name)
    except (SafetensorError, OSError, ValueError) as e:
      raise WeightFileError(f"{path}: not a readable safetensors file ({e})") from e
  return tensors


def load_hf_folder(folder: str | pathlib.Path, **overrides: Any) -> Transformer:
  """A `Transformer` from a HF folder; `overrides` change config fields (dtype, scan...)."""
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    raise WeightFileError(f"{folder}: checkpoint folder not found")
  config = read_hf_config(folder, **overrides)
  return model_from_hf_tensors(config, read_hf_tensors(folder), str(folder))


def save_hf_folder(model: Transformer, folder: str | pathlib.Path, model_type: str | None = None,
                   max_shard_bytes: int | None = None) -> pathlib.Path:
  """Writes `model` as config.json + float32 safetensors (sharded above `max_shard_bytes`);
  `model_type` defaults to the architecture's (`hf_layout.hf_model_type`). A model with
  LoRA adapters is written merged (`lora.merged_hf_tensors`)."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  (folder / CONFIG_FILE).write_text(json.dumps(hf_config_dict(model.config, model_type),
                                               indent=2))
  tensors = merged_hf_tensors(model)
  shards: list[dict[str, np.ndarray]] = [{}]
  size = 0
  for name, array in tensors.items():
    if max_shard_bytes is not None and shards[-1] and size + array.nbytes > max_shard_bytes:
      shards.append({})
      size = 0
    shards[-1][name] = array
    size += array.nbytes
  if len(shards) == 1:
    save_file(shards[0], str(folder / "model.safetensors"))
    return folder
  weight_map = {}
  for i, shard in enumerate(shards):
    file_name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
    save_file(shard, str(folder / file_name))
    weight_map.update(dict.fromkeys(shard, file_name))
  (folder / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map},
                                              indent=2))
  return folder


CHAT_TEMPLATE_FILE = "chat_template.jinja"


def folder_chat_template(folder: pathlib.Path) -> str | None:
  """The chat template of a Hugging Face folder: `chat_template.jinja` (where recent
  transformers versions save it), else `tokenizer_config.json`'s `chat_template`; None
  without either."""
  jinja = folder / CHAT_TEMPLATE_FILE
  if jinja.is_file():
    return jinja.read_text(encoding="utf-8")
  tokenizer_config_path = folder / "tokenizer_config.json"
  template = (_read_json(tokenizer_config_path).get("chat_template")
              if tokenizer_config_path.is_file() else None)
  if template is not None and not isinstance(template, str):
    raise WeightFileError(f"{tokenizer_config_path}: chat_template must be a string (named "
                          "templates are not supported)")
  return template


def load_folder_tokenizer(folder: str | pathlib.Path):
  """The tokenizer of a HF folder, as a `mgrpo_jax.text` tokenizer.

  A folder written by `GGUFTokenizer.save` (tokenizer.json + special_ids.json) loads
  as saved; otherwise `tokenizer.json` is wrapped with the special ids of
  `config.json` (`generation_config.json`'s `eos_token_id` wins; the first of a list)
  and the folder's chat template (`folder_chat_template`).
  """
  import tokenizers

  from mgrpo_jax.text.gguf_bpe import SPECIAL_IDS_JSON, TOKENIZER_JSON, GGUFTokenizer

  folder = pathlib.Path(folder)
  if (folder / SPECIAL_IDS_JSON).is_file():
    return GGUFTokenizer.load(folder)
  tokenizer_json = folder / TOKENIZER_JSON
  if not tokenizer_json.is_file():
    raise WeightFileError(f"{tokenizer_json}: file not found (the folder's tokenizer)")
  try:
    backend = tokenizers.Tokenizer.from_file(str(tokenizer_json))
  except Exception as e:  # tokenizers raises a plain Exception on bad files.
    raise WeightFileError(f"{tokenizer_json}: not a valid tokenizer.json ({e})") from e
  config = _read_json(folder / CONFIG_FILE)
  generation_path = folder / "generation_config.json"
  generation = _read_json(generation_path) if generation_path.is_file() else {}
  first = lambda v: v[0] if isinstance(v, list) else v  # noqa: E731
  eos = first(generation.get("eos_token_id", config.get("eos_token_id")))
  template = folder_chat_template(folder)
  return GGUFTokenizer(backend, bos_id=first(config.get("bos_token_id")), eos_id=eos,
                       pad_id=first(config.get("pad_token_id")), chat_template=template)
