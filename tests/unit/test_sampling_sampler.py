"""The jitted sampler on the tiny model: logprobs, greedy, stops, determinism, compile counts."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import get_config, init_model, token_logprobs
from mgrpo_jax.sampling import Sampler, SamplerConfig, SamplingParams
from mgrpo_jax.utils.compile_counter import CompileCounter

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15, 16, 17], [20]]
CONFIG = SamplerConfig(prompt_buckets=(8, 16), generation_buckets=(8, 16),
                       batch_buckets=(2, 4))
score = nnx.jit(token_logprobs)
forward = nnx.jit(lambda model, ids: model(ids))


@pytest.fixture(scope="module")
def model():
  return init_model(get_config("tiny"), seed=0)


@pytest.fixture(scope="module")
def sampler(model):
  return Sampler(model, eos_ids=[3], pad_id=0, config=CONFIG)


def _scored(model, prompts, out, temperature=1.0):
  """Trainer-side logprobs of prompt + completion, right-padded in one batch."""
  width = max(len(p) for p in prompts) + out.tokens.shape[1]
  ids = np.zeros((len(prompts), width), np.int32)
  mask = np.zeros_like(ids)
  for i, p in enumerate(prompts):
    seq = list(p) + out.completion(i)
    ids[i, :len(seq)], mask[i, :len(seq)] = seq, 1
  lp = np.asarray(score(model, ids, mask, temperature))
  return [lp[i, len(p):len(p) + out.lengths[i]] for i, p in enumerate(prompts)]


@pytest.mark.parametrize("params", [
    SamplingParams(max_new_tokens=12, stop_on_eos=False),
    SamplingParams(max_new_tokens=12, temperature=0.7, top_p=0.9, top_k=50, stop_on_eos=False),
])
def test_sampler_logprobs_equal_scoring_function(model, sampler, params):
  """The model's log-probs at the sampling temperature (filters left out): the trainer's
  pi at the agent's `sampling.temperature`."""
  out = sampler.generate(PROMPTS, params, jax.random.key(1))
  assert list(out.lengths) == [12, 12, 12]
  for i, want in enumerate(_scored(model, PROMPTS, out, temperature=params.temperature)):
    np.testing.assert_allclose(out.logprobs[i, :12], want, atol=1e-4, rtol=0)


def test_sampling_logprobs_are_those_of_the_tempered_distribution(model, sampler):
  params = SamplingParams(max_new_tokens=8, temperature=0.5, stop_on_eos=False,
                          logprobs="sampling")
  out = sampler.generate(PROMPTS, params, jax.random.key(2))
  for i, want in enumerate(_scored(model, PROMPTS, out, temperature=0.5)):
    np.testing.assert_allclose(out.logprobs[i, :8], want, atol=1e-4, rtol=0)


def test_greedy_equals_stepwise_argmax_of_full_forward(model, sampler):
  params = SamplingParams(max_new_tokens=6, temperature=0.0, stop_on_eos=False)
  out = sampler.generate(PROMPTS, params, jax.random.key(0))
  for i, prompt in enumerate(PROMPTS):
    seq = list(prompt)
    for _ in range(6):   # right-padded to a fixed width: causal, so padding is never seen
      padded = np.zeros((1, 16), np.int32)
      padded[0, :len(seq)] = seq
      seq.append(int(np.argmax(forward(model, padded)[0, len(seq) - 1])))
    assert out.completion(i) == seq[len(prompt):]
  for i, want in enumerate(_scored(model, PROMPTS, out)):  # greedy: the model at 1
    np.testing.assert_allclose(out.logprobs[i, :6], want, atol=1e-4, rtol=0)


def test_top_k_one_is_greedy(sampler):
  greedy = sampler.generate(PROMPTS, SamplingParams(8, temperature=0.0, stop_on_eos=False),
                            jax.random.key(0))
  top1 = sampler.generate(PROMPTS, SamplingParams(8, temperature=1.3, top_k=1,
                                                  stop_on_eos=False), jax.random.key(9))
  np.testing.assert_array_equal(top1.tokens, greedy.tokens)


def test_same_key_same_tokens_other_key_other_tokens(sampler):
  params = SamplingParams(max_new_tokens=10, stop_on_eos=False)
  a = sampler.generate(PROMPTS, params, jax.random.key(4))
  b = sampler.generate(PROMPTS, params, jax.random.key(4))
  c = sampler.generate(PROMPTS, params, jax.random.key(5))
  np.testing.assert_array_equal(a.tokens, b.tokens)
  np.testing.assert_array_equal(a.logprobs, b.logprobs)
  assert not np.array_equal(a.tokens, c.tokens)


