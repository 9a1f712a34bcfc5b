"""Plumbing end to end without a model: the world's oracles as both agents' policies.

The records must say exactly what the sequential reference runner
(`tasks.oracle.run_episode`) did: the same delegations, tool calls, reports, answers,
sampled ids and rewards. Limits (turns, context budgets, sub-calls), the summarizer,
batching (one policy call per agent per round) and serialization are checked here too.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from mgrpo_jax import plugins
from mgrpo_jax.agents import (
  Agent,
  AgentLimits,
  OraclePolicy,
  RolloutConfig,
  SubAgentResult,
  SubTaskRequest,
  make_controller,
  protocol,
  records,
  score,
)
from mgrpo_jax.agents.oracle_policy import render_oracle_action
from mgrpo_jax.core.rewards import RewardWeights
from mgrpo_jax.serving import messages
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.tasks import judges, pages, questions, statements, world
from mgrpo_jax.tasks.oracle import OracleMainAgent, OracleSubAgent, run_episode
from mgrpo_jax.text import (
  GENERATION_PROMPT_TEXT,
  IM_END,
  SentencePieceTokenizer,
  message_text,
)
from mgrpo_jax.tools import SearchIndex, default_registry

K = 2
CONFIG = RolloutConfig(main=AgentLimits(max_turns=24, context_tokens=8192, max_new_tokens=128),
                       sub=AgentLimits(max_turns=6, context_tokens=8192, max_new_tokens=128))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  w = world.generate_world("tiny", 11)
  page_list = pages.render_pages(w)
  registry = default_registry(SearchIndex.from_pages(page_list))
  qs = (questions.synthesize(w, 40, stage=1, seed=1, id_prefix="a")
        + questions.synthesize(w, 40, stage=2, seed=2, id_prefix="b"))
  tokenizer = SentencePieceTokenizer.train([p.text for p in page_list] + [q.text for q in qs],
                                           tmp_path_factory.mktemp("spm"), 800)
  return w, registry, qs, tokenizer


class CountingPolicy:
  """The real oracle policy, with each call's request keys written down."""

  def __init__(self, policy):
    self.policy = policy
    self.version = policy.version
    self.calls: list[list[tuple]] = []

  def generate(self, requests, max_new_tokens, key):
    self.calls.append([r.key for r in requests])
    return self.policy.generate(requests, max_new_tokens, key)


def _controller(env, config=CONFIG, **kwargs):
  _, registry, _, tokenizer = env
  main = CountingPolicy(OraclePolicy(OracleMainAgent(), tokenizer))
  sub = CountingPolicy(OraclePolicy(OracleSubAgent(), tokenizer))
  controller = make_controller("mgrpo", Agent(main, tokenizer), registry, config,
                               sub=Agent(sub, tokenizer), **kwargs)
  return controller, main, sub


@pytest.fixture(scope="module")
def batch(env):
  controller, main, sub = _controller(env)
  out = controller.run(env[2], K, 0)
  return out, controller, main, sub


def test_oracle_rollouts_are_correct_and_well_formed(env, batch):
  w, _, qs, _ = env
  out = batch[0]
  main, sub = score(out.main, out.sub, qs, judges.ExactMatchJudge(),
                    judges.ProgrammaticExpertJudge(w))
  assert len(main) == len(qs) * K
  assert [r.key for r in main] == [(q.id, k) for q in qs for k in range(K)]
  assert np.mean([r.correct for r in main]) >= 0.99
  assert all(r.trajectory.format_ok and r.trajectory.end == records.END_RESULT
             for r in main + sub)
  assert np.mean([r.expert for r in sub]) >= 0.99
  r_main, r_sub = _rewards(main, sub)
  np.testing.assert_allclose(r_main, [0.1 + 0.9 * r.correct for r in main], rtol=1e-6)
  np.testing.assert_allclose(
    r_sub, [0.1 + 0.4 * r.main_correct + 0.5 * r.expert for r in sub], rtol=1e-6)


def _rewards(main, sub):
  """R_M [N] and R_S [M] of scored records through the run's one reward path, with the
  paper's weights."""
  def field(rs, name):
    return np.array([getattr(r, name) for r in rs])

  def format_ok(rs):
    return np.array([r.trajectory.format_ok for r in rs], bool)

  return (plugins.main_rewards(format_ok(main), field(main, "correct"), RewardWeights()),
          plugins.sub_rewards(format_ok(sub), field(sub, "main_correct"), field(sub, "expert"),
                              RewardWeights()))


