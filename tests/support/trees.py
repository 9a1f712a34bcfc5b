"""Comparisons of parameter trees."""

import jax
import numpy as np


def tree_equal(a, b) -> bool:
  """Whether two parameter trees are bitwise equal."""
  leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
  return len(leaves_a) == len(leaves_b) and all(
      np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(leaves_a, leaves_b,
                                                                    strict=True))
