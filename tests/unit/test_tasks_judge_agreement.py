"""Cohen's kappa (`tasks/agreement.py`) against values computed by hand."""

from __future__ import annotations

import math

import pytest

from mgrpo_jax.tasks.agreement import cohen_kappa


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


def test_labelings_of_different_lengths_are_an_error():
  with pytest.raises(ValueError, match="differ in length: 2 and 1"):
    cohen_kappa([1, 0], [1])
