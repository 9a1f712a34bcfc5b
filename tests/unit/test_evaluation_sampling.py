"""The evaluation's sampling variants of an agent: greedy, and nucleus (`eval.top_p`)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from mgrpo_jax.agents.modes import Agent
from mgrpo_jax.agents.policy import SamplerPolicy
from mgrpo_jax.evaluation.held_out import greedy_agents, nucleus_agents
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
  (nucleus, _), (greedy, _) = nucleus_agents(agent, None, 1e-6), greedy_agents(agent, None)
  assert nucleus.policy.params.top_p == 1e-6 and nucleus.policy.params.temperature == 1.0
  want = _tokens(greedy, 0)
  for seed in range(3):
    np.testing.assert_array_equal(_tokens(nucleus, seed), want)
  # The whole distribution samples other tokens than the greedy ones.
  assert any((_tokens(agent, seed) != want).any() for seed in range(3))


def test_the_variants_share_the_sampler_and_keep_a_shared_sub_shared(agent):
  main, sub = nucleus_agents(agent, agent, 0.9)
  assert sub is main and main.policy.sampler is agent.policy.sampler
  assert main.policy.version == 3 and agent.policy.params.top_p == 1.0
  other = Agent(SamplerPolicy(agent.policy.sampler), tokenizer=None)
  main, sub = greedy_agents(agent, other)
  assert sub is not main and sub.policy.params.temperature == 0.0
  assert nucleus_agents(agent, None, 0.9)[1] is None
