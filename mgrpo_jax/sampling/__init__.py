"""Jitted batched sampling with a KV cache: buckets, filters, stop conditions, logprobs.

  sampler = Sampler(model, tokenizer)
  out = sampler.generate(prompt_id_lists, SamplingParams(max_new_tokens=64), key)
  out.tokens, out.logprobs, out.lengths, out.finish_reasons
"""

from __future__ import annotations

from mgrpo_jax.sampling.buckets import pick_bucket, powers_of_two
from mgrpo_jax.sampling.filters import choose_tokens, filter_logits
from mgrpo_jax.sampling.sampler import (
    FINISH_REASONS,
    SampleOutput,
    Sampler,
    SamplerConfig,
    SamplingParams,
)
from mgrpo_jax.sampling.stop import pack_stop_sequences, stop_hits, stop_token_sequences

__all__ = [
    "FINISH_REASONS", "SampleOutput", "Sampler", "SamplerConfig", "SamplingParams",
    "choose_tokens", "filter_logits", "pack_stop_sequences", "pick_bucket", "powers_of_two",
    "stop_hits", "stop_token_sequences",
]
