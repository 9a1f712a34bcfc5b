"""benchmarks/judge_agreement.py: Cohen's kappa against hand-computed examples, and the
items it builds (their counts and reference labels)."""

from __future__ import annotations

import math

import pytest

from benchmarks.judge_agreement import build_items, cohen_kappa


@pytest.mark.parametrize("a,b,kappa", [
    # p_o = 7/10; p_e = (4*5 + 6*5) / 100 = 0.5; (0.7 - 0.5) / 0.5
    ([1, 1, 1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0, 1, 1], 0.4),
    # p_o = 3/4; p_e = (2*1 + 1*2 + 1*1) / 16 = 5/16; (3/4 - 5/16) / (11/16) = 7/11
    ([1, 1, 0.5, 0], [1, 0.5, 0.5, 0], 7 / 11),
    ([1, 0, 0.5], [1, 0, 0.5], 1.0),
    ([1, 1, 0, 0], [0, 0, 1, 1], -1.0),
    ([1, 1], [1, 0], 0.0),  # a judge that always says 1: chance, whatever its accuracy
])
def test_cohens_kappa_matches_hand_computed_values(a, b, kappa):
  assert cohen_kappa(a, b) == pytest.approx(kappa)
  assert cohen_kappa(b, a) == pytest.approx(kappa)


@pytest.mark.parametrize("a,b", [([], []), ([1, 1], [1, 1])])
def test_cohens_kappa_is_undefined_without_items_or_variation(a, b):
  assert math.isnan(cohen_kappa(a, b))


def test_the_items_have_the_asked_counts_and_the_references_labels():
  items = build_items(answers=12, reports=7, noise=0.6, seed=0)
  assert len(items.answers) == len(items.answer_labels) == 12
  assert len(items.reports) == len(items.report_labels) == 7
  assert set(items.report_labels) <= {0.0, 0.5, 1.0}
  gold, _, _, near, wrong = items.answers[:5]
  assert items.answer_labels[0] == items.answer_labels[2] == 1.0  # the gold, reformatted
  assert items.answer_labels[3] == items.answer_labels[4] == 0.0  # near miss, wrong one
  assert gold.prediction == gold.task.answer
  assert gold.task.answer not in (near.prediction, wrong.prediction)
