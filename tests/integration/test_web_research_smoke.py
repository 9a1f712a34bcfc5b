"""configs/web_research.py:smoke as a user launches it, against a recorded web.

`launch/tpu_run.py --slice=all` trains M and S (tiny random models) for 2 RL steps on a
JSONL file of questions without gold paths, S's `search` and `visit` asking the local
site of tests/support/web_site.py, both judges a tiny random judge model. The agents act
by the scripted web routine of tests/support/web_research_policy.py (bound with gin),
so the recorded web fixes what the counters must say: each of the 2 x B x K = 8 S calls
makes one search, one visit of a title (`bad_url`, never sent) and one of the article,
each search or article visit a network request or a cache hit.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import urllib.parse

import pytest
from flax import nnx

from mgrpo_jax.metrics.writer import read_metrics
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.tasks import pages, world
from mgrpo_jax.tasks.model_judge import PROMPTS
from mgrpo_jax.text import SentencePieceTokenizer
from mgrpo_jax.tools.web import FAILURE_KINDS
from mgrpo_jax.training.checkpoint import save_params
from mgrpo_jax.training.judge_model import SCRATCH_CONTEXT
from tests.support.trainer_harness import shared_cache_overrides
from tests.support.web_site import ARTICLE, WebSite

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS, CALLS_PER_STEP = 2, 4  # B x K M rollouts, one delegation each (D = 1)
S_CALLS = STEPS * CALLS_PER_STEP
GIN = """import mgrpo_jax.training.agent_setup
import tests.support.web_research_policy
mgrpo_jax.training.rollout_policy.wrapper = @web_research_policy.WebThinkingOracle
"""
# A plain file: no ids, no gold paths.
QUESTIONS = [{"question": "Which engineer built the lighthouse of Varn?", "answer": "Ada Morrow"},
             {"question": "Who was the last keeper of the lighthouse of Varn?",
              "answer": "Tomas Brenn"}]


@pytest.fixture
def site():
  server = WebSite()
  yield server
  server.close()


def _tiny_judge(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
  """(checkpoint, tokenizer file) of a random `tiny` judge model."""
  corpus = [p.text for p in pages.render_pages(world.generate_world("tiny", 5))] + [
      (PROMPTS / name).read_text() for name in ("answer.txt", "expert.txt")] + list(ARTICLE)
  SentencePieceTokenizer.train(corpus, folder / "spm", 600)
  tokenizer = SentencePieceTokenizer.load(folder / "spm")
  model = init_model(get_config("tiny", vocab_size=tokenizer.vocab_size,
                                max_seq_len=SCRATCH_CONTEXT), 1)
  save_params(folder / "checkpoint", nnx.split(model, nnx.Param, ...)[1])
  return folder / "checkpoint", folder / "spm" / "tokenizer.model"


def test_web_research_smoke_trains_on_the_recorded_web(site, tmp_path):
  assert all(q["answer"] in " ".join(ARTICLE) for q in QUESTIONS)  # the web holds them
  questions = tmp_path / "questions.jsonl"
  questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
  checkpoint, tokenizer = _tiny_judge(tmp_path / "judge")
  (tmp_path / "web.gin").write_text(GIN)
  workdir, cache = tmp_path / "run", tmp_path / "web_cache"
  argv = [sys.executable, str(ROOT / "launch" / "tpu_run.py"), "--slice=all",
          "--config=" + str(ROOT / "configs" / "web_research.py") + ":smoke",
          f"--workdir={workdir}", f"--gin_file={tmp_path / 'web.gin'}",
          f"--config.world.source_path={questions}",
          f"--config.tools.web.search_url={site.url('/searxng')}",
          f"--config.tools.web.cache_dir={cache}",
          f"--config.rewards.judge.checkpoint={checkpoint}",
          f"--config.rewards.judge.tokenizer={tokenizer}", *shared_cache_overrides()]
  result = subprocess.run(argv, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
  assert result.returncode == 0, result.stdout[-4000:]

  main = read_metrics(workdir / "logs" / "main" / "metrics.jsonl")
  sub = read_metrics(workdir / "logs" / "sub" / "metrics.jsonl")
  assert [m["step"] for m in main] == [m["step"] for m in sub] == list(range(STEPS))
  for m, s in zip(main, sub, strict=True):  # the routine ran: one well-formed call each
    assert (m["main/format_ok_mean"], m["main/sub_calls_mean"]) == (1.0, 1.0)
    assert s["sub/calls"] == CALLS_PER_STEP
  last = sub[-1]  # the counters count since the slice started
  assert last["tools/web/failures/bad_url"] == S_CALLS
  assert all(last[f"tools/web/failures/{k}"] == 0 for k in FAILURE_KINDS if k != "bad_url")
  # every search and every article visit: a request to the site, or the cache's answer
  assert last["tools/web/requests"] + last["tools/web/cache_hits"] == 2 * S_CALLS
  assert last["tools/web/retries"] == 0 and last["tools/web/cache_hits"] > 0
  assert last["tools/web/requests"] == site.hits["/searxng/search"] + site.hits[
      "/page/lighthouse"]
  assert site.hits["/searxng/search"] >= len(QUESTIONS) and site.hits["/page/lighthouse"] >= 1

  # the cache holds one answer per distinct request: each question's search, the article
  records = [json.loads(p.read_text()) for p in cache.glob("*/*.json")]
  searches = [site.url("/searxng/search?" + urllib.parse.urlencode(
      {"q": q["question"], "format": "json"})) for q in QUESTIONS]
  assert sorted(r["request"]["url"] for r in records) == sorted(
      [site.url("/page/lighthouse"), *searches])

  # M's answers are judged in the main slice, S's reports in the sub slice
  for metrics, name in ((main[-1], "answer"), (sub[-1], "expert")):
    counts = {k: metrics[f"judge/{name}/{k}"] for k in
              ("items", "cached", "generated", "verdicts", "failures")}
    assert counts["items"] == S_CALLS, (name, counts)
    assert counts["verdicts"] + counts["failures"] == counts["items"]
    # each distinct prompt is generated once; step 1's items repeat step 0's: cached
    assert 1 <= counts["generated"] <= counts["items"] - counts["cached"]
    assert counts["cached"] >= CALLS_PER_STEP
  assert "judge/answer/items" not in sub[-1]
  # the main slice logs its own registry's counters: M calls no web tool, S's run in the
  # sub slice's service
  web = {key: value for key, value in main[-1].items() if key.startswith("tools/web/")}
  assert web and set(web.values()) == {0.0}
