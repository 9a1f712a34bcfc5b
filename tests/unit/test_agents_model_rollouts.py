"""Rollouts with the tiny random-weight model and a SentencePiece tokenizer trained here.

Token-in-token-out: every record's ids are exactly the rendered prompt and observation
ids plus the ids the policy returned, its loss mask marks exactly those, and its
logprobs are the policy's, aligned. Episodes get several turns (with observations and
sub-agent calls) from a policy whose thinking is sampled by the model and whose action
comes from the oracle; with some probability a turn is the raw model sample instead
(garbage: format 0). The plain model policy is checked for limits, well-formed records
and determinism in every mode.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mgrpo_jax.agents import (
  Agent,
  AgentLimits,
  OraclePolicy,
  RolloutConfig,
  SamplerPolicy,
  make_controller,
  records,
  specs,
)
from mgrpo_jax.agents.thinking_oracle import ThinkingOraclePolicy
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.sampling import Sampler, SamplerConfig
from mgrpo_jax.tasks import pages, questions, world
from mgrpo_jax.tasks.oracle import OracleMainAgent, OracleSubAgent
from mgrpo_jax.text import (
  GENERATION_PROMPT_TEXT,
  IM_END,
  SentencePieceTokenizer,
  message_text,
)
from mgrpo_jax.tools import SearchIndex, default_registry

THINKING_TOKENS = 8
MAIN_SPEC = dataclasses.replace(specs.MAIN, system="Tools: delegate(subtask), reason(problem).")
SUB_SPEC = dataclasses.replace(specs.SUB, system="Tools: search(query), visit(page).")
SINGLE_SPEC = dataclasses.replace(specs.SINGLE, system="Tools: search, visit, reason.")
CONFIG = RolloutConfig(
  main=AgentLimits(max_turns=6, context_tokens=1024, max_new_tokens=96),
  sub=AgentLimits(max_turns=4, context_tokens=1024, max_new_tokens=96))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  w = world.generate_world("tiny", 5)
  page_list = pages.render_pages(w)
  registry = default_registry(SearchIndex.from_pages(page_list), top_n=2, visit_budget=300)
  qs = questions.synthesize(w, 12, stage=1, seed=3)
  corpus = [p.text for p in page_list] + [q.text for q in qs] + [
    s.system_prompt() for s in (MAIN_SPEC, SUB_SPEC, SINGLE_SPEC)]
  tokenizer = SentencePieceTokenizer.train(corpus, tmp_path_factory.mktemp("spm"), 1500)
  model = init_model(get_config("tiny", vocab_size=tokenizer.vocab_size, max_seq_len=512), 0)
  sampler = Sampler(model, tokenizer, config=SamplerConfig(
    prompt_buckets=(128, 512, 1024), generation_buckets=(THINKING_TOKENS,), batch_buckets=(8,)))
  return registry, qs, tokenizer, SamplerPolicy(sampler)


class LoggingPolicy:
  """`ThinkingOraclePolicy` that logs each turn's prompt ids and output, with version 7."""

  def __init__(self, inner):
    self.inner = inner
    self.version = 7
    self.log = {}  # request key -> [(prompt ids, TurnOutput)]

  def generate(self, requests, max_new_tokens, key):
    outputs = self.inner.generate(requests, max_new_tokens, key)
    for request, out in zip(requests, outputs, strict=True):
      self.log.setdefault(request.key, []).append((request.prompt_ids.copy(), out))
    return outputs


def _check_token_in_token_out(trajectory, turns, tokenizer):
  """ids == rendered messages + the policy's ids; mask and logprobs exactly on those."""
  ids, mask, logprobs = [], [], []
  assistant = 0
  for role, text in trajectory.messages:
    if role != "assistant":
      rendered = tokenizer.encode(message_text(role, text))
      ids += rendered
      mask += [False] * len(rendered)
      logprobs += [0.0] * len(rendered)
      continue
    prompt, out = turns[assistant]
    head = tokenizer.encode(GENERATION_PROMPT_TEXT)
    np.testing.assert_array_equal(prompt, ids + head)  # what the policy was shown
    sampled = out.ids.tolist()
    assert text == tokenizer.decode(sampled)
    closing = tokenizer.encode("\n" if sampled and sampled[-1] == tokenizer.eos_id
                               else IM_END + "\n")
    ids += head + sampled + closing
    mask += [False] * len(head) + [True] * len(sampled) + [False] * len(closing)
    logprobs += [0.0] * len(head) + out.logprobs.tolist() + [0.0] * len(closing)
    assistant += 1
  assert assistant == trajectory.num_turns == len(turns)
  np.testing.assert_array_equal(trajectory.ids, ids)
  np.testing.assert_array_equal(trajectory.loss_mask, mask)
  np.testing.assert_allclose(trajectory.logprobs, logprobs, rtol=0, atol=0)
  assert trajectory.ids.dtype == np.int32 and trajectory.logprobs.dtype == np.float32


