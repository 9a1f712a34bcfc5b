"""benchmarks/judge_agreement.py's items: the counts asked and the reference labels of the
answers it builds (the model judge itself is not run)."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_items_have_the_asked_counts_and_the_references_labels():
  sys.path.insert(0, str(ROOT / "benchmarks"))
  try:
    import judge_agreement
  finally:
    sys.path.pop(0)
  items = judge_agreement.build_items(answers=12, reports=7, noise=0.6, seed=0)
  assert len(items.answers) == len(items.answer_labels) == 12
  assert len(items.reports) == len(items.report_labels) == 7
  assert set(items.report_labels) <= {0.0, 0.5, 1.0}
  gold, _, _, near, wrong = items.answers[:5]
  assert items.answer_labels[0] == items.answer_labels[2] == 1.0  # the gold, reformatted
  assert items.answer_labels[3] == items.answer_labels[4] == 0.0  # near miss, wrong one
  assert gold.prediction == gold.task.answer
  assert gold.task.answer not in (near.prediction, wrong.prediction)
