"""The sampler on SmolLM2-135M-Instruct: transformers' greedy chat decode, EOS and stop
strings on the real tokenizer, and logprob agreement with the scoring function.

The model runs its 30 blocks as one `jax.lax.scan` (`scan_layers`, as
configs/smollm2_deep_research.py runs it), so each program compiles one block instead of
30: the file takes about 20 s on 2 cores instead of 50 s. Scanned and unrolled blocks give
the same logits (tests/integration/test_models_smollm2.py).
"""

from __future__ import annotations

import json
import pathlib

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import load_pretrained, token_logprobs
from mgrpo_jax.sampling import Sampler, SamplerConfig, SamplingParams

REFERENCE = pathlib.Path(__file__).parents[1] / "data" / "smollm2_reference.json"
CONFIG = SamplerConfig(prompt_buckets=(16, 64), generation_buckets=(32,), batch_buckets=(4,))


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
  model, tokenizer = load_pretrained(str(smollm2_gguf), scan_layers=True)
  return model, tokenizer, Sampler(model, tokenizer, config=CONFIG)


@pytest.fixture(scope="module")
def chat_reference():
  return json.loads(REFERENCE.read_text())["chat_decode"]


def test_greedy_chat_decode_reproduces_transformers(smollm2, chat_reference):
  _, _, sampler = smollm2
  prompt = chat_reference["prompt_ids"]
  params = SamplingParams(max_new_tokens=32, temperature=0.0, stop_on_eos=False)
  out = sampler.generate([prompt], params, jax.random.key(0))
  assert out.completion(0) == chat_reference["generated_ids"]
  assert out.finish_reasons == ["length"]
  np.testing.assert_allclose(out.logprobs[0], chat_reference["generated_logprobs"], atol=1e-3)


def test_greedy_chat_decode_stops_right_after_the_first_eos(smollm2, chat_reference):
  _, tokenizer, sampler = smollm2
  prompt, generated = chat_reference["prompt_ids"], chat_reference["generated_ids"]
  first_eos = generated.index(tokenizer.eos_id)
  out = sampler.generate([prompt, prompt[:20]], SamplingParams(32, temperature=0.0),
                         jax.random.key(0))
  assert out.completion(0) == generated[:first_eos + 1]
  assert out.finish_reasons[0] == "eos" and out.lengths[0] == first_eos + 1
  assert tokenizer.decode(out.completion(0)) == "The capital of France is Paris.<|im_end|>"


def test_stop_string_ends_generation(smollm2, chat_reference):
  _, tokenizer, sampler = smollm2
  params = SamplingParams(32, temperature=0.0, stop_strings=("Paris", "</tool_call>"))
  out = sampler.generate([chat_reference["prompt_ids"]], params, jax.random.key(0))
  assert out.finish_reasons == ["stop"]
  assert tokenizer.decode(out.completion(0)) == "The capital of France is Paris"


def test_sampled_logprobs_equal_scoring_function(smollm2):
  model, tokenizer, sampler = smollm2
  texts = ["<|im_start|>user\nTell me a story.<|im_end|>\n<|im_start|>assistant\n",
           "Once", "The three primary colors are red, yellow and"]
  prompts = [tokenizer.encode(t) for t in texts]
  out = sampler.generate(prompts, SamplingParams(24, temperature=1.0, stop_on_eos=False),
                         jax.random.key(7))
  width = 64
  ids = np.zeros((3, width), np.int32)
  mask = np.zeros_like(ids)
  for i, p in enumerate(prompts):
    seq = p + out.completion(i)
    ids[i, :len(seq)], mask[i, :len(seq)] = seq, 1
  scored = np.asarray(nnx.jit(token_logprobs)(model, ids, mask))
  for i, p in enumerate(prompts):
    np.testing.assert_allclose(out.logprobs[i, :24], scored[i, len(p):len(p) + 24], atol=1e-4)