def test_eos_stops_the_row_right_after_it(sampler):
  free = sampler.generate(PROMPTS, SamplingParams(10, temperature=0.0, stop_on_eos=False),
                          jax.random.key(0))
  eos = int(free.tokens[1, 3])
  first = [c.index(eos) if eos in c else None for c in map(free.completion, range(3))]
  stopping = Sampler(sampler.model, eos_ids=[eos], pad_id=0, config=CONFIG)
  out = stopping.generate(PROMPTS, SamplingParams(10, temperature=0.0), jax.random.key(0))
  for i in range(3):
    if first[i] is None:
      assert out.finish_reasons[i] == "length" and out.lengths[i] == 10
      continue
    n = first[i] + 1
    assert out.finish_reasons[i] == "eos" and out.lengths[i] == n
    assert out.completion(i) == free.completion(i)[:n]
    assert np.all(out.tokens[i, n:] == 0) and np.all(out.logprobs[i, n:] == 0)


def test_stop_sequence_ends_the_row_with_reason_stop(sampler):
  free = sampler.generate(PROMPTS, SamplingParams(12, temperature=0.0, stop_on_eos=False),
                          jax.random.key(0))
  seq = tuple(int(t) for t in free.tokens[0, 4:7])
  params = SamplingParams(12, temperature=0.0, stop_on_eos=False, stop_sequences=(seq,))
  out = sampler.generate(PROMPTS, params, jax.random.key(0))
  assert out.finish_reasons[0] == "stop" and out.lengths[0] <= 7
  assert tuple(out.completion(0)[-3:]) == seq
  for i in range(3):
    assert out.completion(i) == free.completion(i)[:out.lengths[i]]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cache_windows_sample_what_the_whole_cache_samples(model, temperature):
  """Decode over growing cache windows (G = 32: the loop's cache grows after steps 8 and
  16) gives the tokens of one decode loop over all P + 32 slots, greedy and sampled with
  a fixed key; left-padded prompts of 1-10 ids, a row that ends early on EOS included."""
  prompts = PROMPTS + [[1, 2, 3, 4, 5, 6]]
  params = SamplingParams(max_new_tokens=30, temperature=temperature)

  def sample(windows):
    config = SamplerConfig(prompt_buckets=(16,), generation_buckets=(32,), batch_buckets=(4,),
                           decode_windows=windows)
    return Sampler(model, eos_ids=[3], pad_id=0, config=config).generate(
        prompts, params, jax.random.key(7))

  windowed, whole = sample(3), sample(1)
  np.testing.assert_array_equal(windowed.tokens, whole.tokens)
  np.testing.assert_array_equal(windowed.lengths, whole.lengths)
  np.testing.assert_allclose(windowed.logprobs, whole.logprobs, atol=1e-5, rtol=0)


def test_no_recompilation_within_buckets(model):
  config = SamplerConfig(prompt_buckets=(12,), generation_buckets=(24,), batch_buckets=(8,))
  sampler = Sampler(model, eos_ids=[3], pad_id=0, config=config)   # shapes no other test uses
  key1, key2 = jax.random.key(1), jax.random.key(2)
  params = SamplingParams(max_new_tokens=10)
  with CompileCounter() as counter:
    sampler.generate(PROMPTS, params, key1)
  assert counter.count == 1
  other_lengths = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [4], [9, 9], [1], [2], [3], [4]]
  with CompileCounter() as counter:
    sampler.generate(PROMPTS, params, key2)
    sampler.generate(other_lengths, params, key1)
    sampler.generate(PROMPTS, SamplingParams(max_new_tokens=20, temperature=0.3), key1)
    sampler.generate(PROMPTS[:1] + [[7] * 12, [2, 2]], params, key2)
  assert counter.count == 0
  assert sampler.num_programs == 1
  with CompileCounter() as counter:
    sampler.generate(PROMPTS, SamplingParams(max_new_tokens=10, top_p=0.5), key1)
    sampler.generate(PROMPTS, SamplingParams(max_new_tokens=10, top_k=4), key2)
  assert counter.count == 1 and sampler.num_programs == 2


def test_bad_prompts_are_rejected(sampler):
  params = SamplingParams(max_new_tokens=4)
  with pytest.raises(ValueError, match="prompt 1 is empty"):
    sampler.generate([[1, 2], []], params, jax.random.key(0))
  with pytest.raises(ValueError, match="prompt 0 has ids outside"):
    sampler.generate([[1, 999]], params, jax.random.key(0))
  with pytest.raises(ValueError, match="prompt length 17 exceeds the largest bucket 16"):
    sampler.generate([[1] * 17], params, jax.random.key(0))
  with pytest.raises(ValueError, match="max_new_tokens 20 exceeds"):
    sampler.generate([[1]], SamplingParams(max_new_tokens=20), jax.random.key(0))
  with pytest.raises(ValueError, match="stop_strings need a tokenizer"):
    sampler.generate([[1]], SamplingParams(4, stop_strings=("</a>",)), jax.random.key(0))
