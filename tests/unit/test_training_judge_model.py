"""The judge model end to end: a tiny randomly initialised model of this project (preset
`tiny`, a parameter checkpoint and a SentencePiece tokenizer, as `rewards.judge.*` names
them) asked through the real sampler. A random model's replies are noise, so the test
asserts what holds for any model: every item gets exactly one of a verdict or a counted
failure, the counts add up, greedy replies are deterministic, and a second ask is served
from the cache without the model."""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.tasks import pages, questions, world
from mgrpo_jax.tasks.judge_cache import JudgeCache
from mgrpo_jax.tasks.judges import AnswerItem, ExactMatchJudge, ReportItem, answer_scores
from mgrpo_jax.tasks.model_judge import ANSWER_VERDICTS, EXPERT_VERDICTS, PROMPTS, ModelJudge
from mgrpo_jax.text import SentencePieceTokenizer, render_chat
from mgrpo_jax.training.checkpoint import save_params
from mgrpo_jax.training.judge_model import SCRATCH_CONTEXT, JudgeSettings, SamplerJudgeModel
from mgrpo_jax.training.judge_setup import judge_scalars, run_judges


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """(config of a tiny model judge, questions, the checkpoint's params)."""
  root = tmp_path_factory.mktemp("judge")
  w = world.generate_world("tiny", 5)
  corpus = [p.text for p in pages.render_pages(w)] + [
      (PROMPTS / name).read_text() for name in ("answer.txt", "expert.txt")]
  SentencePieceTokenizer.train(corpus, root / "spm", 600)
  tokenizer = SentencePieceTokenizer.load(root / "spm")
  model = init_model(get_config("tiny", vocab_size=tokenizer.vocab_size,
                                max_seq_len=SCRATCH_CONTEXT), 1)
  params = nnx.split(model, nnx.Param, ...)[1]
  save_params(root / "checkpoint", params)
  config = base_config()
  apply_overrides(config, {
      "rewards.answer_judge": "model", "rewards.expert_judge": "model",
      "rewards.judge.preset": "tiny", "rewards.judge.checkpoint": str(root / "checkpoint"),
      "rewards.judge.tokenizer": str(root / "spm" / "tokenizer.model"),
      "rewards.judge.max_new_tokens": 8, "rewards.judge.batch_size": 4,
      "rewards.judge.failure_score": 0.5, "rewards.judge.cache_dir": "cache"})
  qs = questions.synthesize(w, 4, stage=1, seed=3)
  return config, qs, params


def _items(qs):
  return [AnswerItem(q, candidate) for q in qs for candidate in (q.answer, "nobody")]


def _fields(qs):
  return [{"question": q.text, "gold_answer": q.answer, "candidate": q.answer} for q in qs]


def test_every_item_gets_a_verdict_or_a_counted_failure_and_reruns_hit_the_cache(tiny,
                                                                                 tmp_path):
  config, qs, params = tiny
  judges = run_judges(config, tmp_path, gold_path=None)
  answer = judges.answer
  model = answer.judge.model
  assert judges.expert.judge.model is model  # one model for both judges
  before = model.completions
  first = answer.judgements(_items(qs))
  assert len(first) == 8
  for j in first:
    assert (j.verdict is None) == bool(j.problem)
    assert j.score == (0.5 if j.verdict is None else ANSWER_VERDICTS[j.verdict])
    assert not j.cached
  counters = answer.counters
  assert counters.items == counters.verdicts + counters.failures == 8
  assert counters.generated == model.completions - before == 8
  assert len(list((tmp_path / "cache").rglob("*.json"))) == 8
  loaded = nnx.split(model.load()[0].model, nnx.Param, ...)[1]
  jax.tree.map(np.testing.assert_array_equal, loaded, params)  # the checkpoint's weights

  again = answer.judgements(_items(qs))
  assert [(j.verdict, j.score, j.reply) for j in again] == [
      (j.verdict, j.score, j.reply) for j in first]
  assert all(j.cached for j in again) and model.completions - before == 8
  assert counters.cached == 8 and counters.generated == 8
  assert judge_scalars(answer=answer, expert=None)["judge/answer/items"] == 16.0


def test_greedy_replies_are_deterministic(tiny, tmp_path):
  config, qs, _ = tiny
  first = run_judges(config, tmp_path / "a", gold_path=None).answer.judge
  replies = [j.reply for j in first.judge_fields(_fields(qs))]
  fresh = ModelJudge(SamplerJudgeModel(JudgeSettings.from_config(config.rewards)),
                     first.prompt, JudgeCache(tmp_path / "b"), ANSWER_VERDICTS,
                     verdict_format="final_line", failure_score=0.5)
  assert [j.reply for j in fresh.judge_fields(_fields(qs))] == replies
  assert fresh.model.completions == len(replies)


def test_the_expert_judge_grades_reports_with_their_evidence(tiny, tmp_path):
  config, qs, _ = tiny
  expert = run_judges(config, tmp_path, gold_path=None).expert
  reports = [ReportItem(q, f"the answer to: {q.text}", q.answer, f"page of {q.answer}")
             for q in qs]
  model = expert.judge.model
  before = model.completions
  outcomes = expert.judgements(reports)
  for j in outcomes:
    assert (j.verdict is None) == bool(j.problem)
    assert j.score == (0.5 if j.verdict is None else EXPERT_VERDICTS[j.verdict])
  assert expert.counters.items == expert.counters.verdicts + expert.counters.failures == 4
  assert model.completions - before == expert.counters.generated == 4
  assert expert.batch(reports) == [j.score for j in outcomes]
  assert expert.counters.cached == 4 and model.completions - before == 4


def test_the_configured_judges_are_the_programmatic_ones_by_default(tmp_path):
  gold = types.SimpleNamespace()
  judges = run_judges(base_config(), tmp_path, gold_path=gold)
  assert isinstance(judges.answer, ExactMatchJudge) and judges.expert is gold
  assert judge_scalars(answer=judges.answer, expert=judges.expert) == {}
  task = types.SimpleNamespace(answer="1,200")
  assert answer_scores(judges.answer, [AnswerItem(task, "1200"), AnswerItem(task, "12")]) == [
      1.0, 0.0]


def test_a_reply_prefix_primes_the_assistant_turn(tiny, monkeypatch):
  config, _, _ = tiny
  model = SamplerJudgeModel(JudgeSettings.from_config(config.rewards))
  sampler, tokenizer = model.load()
  seen = []
  generate = sampler.generate
  monkeypatch.setattr(sampler, "generate",
                      lambda ids, *args: seen.append(ids) or generate(ids, *args))
  replies = model.complete(["Is it right?"], reply_prefix="Verdict:")
  plain = render_chat(tokenizer, [{"role": "user", "content": "Is it right?"}],
                      add_generation_prompt=True).ids.tolist()
  assert seen[0] == [plain + tokenizer.encode("Verdict:")]
  model.complete(["Is it right?"])
  assert seen[1] == [plain] and len(replies) == 1