def _sampled_segments(trajectory):
  """The runs of consecutive sampled ids, in order."""
  mask = trajectory.loss_mask.astype(np.int8)
  edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
  return [trajectory.ids[a:b].tolist() for a, b in zip(edges[::2], edges[1::2], strict=True)]


def test_records_match_the_sequential_reference_runner(env, batch):
  w, registry, qs, tokenizer = env
  out = batch[0]
  expert_judge = judges.ProgrammaticExpertJudge(w)
  main, sub = score(out.main, out.sub, qs, judges.ExactMatchJudge(), expert_judge)
  subs = {}
  for r in sub:
    subs.setdefault((r.query_id, r.rollout_index), []).append(r)
  eos = [tokenizer.eos_id]
  for q in qs:
    ref = run_episode(q.text, OracleMainAgent(), OracleSubAgent(), registry,
                      max_main_turns=CONFIG.main.max_turns,
                      max_sub_turns=CONFIG.sub.max_turns)
    for k in range(K):
      record = main[qs.index(q) * K + k]
      t = record.trajectory
      assert t.final == ref.answer
      assert record.correct == float(judges.answers_match(ref.answer, q.answer))
      assert record.num_sub_calls == len(ref.sub_calls)
      assert t.num_turns == len(ref.main_steps) + 1
      names = ["delegate" if s.action.kind == "delegate" else s.action.name
               for s in ref.main_steps]
      assert [c.name for c in t.tool_calls] == names
      observations = [text for role, text in t.messages[2:] if role == "user"]
      assert observations == [protocol.render_observation(s.observation)
                              for s in ref.main_steps]
      actions = [s.action for s in ref.main_steps] + [
        OracleMainAgent().next_action(q.text, ref.main_steps)]
      assert _sampled_segments(t) == [tokenizer.encode(render_oracle_action(a)) + eos
                                      for a in actions]
      calls = subs.get((q.id, k), [])
      assert [c.call_index for c in calls] == list(range(len(ref.sub_calls)))
      for call, ref_call in zip(calls, ref.sub_calls, strict=True):
        assert call.subtask == ref_call.subtask
        assert call.trajectory.final == call.report == ref_call.report
        assert [(c.name, c.arguments) for c in call.trajectory.tool_calls] == [
          (s.action.name, json.dumps(dict(s.action.args), ensure_ascii=False, sort_keys=True))
          for s in ref_call.steps]
        assert call.expert == expert_judge(q, ref_call.subtask, ref_call.report)
        assert call.main_correct == record.correct


def test_one_policy_call_per_agent_per_round(env, batch):
  out, controller, main_policy, sub_policy = batch
  stats = out.stats
  assert len(main_policy.calls) == stats.main.rounds == stats.main.policy_calls
  assert main_policy.calls[0] == [(q.id, k, -1) for q in env[2] for k in range(K)]
  turns = {r.key + (-1,): r.trajectory.num_turns for r in out.main}
  for r, call in enumerate(main_policy.calls):  # exactly the episodes still running
    assert call == [key for key in turns if turns[key] > r]
  sub_turns = {r.key: r.trajectory.num_turns for r in out.sub}
  seen = {}
  for call in sub_policy.calls:
    assert len(set(call)) == len(call)
    for key in call:
      seen[key] = seen.get(key, 0) + 1
  assert seen == sub_turns
  client = controller.sub_client
  assert client.stats.policy_calls == len(sub_policy.calls)
  # One S batch per M round with delegations, each run for as many rounds as its
  # longest call needs: the number of S calls is the sum of those maxima.
  by_batch = {}
  for r in out.sub:
    rollout_turn = [c.turn for c in next(m for m in out.main if m.key == (
      r.query_id, r.rollout_index)).trajectory.tool_calls if c.name == "delegate"][r.call_index]
    by_batch.setdefault(rollout_turn, []).append(r.trajectory.num_turns)
  assert len(sub_policy.calls) == sum(max(v) for v in by_batch.values())
  assert stats.sub_calls == len(out.sub)


def test_rollouts_are_deterministic(env, batch):
  again, _, _ = _controller(env)
  out = again.run(env[2][:10], K, 0)
  assert len(out.main) == 10 * K
  for a, b in zip(out.main, batch[0].main[:10 * K], strict=True):
    np.testing.assert_array_equal(a.trajectory.ids, b.trajectory.ids)


def _question(qs, qtype):
  return next(q for q in qs if q.type == qtype and q.hops >= 2)


