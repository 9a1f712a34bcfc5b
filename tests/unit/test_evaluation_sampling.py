"""The evaluation's sampling variants of an agent: greedy, and another temperature or
nucleus (`eval.temperature`, `eval.top_p`)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from mgrpo_jax.agents.modes import Agent
from mgrpo_jax.agents.policy import SamplerPolicy
from mgrpo_jax.evaluation.held_out import greedy_agents, sampled_agents
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.sampling import Sampler, SamplerConfig

PROMPTS = [[5, 6, 7], [8, 9, 10, 11], [20]]


@pytest.fixture(scope="module")
def agent():
  sampler = Sampler(init_model(get_config("tiny"), seed=0), eos_ids=[3], pad_id=0,
                    config=SamplerConfig(prompt_buckets=(8,), generation_buckets=(8,),
                                         batch_buckets=(4,)))
  return Agent(SamplerPolicy(sampler, version=3), tokenizer=None)


def _tokens(agent: Agent, seed: int) -> np.ndarray:
  params = dataclasses.replace(agent.policy.params, max_new_tokens=8, stop_strings=(),
                               stop_on_eos=False)
  return agent.policy.sampler.generate(PROMPTS, params, jax.random.key(seed)).tokens


def test_a_nucleus_of_one_token_samples_the_greedy_tokens(agent):
  (nucleus, _) = sampled_agents(agent, None, temperature=0.0, top_p=1e-6)
  greedy, _ = greedy_agents(agent, None)
  assert nucleus.policy.params.top_p == 1e-6 and nucleus.policy.params.temperature == 1.0
  want = _tokens(greedy, 0)
  for seed in range(3):
    np.testing.assert_array_equal(_tokens(nucleus, seed), want)
  # The whole distribution samples other tokens than the greedy ones.
  assert any((_tokens(agent, seed) != want).any() for seed in range(3))


def test_the_variants_share_the_sampler_and_keep_a_shared_sub_shared(agent):
  main, sub = sampled_agents(agent, agent, temperature=0.0, top_p=0.9)
  assert sub is main and main.policy.sampler is agent.policy.sampler
  assert main.policy.version == 3 and agent.policy.params.top_p == 1.0
  other = Agent(SamplerPolicy(agent.policy.sampler), tokenizer=None)
  main, sub = greedy_agents(agent, other)
  assert sub is not main and sub.policy.params.temperature == 0.0
  assert sampled_agents(agent, None, temperature=0.0, top_p=0.9)[1] is None


def test_zeros_keep_the_agents_own_sampling_and_a_temperature_changes_only_it(agent):
  assert sampled_agents(agent, None, temperature=0.0, top_p=0.0) == (agent, None)
  hot, _ = sampled_agents(agent, None, temperature=1.5, top_p=0.0)
  assert hot.policy.params == dataclasses.replace(agent.policy.params, temperature=1.5)
  # Sampled at a lower temperature, the rows leave the greedy tokens less often.
  want = _tokens(greedy_agents(agent, None)[0], 0)
  cold, _ = sampled_agents(agent, None, temperature=0.05, top_p=0.0)
  differing = [int((_tokens(a, seed) != want).sum()) for a in (agent, cold) for seed in (1, 2)]
  assert sum(differing[2:]) < sum(differing[:2]), differing
