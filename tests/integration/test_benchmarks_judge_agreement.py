"""benchmarks/judge_agreement.py's items: the counts asked and the reference labels of the
answers it builds (the model judge itself is not run)."""

from __future__ import annotations

from tests.support.benchmark_modules import import_benchmark


def test_the_items_have_the_asked_counts_and_the_references_labels():
  judge_agreement = import_benchmark("judge_agreement")
  items = judge_agreement.build_items(answers=12, reports=7, noise=0.6, seed=0)
  assert len(items.answers) == len(items.answer_labels) == 12
  assert len(items.reports) == len(items.report_labels) == 7
  assert set(items.report_labels) <= {0.0, 0.5, 1.0}
  gold, _, _, near, wrong = items.answers[:5]
  assert items.answer_labels[0] == items.answer_labels[2] == 1.0  # the gold, reformatted
  assert items.answer_labels[3] == items.answer_labels[4] == 0.0  # near miss, wrong one
  assert gold.prediction == gold.task.answer
  assert gold.task.answer not in (near.prediction, wrong.prediction)