def test_sub_call_limit_gives_an_error_observation(env):
  qs = env[2]
  q = _question(qs, "multihop")
  controller, _, _ = _controller(env, dataclasses.replace(CONFIG, max_sub_calls=1))
  out = controller.run([q], 1, 0)
  record = out.main[0]
  assert record.num_sub_calls == 1 and len(out.sub) == 1
  assert [c.ok for c in record.trajectory.tool_calls[:2]] == [True, False]
  assert "limit of 1 sub-agent calls" in record.trajectory.messages[5][1]
  assert record.trajectory.format_ok  # the oracle still answers (with "unknown")
  assert record.trajectory.final == "unknown"


def test_turn_limit_ends_with_format_zero(env):
  q = _question(env[2], "multihop")
  config = dataclasses.replace(CONFIG, sub=dataclasses.replace(CONFIG.sub, max_turns=2))
  controller, _, _ = _controller(env, config)
  out = controller.run([q], 1, 0)
  call = out.sub[0]
  assert call.trajectory.end == records.END_TURNS and not call.trajectory.format_ok
  assert call.trajectory.num_turns == 2 and call.trajectory.final is None
  assert call.report == "error: the sub-agent ended without a report (turn_limit)"
  assert out.main[0].trajectory.final == "unknown"
  config = dataclasses.replace(CONFIG, main=dataclasses.replace(CONFIG.main, max_turns=1))
  out = _controller(env, config)[0].run([q], 1, 0)
  assert out.main[0].trajectory.end == records.END_TURNS
  assert not out.main[0].trajectory.format_ok


def test_context_budget_asks_for_the_answer_then_ends(env, batch):
  """The visit observation of an S call is made not to fit: the notice replaces it."""
  tokenizer = env[3]
  record = batch[0].sub[0]
  t = record.trajectory
  starts = np.flatnonzero(np.diff(t.roles, prepend=-1) != 0)
  user_starts = [int(s) for s in starts if t.roles[s] == 1]
  visit_start = user_starts[2]  # task message, search observation, visit observation
  visit_len = len(tokenizer.encode(message_text("user", t.messages[5][1])))
  notice_len = len(tokenizer.encode(message_text("user", CONFIG.answer_now)))
  room = (len(tokenizer.encode(GENERATION_PROMPT_TEXT)) + CONFIG.sub.max_new_tokens
          + len(tokenizer.encode(IM_END + "\n")))
  assert notice_len < visit_len
  q = next(q for q in env[2] if q.id == record.query_id)
  for budget, end in ((visit_start + visit_len + room - 1, records.END_RESULT),
                      (visit_start + notice_len + room - 1, records.END_CONTEXT)):
    config = dataclasses.replace(CONFIG, sub=dataclasses.replace(CONFIG.sub,
                                                                 context_tokens=budget))
    out = _controller(env, config)[0].run([q], 1, 0)
    call = out.sub[0].trajectory
    assert call.end == end
    assert len(call.ids) <= budget
    if end == records.END_RESULT:  # the oracle reports what it has: nothing
      assert call.messages[5] == ("user", CONFIG.answer_now)
      assert call.format_ok and call.final == statements.NO_FACTS
    else:
      assert not call.format_ok and len(call.messages) == 5


def test_summarizer_budget_and_plug_in(env):
  q = next(x for x in env[2] if x.type == "lookup")
  config = dataclasses.replace(CONFIG, report_chars=10)
  out = _controller(env, config)[0].run([q], 1, 0)
  call = out.sub[0]
  assert call.report == call.trajectory.final[:10] + " [truncated]"
  assert out.main[0].trajectory.messages[3] == ("user", protocol.render_observation(call.report))
  out = _controller(env, summarizer=lambda t: f"{t.num_turns} turns")[0].run([q], 1, 0)
  assert out.sub[0].report == "3 turns"
  assert out.main[0].trajectory.messages[3][1] == protocol.render_observation("3 turns")


def test_sub_agent_interface_crosses_the_service_unchanged(env, batch):
  request = SubTaskRequest("q-1", 3, 2, "Find the founder of X.", "ctx")
  assert messages.task_from_proto(messages.task_to_proto(request)) == request
  record = batch[0].sub[0]
  result = SubAgentResult(record.report, record)
  back = messages.result_from_proto(pb.SubRecord.FromString(
      messages.result_to_proto(result).SerializeToString()))
  assert back.record.digest() == record.digest()
  assert back.report == result.report and back.record.key == record.key
  for field in ("ids", "loss_mask", "logprobs", "roles"):
    a, b = getattr(back.record.trajectory, field), getattr(record.trajectory, field)
    np.testing.assert_array_equal(a, b)
    assert a.dtype == b.dtype
  assert back.record.trajectory.tool_calls == record.trajectory.tool_calls
  assert back.record.trajectory.messages == record.trajectory.messages
