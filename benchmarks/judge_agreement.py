"""Benchmark: the model judge's agreement with the programmatic judges on the offline world.

  PYTHONPATH=. python benchmarks/judge_agreement.py [--answers 500] [--reports 500]
      [--preset smollm2_135m] [--checkpoint DIR] [--tokenizer FILE]
      [--verdict_format final_line] [--evidence_chars 2000] [--max_new_tokens 16]
      [--batch_size 16] [--temperature 0] [--noise 0.6] [--cache_dir DIR]

On the natural rendering of a generated world, where gold answers and gold paths are
known, the noisy scripted oracles (M's and S's systematic mistakes at rate `--noise`)
play stage-2 questions (`tasks.oracle.episode.run_episode`), giving `--answers` answers
and `--reports` reports (0: that judge is not measured):

  answers  per question in turn: the gold answer, M's answer (right or wrong), the gold
           answer reformatted as exact match still accepts it ("The X." / "1,204"), a
           near miss (a number off by about 1%, a name missing its last word or with
           two letters swapped) and a wrong one (another question's gold answer); the
           reference is `ExactMatchJudge`.
  reports  S's reports of those episodes with the tool outputs S read as evidence; the
           reference is the gold-path expert judge (`ProgrammaticExpertJudge`), its
           score rounded to the nearest of r_expert's values 0, 0.5, 1.

The model judge (`rewards.judge.*` settings from the flags, its prompts, strict
verdicts and cache; a fresh temporary cache unless `--cache_dir`) judges them all, and
for each judge the script prints the items and the reference's label counts (kappa
corrects for their imbalance), the failure rate (replies without a well-formed
verdict), the agreement with the reference over the items with a verdict (accuracy, and
Cohen's kappa: agreement beyond what the two label frequencies give by chance), the
judge's own label counts, the accuracy with failures counted as disagreements, and items
per second (the judge's wall time, compilation included; the model's load time is
printed apart).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import random
import tempfile
import time

from mgrpo_jax.config import base_config, validate
from mgrpo_jax.tasks import pages, questions, world
from mgrpo_jax.tasks.agreement import cohen_kappa
from mgrpo_jax.tasks.judges import (
  AnswerItem,
  ExactMatchJudge,
  ProgrammaticExpertJudge,
  ReportItem,
  parse_number,
)
from mgrpo_jax.tasks.oracle.episode import run_episode
from mgrpo_jax.tasks.renderings import NATURAL
from mgrpo_jax.tools import SearchIndex, default_registry
from mgrpo_jax.training.judge_model import JudgeSettings
from mgrpo_jax.training.judge_setup import run_judges

EXPERT_VALUES = (0.0, 0.5, 1.0)


@dataclasses.dataclass
class Items:
  """The judged items and the reference judges' labels."""

  answers: list[AnswerItem] = dataclasses.field(default_factory=list)
  answer_labels: list[float] = dataclasses.field(default_factory=list)
  reports: list[ReportItem] = dataclasses.field(default_factory=list)
  report_labels: list[float] = dataclasses.field(default_factory=list)


