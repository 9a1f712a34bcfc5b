"""An evaluation's records as trajectory page data: questions in order, S's calls under
M's delegations, a delegation refused by the sub-call limit without one, R_M through the
run's (gin-replaceable) reward with its weights; the evaluation's page, named by its
label, with its legend and index."""

from __future__ import annotations

import types

import pytest

from mgrpo_jax import plugins
from mgrpo_jax.agents.records import MainRecord
from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.core.rewards import RewardWeights
from mgrpo_jax.evaluation import stage
from mgrpo_jax.evaluation.trajectories import evaluation_credit, page_questions
from mgrpo_jax.training.paths import RunPaths
from tests.support import user_rewards
from tests.support.page_records import sub_record, trajectory

QUESTIONS = {q: types.SimpleNamespace(text=f"text {q}", answer="gold", type="lookup")
             for q in ("a", "b", "c")}
PAPER = RewardWeights()


@pytest.fixture
def records():
  delegating = trajectory([("d0", "delegate", "r0"), ("d1", "delegate", "r1"),
                            ("reason", "reason", "4"), ("d2", "delegate", "refused"),
                            ("<result>gold</result>", None, "")], "gold")
  main = [MainRecord("a", 0, "main", delegating, 2, 1.0),
          MainRecord("a", 1, "main", trajectory([("x", None, "")], None, False), 0, 0.0),
          MainRecord("b", 0, "main", trajectory([("<result>no</result>", None, "")], "no"),
                     0, 0.0),
          MainRecord("c", 0, "main", trajectory([("y", None, "")], "y"), 0, 0.0)]
  scored = {"expert": 0.0, "main_correct": 1.0}
  return main, [sub_record("a", 0, 1, **scored), sub_record("a", 0, 0, **scored)]


def _pages(main, sub, limit, weights=PAPER):
  return page_questions(main, sub, QUESTIONS, limit=limit,
                        credit=evaluation_credit(main, weights))


def test_questions_in_order_up_to_the_limit(records):
  main, sub = records
  out = _pages(main, sub, 2)
  assert [q.id for q in out] == ["a", "b"]
  assert [[r.index for r in q.rollouts] for q in out] == [[0, 1], [0]]
  assert _pages(main, sub, 0) == []


def test_sub_calls_go_to_delegations_in_order_and_not_to_a_refused_one(records):
  main, sub = records
  rollout = _pages(main, sub, 1)[0].rollouts[0]
  assistant = [m for m in rollout.messages if m.role == "assistant"]
  assert [m.sub_call.index if m.sub_call else None for m in assistant] == [0, 1, None, None,
                                                                          None]
  assert [m.tool.split()[0] if m.tool else "" for m in assistant] == [
      "delegate", "delegate", "reason", "delegate", ""]
  assert [m.role for m in rollout.messages[:4]] == ["system", "task", "assistant",
                                                    "observation"]
  call = assistant[0].sub_call
  assert call.subtask == "subtask 0" and call.final == "s0" and call.reward is None
  assert [m.role for m in call.messages] == ["system", "task", "assistant", "observation",
                                             "assistant"]


def test_correctness_and_r_main(records):
  main, sub = records
  (question,) = _pages(main, sub, 1)
  first, second = question.rollouts
  assert (first.correct, second.correct) == (True, False)
  assert first.reward == pytest.approx(1.0) and second.reward == 0.0  # format error
  assert first.advantage is None and second.advantage is None  # an evaluation has no A_M
  assert (first.final, second.final) == ("gold", None)
  assert (question.text, question.gold, question.kind) == ("text a", "gold", "lookup")


@pytest.mark.parametrize("label, name", [("final", "eval_final.html"),
                                         ("warm_start", "eval_warm_start.html"),
                                         ("step_10", "eval_step_00010.html")])
def test_an_evaluations_page_is_named_by_its_label(records, tmp_path, label, name):
  main, sub = records
  config = base_config()
  apply_overrides(config, {"eval.viewer_questions": 2})
  paths = RunPaths(str(tmp_path), tmp_path, str(tmp_path / "store"))
  summary = {"accuracy": 0.5, "accuracy_ci95": 0.1, "num_questions": 3, "num_rollouts": 4,
             "format_rate": 0.75, "sub_calls_mean": 0.5}
  result = types.SimpleNamespace(main=main, sub=sub, questions=QUESTIONS)
  stage.write_page(config, paths, label, result, summary)
  assert [p.name for p in (tmp_path / "report").iterdir()] == [name]
  page = (tmp_path / "report" / name).read_text()
  assert f"Held-out evaluation: {label}" in page and 'class="legend"' in page
  assert page.index('<a href="#q-a">text a</a>') < page.index('<a href="#q-b">text b</a>')
  assert 'id="q-a"' in page and 'id="q-b"' in page and 'id="q-c"' not in page


def test_r_main_takes_the_runs_weights(records):
  main, sub = records
  (question,) = _pages(main, sub, 1, RewardWeights(a1=0.3, a2=0.5))
  assert [r.reward for r in question.rollouts] == pytest.approx([0.8, 0.0])
  credit = evaluation_credit(main, RewardWeights(a1=0.3, a2=0.5))
  assert list(credit.main) == [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
  assert [r for r, _ in credit.main.values()] == pytest.approx([0.8, 0.0, 0.3, 0.3])
  assert all(a is None for _, a in credit.main.values())
  assert credit.sub == {} and evaluation_credit([], PAPER).main == {}


@pytest.mark.usefixtures("clean_gin")
def test_a_gin_bound_main_reward_is_the_one_shown(records):
  main, sub = records
  plugins.parse_gin([], [f"import {user_rewards.__name__}", user_rewards.BINDING])
  pages = _pages(main, sub, 3)
  assert [[r.reward for r in q.rollouts] for q in pages] == [[2.0, -1.0], [-1.0], [-1.0]]
