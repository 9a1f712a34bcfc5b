"""A user's judges bound with gin (`mgrpo_jax.plugins.answer_judge.fn`, `expert_judge.fn`)
replace the configured ones wherever a run builds its judges (`training.judge_setup`)."""

from __future__ import annotations

import sys
import textwrap
import types

import gin
import pytest

from mgrpo_jax import plugins
from mgrpo_jax.agents.scoring import score
from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.training.judge_setup import run_judges
from tests.support.page_records import delegating_record, sub_record


@pytest.fixture
def user_judges(tmp_path):
  gin.clear_config()
  (tmp_path / "user_judges.py").write_text(textwrap.dedent("""
      import gin

      @gin.configurable
      def lenient(task, prediction):
        return float(task.answer.lower() in prediction.lower())

      @gin.configurable
      class Counting:
        def __init__(self):
          self.batches = 0

        def __call__(self, task, subtask, report):
          return 0.5

        def batch(self, items):
          self.batches += 1
          return [0.5 if item.evidence else 0.25 for item in items]
      """))
  sys.path.insert(0, str(tmp_path))
  yield
  sys.path.remove(str(tmp_path))
  sys.modules.pop("user_judges", None)
  gin.clear_config()


def test_bound_judges_replace_the_configured_ones_and_are_named(user_judges, tmp_path):
  plugins.parse_gin([], ["import user_judges",
                         "mgrpo_jax.plugins.answer_judge.fn = @user_judges.lenient",
                         "mgrpo_jax.plugins.expert_judge.fn = @user_judges.Counting()"])
  config = base_config()
  apply_overrides(config, {"rewards.answer_judge": "model"})  # the binding wins
  judges = run_judges(config, tmp_path, gold_path=lambda *args: 1.0)
  assert judges.answer.__name__ == "lenient" and type(judges.expert).__name__ == "Counting"
  questions = {"q": types.SimpleNamespace(id="q", text="?", answer="Gold")}
  main, sub = score([delegating_record("q", 0, 1, "the gold one", float("nan"))],
                    [sub_record("q", 0, 0)], questions, judges.answer, judges.expert)
  assert main[0].correct == 1.0 and sub[0].expert == 0.25 and judges.expert.batches == 1
  assert plugins.bound_rewards() == {
      "mgrpo_jax.plugins.answer_judge.fn": "user_judges.lenient",
      "mgrpo_jax.plugins.expert_judge.fn": "user_judges.Counting"}


def test_without_bindings_there_is_no_bound_judge():
  gin.clear_config()
  assert plugins.answer_judge() is None and plugins.expert_judge() is None
  assert plugins.bound_rewards() == {}
