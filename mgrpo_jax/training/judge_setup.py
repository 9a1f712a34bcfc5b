"""A run's judges, from its config: r_correct of M's answers and r_expert of S's reports.

  judges = run_judges(config, root, gold_path=world_judge)
  score(main, sub, tasks, judges.answer, judges.expert)

A judge bound with gin (`plugins.answer_judge`, `plugins.expert_judge`) is used; else
`rewards.answer_judge` chooses `exact` (`tasks.judges.ExactMatchJudge`) or `model`, and
`rewards.expert_judge` chooses `gold_path` (the world's programmatic judge the caller
passes, None where no world knows the facts) or `model`. The model judges
(`tasks.model_judge`) share one `SamplerJudgeModel` of `rewards.judge.*` per process and
settings, loaded at its first uncached item, and one reply cache in
`rewards.judge.cache_dir` (relative to `root`, the run's local folder). Training, the
trajectory pages, the held-out evaluation and stage 2's selection all build their
judges here.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable
from typing import Any

from mgrpo_jax import plugins
from mgrpo_jax.tasks.judge_cache import JudgeCache
from mgrpo_jax.tasks.judges import AnswerJudge, ExactMatchJudge, ExpertJudge
from mgrpo_jax.tasks.model_judge import (
  ANSWER_FIELDS,
  EXPERT_FIELDS,
  JudgePrompt,
  ModelAnswerJudge,
  ModelExpertJudge,
  ModelJudge,
  default_prompt,
  verdicts,
)
from mgrpo_jax.text import Tokenizer
from mgrpo_jax.training.judge_model import JudgeSettings, SamplerJudgeModel

# The judge models of this process, by settings: the judges built for training, pages
# and evaluations share one loaded model.
_MODELS: dict[JudgeSettings, SamplerJudgeModel] = {}


@dataclasses.dataclass(frozen=True)
class RunJudges:
  """The answer judge and the expert judge (None: S's reports are not scored)."""

  answer: AnswerJudge
  expert: ExpertJudge | None


def run_judges(config, root: str | pathlib.Path, gold_path: ExpertJudge | None,
               world_tokenizer: Callable[[], Tokenizer] | None = None) -> RunJudges:
  """The judges of `config` (module docstring).

  Args:
    root: the run's local folder (a relative `rewards.judge.cache_dir` is under it).
    gold_path: the programmatic expert judge of the questions' world(s), or None.
    world_tokenizer: the world's tokenizer, for a judge preset trained from scratch
      without `rewards.judge.tokenizer`.
  """
  rewards = config.rewards
  settings = JudgeSettings.from_config(rewards)
  answer, expert = plugins.answer_judge(), plugins.expert_judge()
  if answer is None:
    answer = (ExactMatchJudge() if rewards.answer_judge == "exact" else ModelAnswerJudge(
        _model_judge(settings, root, world_tokenizer, "answer")))
  if expert is None:
    expert = (gold_path if rewards.expert_judge == "gold_path" else ModelExpertJudge(
        _model_judge(settings, root, world_tokenizer, "expert"),
        evidence_chars=settings.evidence_chars))
  return RunJudges(answer, expert)


def judge_scalars(**judges: Any) -> dict[str, float]:
  """The counters of the model judges among `judges` (by name, e.g. `answer=...`) as
  `judge/<name>/<counter>`: what a step logs; {} without a model judge."""
  out = {}
  for name, judge in judges.items():
    counters = getattr(judge, "counters", None)
    if counters is not None:
      out.update(counters.scalars(f"judge/{name}"))
  return out


def _model_judge(settings: JudgeSettings, root: str | pathlib.Path,
                 world_tokenizer: Callable[[], Tokenizer] | None, kind: str) -> ModelJudge:
  """The `kind` ("answer", "expert") judge over the process's model of `settings`."""
  if settings not in _MODELS:
    _MODELS[settings] = SamplerJudgeModel(settings, world_tokenizer)
  fields, prompt = {"answer": (ANSWER_FIELDS, settings.answer_prompt),
                    "expert": (EXPERT_FIELDS, settings.expert_prompt)}[kind]
  grammar = settings.verdict_format
  return ModelJudge(_MODELS[settings],
                    JudgePrompt.load(prompt or default_prompt(kind, grammar), fields),
                    JudgeCache(settings.cache_folder(root)), verdicts(kind, grammar),
                    verdict_format=grammar, failure_score=settings.failure_score)
