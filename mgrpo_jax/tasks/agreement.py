"""How far two judges agree beyond chance: Cohen's kappa of their labels of the same items
(`benchmarks/judge_agreement.py` measures a model judge against a programmatic one)."""

from __future__ import annotations

import collections
from collections.abc import Hashable, Sequence


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
  """Cohen's kappa of two labelings of the same items (1: perfect, 0: chance, < 0: worse):
  (p_o - p_e) / (1 - p_e), p_o the share of items labeled alike, p_e the share two
  independent labelings with these label frequencies would label alike. Undefined (nan)
  without items or when both give every item the same one label (p_e = 1).

  Raises:
    ValueError: the labelings differ in length.
  """
  if len(a) != len(b):
    raise ValueError(f"two labelings of the same items differ in length: {len(a)} and "
                     f"{len(b)}")
  n = len(a)
  if n == 0:
    return float("nan")
  observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
  count_a, count_b = collections.Counter(a), collections.Counter(b)
  expected = sum(count_a[label] * count_b[label] for label in count_a) / n**2
  return float("nan") if expected == 1.0 else (observed - expected) / (1.0 - expected)