def near_miss(gold: str, rng: random.Random) -> str:
  """A close but wrong answer: a number off by about 1% (at least 1), else a name cut or
  misspelt."""
  number = parse_number(gold)
  if number is not None:
    step = max(1, int(abs(number) // 100))
    return (str(int(number) + rng.choice((-step, step))) if number.is_integer()
            else str(number * 2))
  words = gold.split()
  if len(words) > 1:
    return " ".join(words[:-1])
  letters = list(gold)
  i = rng.randrange(max(1, len(letters) - 1))
  letters[i:i + 2] = letters[i:i + 2][::-1]
  return "".join(letters)


def reformatted(gold: str) -> str:
  """The gold answer as exact match still accepts it."""
  number = parse_number(gold)
  if number is not None and number.is_integer():
    return f"{int(number):,}"
  return f"The {gold}."


def build_items(answers: int, reports: int, noise: float, seed: int) -> Items:
  """`answers` answers and `reports` reports from noisy-oracle episodes (module
  docstring)."""
  rng = random.Random(seed)
  w = world.generate_world("tiny", seed)
  config = base_config()
  registry = default_registry(SearchIndex.from_pages(pages.render_pages(w)),
                              top_n=int(config.tools.search_top_n),
                              visit_budget=int(config.tools.visit_chars))
  main, sub = NATURAL.main_oracle(noise, seed), NATURAL.sub_oracle(noise, seed)
  exact, expert = ExactMatchJudge(), ProgrammaticExpertJudge(w)
  items = Items()
  pool = questions.synthesize(w, max(50, answers, reports), stage=2, seed=seed)
  for q in pool:
    if len(items.answers) >= answers and len(items.reports) >= reports:
      break
    episode = run_episode(q.text, main, sub, registry)
    wrong = rng.choice([p.answer for p in pool if p.answer != q.answer])
    for candidate in (q.answer, episode.answer or "", reformatted(q.answer),
                      near_miss(q.answer, rng), wrong):
      if len(items.answers) < answers:
        items.answers.append(AnswerItem(q, candidate))
        items.answer_labels.append(exact(q, candidate))
    for call in episode.sub_calls:
      if len(items.reports) < reports:
        evidence = "\n\n".join(step.observation for step in call.steps)
        items.reports.append(ReportItem(q, call.subtask, call.report, evidence))
        score = expert(q, call.subtask, call.report)
        items.report_labels.append(min(EXPERT_VALUES, key=lambda v: (abs(v - score), v)))
  if len(items.answers) < answers or len(items.reports) < reports:
    raise ValueError(f"{len(pool)} questions gave {len(items.answers)} answers and "
                     f"{len(items.reports)} reports, fewer than --answers {answers} and "
                     f"--reports {reports} ask")
  return items


def agreement(name: str, judgements, reference: list[float], seconds: float) -> str:
  """One judge's line of the report (module docstring)."""
  judged = [(j.score, label) for j, label in zip(judgements, reference, strict=True)
            if j.verdict is not None]
  n, failures = len(reference), len(reference) - len(judged)
  accuracy = sum(s == r for s, r in judged) / len(judged) if judged else float("nan")
  kappa = cohen_kappa([s for s, _ in judged], [r for _, r in judged])
  strict = sum(s == r for s, r in judged) / max(n, 1)
  labels = dict(sorted(collections.Counter(reference).items()))
  given = dict(sorted(collections.Counter(s for s, _ in judged).items()))
  return (f"{name}: {n} items (reference labels {labels}), failure rate "
          f"{failures / max(n, 1):.3f}, agreement on the {len(judged)} judged (judge labels "
          f"{given}): accuracy {accuracy:.3f}, Cohen's kappa {kappa:.3f}; accuracy counting "
          f"failures as wrong {strict:.3f}; {n / max(seconds, 1e-9):.2f} items/s")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--answers", type=int, default=500)
  parser.add_argument("--reports", type=int, default=500)
  parser.add_argument("--preset", default="smollm2_135m")
  parser.add_argument("--checkpoint", default="")
  parser.add_argument("--tokenizer", default="")
  parser.add_argument("--verdict_format", default="final_line")
  parser.add_argument("--evidence_chars", type=int, default=2000)
  parser.add_argument("--max_new_tokens", type=int, default=16)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--temperature", type=float, default=0.0)
  parser.add_argument("--noise", type=float, default=0.6)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--cache_dir", default="")
  args = parser.parse_args()

  items = build_items(args.answers, args.reports, args.noise, args.seed)
  config = base_config()
  config.rewards.answer_judge = config.rewards.expert_judge = "model"
  judge = config.rewards.judge
  judge.preset, judge.checkpoint, judge.tokenizer = args.preset, args.checkpoint, args.tokenizer
  judge.max_new_tokens, judge.batch_size = args.max_new_tokens, args.batch_size
  judge.temperature = args.temperature
  judge.verdict_format, judge.evidence_chars = args.verdict_format, args.evidence_chars
  validate(config)
  with tempfile.TemporaryDirectory() as scratch:
    judge.cache_dir = args.cache_dir or scratch
    judges = run_judges(config, scratch, gold_path=None)
    settings = JudgeSettings.from_config(config.rewards)
    print(f"judge model {settings.preset} {settings.checkpoint}".rstrip() + ": "
          f"verdict format {settings.verdict_format}, evidence_chars "
          f"{settings.evidence_chars}, max_new_tokens {settings.max_new_tokens}, "
          f"temperature {settings.temperature}, batch {settings.batch_size}, cache "
          f"{settings.cache_dir}")
    start = time.perf_counter()
    judges.answer.judge.model.load()
    print(f"model loaded in {time.perf_counter() - start:.1f} s")
    for name, judge_, batch, reference in (
        ("answer judge vs ExactMatchJudge", judges.answer, items.answers,
         items.answer_labels),
        ("expert judge vs gold-path expert judge", judges.expert, items.reports,
         items.report_labels)):
      if not batch:
        continue
      start = time.perf_counter()
      judgements = judge_.judgements(batch)
      print(agreement(name, judgements, reference, time.perf_counter() - start))
      example = next((j for j in judgements if j.verdict is None), None)
      if example is not None:
        print(f"  a failure: {example.problem}; reply {example.reply[:160]!r}")


if __name__ == "__main__":
  main()
