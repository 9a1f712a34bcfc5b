"""Each supported family loaded from a Hugging Face folder against transformers, and its
export loaded back by transformers with the family's own class.

The folders are tiny random-initialised models of Qwen3 (per-head q/k norms, explicit
head_dim, 12 safetensors shards), Qwen2.5 (q/k/v biases, tied head), Llama 3.x (llama3
RoPE scaling, the scaled frequencies exercised by 64 positions past the original 32)
and SmolLM2 (a Llama with one kv head), written by transformers in the reference venv
with a byte-level BPE tokenizer and the family's chat template
(`tests/support/hf_tiny_families.py`). For each: the float32 logits of a left-padded
batch agree within 1e-4, the 32 greedy tokens of our sampler (KV cache) are
transformers' `generate`'s, and the tokenizer and chat template give transformers' ids;
then `export_hf_folder` writes the model again, transformers loads it without remote
code as the family's class, and everything agrees again.
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.agents import protocol
from mgrpo_jax.models import load_pretrained
from mgrpo_jax.models.weights.hf_export import export_hf_folder
from mgrpo_jax.sampling import Sampler, SamplerConfig, SamplingParams
from mgrpo_jax.text import render_chat

ROOT = pathlib.Path(__file__).resolve().parents[2]
FAMILIES = ("qwen3", "qwen2_5", "llama3", "smollm2")
ARCHITECTURES = {"qwen3": "Qwen3ForCausalLM", "qwen2_5": "Qwen2ForCausalLM",
                 "llama3": "LlamaForCausalLM", "smollm2": "LlamaForCausalLM"}
NEW_TOKENS = 32
TOLERANCE = 1e-4
TEXTS = ["Who founded the Velora Trust press in the river city?",
         "Search the pages, then answer: 1854.", " leading space and\ttab\n"]
forward = nnx.jit(lambda model, ids, mask: model(ids, attention_mask=mask))


def _messages(family: str) -> list[dict]:
  """A delegating episode as the agents write it, turns in the family's dialect."""
  dialect = protocol.QWEN3 if family == "qwen3" else protocol.PROTOCOL
  return [{"role": "system", "content": "You are a research agent."},
          {"role": "user", "content": "The Question is: Who founded the press?"},
          {"role": "assistant", "content": protocol.render_tool_call(
              "search", {"query": "river press"}, "look it up", dialect)},
          {"role": "user", "content": protocol.render_observation("page 3: 1854")},
          {"role": "assistant", "content": protocol.render_result("1854", "found", dialect)},
          {"role": "user", "content": protocol.render_observation("done")}]


def _request(family: str, folder: pathlib.Path, tokenizer, result: pathlib.Path,
             **extra) -> dict:
  rows = [tokenizer.encode(TEXTS[0]), tokenizer.encode(TEXTS[1])]
  width = 64  # past the Llama folder's original 32 positions
  ids = np.full((2, width), tokenizer.pad_id or 0, np.int32)
  mask = np.zeros((2, width), np.int32)
  for i, row in enumerate(rows):
    row = (row * width)[:width - 7 * i]          # row 1 left-padded by 7
    ids[i, width - len(row):], mask[i, width - len(row):] = row, 1
  positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
  return {"folder": str(folder), "ids": ids.tolist(), "attention_mask": mask.tolist(),
          "positions": positions.tolist(), "generate_ids": rows[0], "new_tokens": NEW_TOKENS,
          "texts": TEXTS, "messages": _messages(family), "result": str(result), **extra}


def _transformers(python: pathlib.Path, requests: list[dict], tmp: pathlib.Path) -> None:
  path = tmp / "requests.json"
  path.write_text(json.dumps(requests))
  proc = subprocess.run([str(python), str(ROOT / "tests" / "support" / "hf_reference.py"),
                         str(path)], capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def families(reference_python, tmp_path_factory):
  """{family: (model, tokenizer, its reference, its export's reference)}."""
  tmp = tmp_path_factory.mktemp("families")
  proc = subprocess.run([str(reference_python),
                         str(ROOT / "tests" / "support" / "hf_tiny_families.py"), str(tmp)],
                        capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  loaded, requests = {}, []
  for family in FAMILIES:
    model, tokenizer = load_pretrained(tmp / family)
    exported = export_hf_folder(model, tokenizer, tmp / f"{family}_export",
                                chat_template=tokenizer.chat_template)
    loaded[family] = (model, tokenizer)
    requests += [_request(family, tmp / family, tokenizer, tmp / f"{family}.npz"),
                 _request(family, exported, tokenizer, tmp / f"{family}_export.npz",
                          trust_remote_code=False)]
  _transformers(reference_python, requests, tmp)
  return {family: (*loaded[family], np.load(tmp / f"{family}.npz"),
                   np.load(tmp / f"{family}_export.npz")) for family in FAMILIES}


def _check(model, tokenizer, family: str, reference) -> float:
  request = _request(family, pathlib.Path(), tokenizer, pathlib.Path())
  ids, mask = np.array(request["ids"], np.int32), np.array(request["attention_mask"], np.int32)
  ours = np.asarray(forward(model, ids, mask))
  real = mask.astype(bool)
  difference = float(np.max(np.abs(ours[real] - reference["logits"][real])))
  assert difference <= TOLERANCE, f"{family}: max |logit difference| {difference:.3g}"

  sampler = Sampler(model, tokenizer, config=SamplerConfig(
      prompt_buckets=(16,), generation_buckets=(NEW_TOKENS,), batch_buckets=(1,),
      decode_windows=1))
  out = sampler.generate([request["generate_ids"]],
                         SamplingParams(NEW_TOKENS, temperature=0.0, stop_on_eos=False),
                         jax.random.key(0))
  assert out.completion(0) == reference["generated"].tolist(), family

  texts = json.loads(str(reference["tokenizer"]))
  assert texts["encoded"] == [tokenizer.encode(text) for text in TEXTS], family
  assert texts["decoded"] == TEXTS, family
  chat = render_chat(tokenizer, request["messages"], add_generation_prompt=True)
  assert chat.ids.tolist() == texts["chat"], family
  return difference


@pytest.mark.parametrize("family", FAMILIES)
def test_folder_matches_transformers(families, family):
  model, tokenizer, reference, _ = families[family]
  assert str(reference["architecture"]) == ARCHITECTURES[family]
  _check(model, tokenizer, family, reference)


@pytest.mark.parametrize("family", FAMILIES)
def test_export_loads_as_the_family_class_and_matches(families, family):
  model, tokenizer, _, exported = families[family]
  assert str(exported["architecture"]) == ARCHITECTURES[family]
  _check(model, tokenizer, family, exported)


def test_family_features_were_loaded(families):
  assert families["qwen3"][0].config.qk_norm and families["qwen3"][0].config.head_dim == 32
  assert families["qwen2_5"][0].config.qkv_bias
  assert families["llama3"][0].config.rope_scaling.original_max_position_embeddings == 32
  assert protocol.dialect_for(families["qwen3"][1]) is protocol.QWEN3
  assert protocol.dialect_for(families["smollm2"][1]) is protocol.PROTOCOL