@settings(max_examples=2)
@example(seed=5, num_queries=3, k=2, garbage_rate=0.2)
@given(seed=st.integers(0, 2**16), num_queries=st.integers(1, 3), k=st.integers(1, 2),
       garbage_rate=st.sampled_from([0.0, 0.2, 0.5]))
def test_token_in_token_out(env, seed, num_queries, k, garbage_rate):
  registry, qs, tokenizer, model_policy = env
  rng = np.random.default_rng(seed)
  tasks = [qs[i] for i in rng.choice(len(qs), num_queries, replace=False)]
  main, sub = (LoggingPolicy(ThinkingOraclePolicy(
      model_policy, oracle, tokenizer, thinking_tokens=THINKING_TOKENS,
      garbage_rate=garbage_rate, seed=seed)) for oracle in (OracleMainAgent(), OracleSubAgent()))
  controller = make_controller("mgrpo", Agent(main, tokenizer), registry, CONFIG,
                               sub=Agent(sub, tokenizer), main_spec=MAIN_SPEC,
                               sub_spec=SUB_SPEC)
  out = controller.run(tasks, k, seed)
  assert len(out.main) == num_queries * k
  for record in out.main:
    _check_token_in_token_out(record.trajectory, main.log[record.key + (-1,)], tokenizer)
    assert record.trajectory.policy_version == 7
  for record in out.sub:
    _check_token_in_token_out(record.trajectory, sub.log[record.key], tokenizer)
  assert len(main.log) == len(out.main) and len(sub.log) == len(out.sub)
  if garbage_rate == 0.0:  # thinking never contains a tag id: every rollout is well formed
    assert all(r.trajectory.format_ok for r in out.main + out.sub)
    assert out.sub


def _check_well_formed(record, limits):
  t = record.trajectory
  n = len(t.ids)
  assert t.loss_mask.shape == t.logprobs.shape == t.roles.shape == (n,)
  assert n <= limits.context_tokens
  assert 1 <= t.num_turns <= limits.max_turns
  assert 0 < t.num_sampled <= t.num_turns * limits.max_new_tokens
  assert np.all(np.isfinite(t.logprobs)) and np.all(t.logprobs[t.loss_mask] <= 0)
  assert np.all(t.logprobs[~t.loss_mask] == 0)
  assert np.all(t.roles[t.loss_mask] == 2)  # sampled ids are assistant tokens
  assert t.end in (records.END_RESULT, records.END_FORMAT, records.END_TURNS,
                   records.END_CONTEXT)
  assert t.format_ok == (t.end == records.END_RESULT)
  assert t.policy_version == 0 and t.wall_s >= 0


@pytest.mark.parametrize("mode", ["mgrpo", "oracle_main", "shared_policy", "single_agent"])
def test_model_rollouts_stay_within_limits(env, mode):
  registry, qs, tokenizer, model_policy = env
  config = dataclasses.replace(CONFIG, main=dataclasses.replace(CONFIG.main, max_new_tokens=8),
                               sub=dataclasses.replace(CONFIG.sub, max_new_tokens=8))
  model = Agent(model_policy, tokenizer)
  if mode == "single_agent":
    controller = make_controller(mode, model, registry, config, main_spec=SINGLE_SPEC)
  elif mode == "shared_policy":
    controller = make_controller(mode, model, registry, config, main_spec=MAIN_SPEC,
                                 sub_spec=SUB_SPEC)
  else:
    main = model if mode == "mgrpo" else Agent(OraclePolicy(OracleMainAgent(), tokenizer),
                                               tokenizer)
    if mode == "oracle_main":  # the oracle's turns need more than 8 tokens
      config = dataclasses.replace(config, main=CONFIG.main)
    controller = make_controller("mgrpo", main, registry, config, sub=model,
                                 main_spec=MAIN_SPEC, sub_spec=SUB_SPEC)
  out = controller.run(qs[:8], 1, 0)
  assert [r.key for r in out.main] == [(q.id, 0) for q in qs[:8]]
  for record in out.main:
    _check_well_formed(record, config.main)
    assert record.role == ("single" if mode == "single_agent" else "main")
  for record in out.sub:
    _check_well_formed(record, config.sub)
  if mode == "oracle_main":  # the oracle delegates; the model's reports are malformed
    assert len(out.sub) >= 8 and not any(r.trajectory.format_ok for r in out.sub)
    assert all(r.report.startswith("error: the sub-agent ended without a report")
               for r in out.sub)
  again = controller.run(qs[:8], 1, 0)
  for a, b in zip(out.main + out.sub, again.main + again.sub, strict=True):
    np.testing.assert_array_equal(a.trajectory.ids, b.trajectory.ids)
    np.testing.assert_array_equal(a.trajectory.logprobs, b.trajectory.logprobs)
  other = controller.run(qs[:8], 1, 1)
  first, second = out.main + out.sub, other.main + other.sub
  assert len(first) != len(second) or any(
    not np.array_equal(a.trajectory.ids, b.trajectory.ids)
    for a, b in zip(first, second, strict=True))
