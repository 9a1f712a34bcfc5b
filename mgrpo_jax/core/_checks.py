"""Input checks shared by the core modules: clear errors that name the bad argument."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def is_concrete(x: Any) -> bool:
  """True when `x` holds values (numpy, Python or a jax array), not an abstract tracer."""
  return not isinstance(x, jax.core.Tracer)


def shape_of(x: Any, name: str) -> tuple[int, ...]:
  """Returns the shape of an array-like, raising a ValueError naming `name` otherwise."""
  shape = getattr(x, "shape", None)
  if shape is None:
    try:
      shape = np.shape(x)
    except Exception as e:  # ragged nested lists and other non-arrays
      raise ValueError(f"{name} must be an array, got {type(x).__name__}: {e}") from e
  return tuple(shape)


def check_ndim(x: Any, name: str, ndim: int, symbols: str) -> tuple[int, ...]:
  """Checks the rank of `x`; `symbols` (e.g. "[Q, K]") documents the expected shape."""
  shape = shape_of(x, name)
  if len(shape) != ndim:
    raise ValueError(f"{name} must have shape {symbols}, got shape {shape}")
  return shape


def check_same_shape(x: Any, name: str, shape: tuple[int, ...], ref_name: str) -> None:
  got = shape_of(x, name)
  if got != tuple(shape):
    raise ValueError(f"{name} must have the shape of {ref_name} {tuple(shape)}, got {got}")


def check_choice(value: Any, name: str, choices: tuple[str, ...] | list[str]) -> None:
  if value not in choices:
    raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def check_in_unit_interval(x: Any, name: str) -> None:
  """For concrete inputs, checks every value lies in [0, 1] (booleans pass)."""
  if x is None or not is_concrete(x):
    return
  values = np.asarray(x)
  if values.size == 0:
    return
  if values.dtype == bool:
    return
  if not np.issubdtype(values.dtype, np.number):
    raise ValueError(f"{name} must be numeric or boolean, got dtype {values.dtype}")
  if not np.all(np.isfinite(values)) or values.min() < 0 or values.max() > 1:
    raise ValueError(
        f"{name} must lie in [0, 1], got values in [{values.min()}, {values.max()}]"
    )


def check_binary(x: Any, name: str) -> None:
  """For concrete inputs, checks every value is 0/1 (or boolean)."""
  if x is None or not is_concrete(x):
    return
  values = np.asarray(x)
  if values.dtype == bool or values.size == 0:
    return
  if not np.all((values == 0) | (values == 1)):
    bad = values[(values != 0) & (values != 1)].ravel()[0]
    raise ValueError(f"{name} must be boolean or 0/1, got a value {bad}")


def as_array(x: Any) -> Any:
  """Turns nested lists/tuples into a numpy array (jit would see a pytree of scalars)."""
  return np.asarray(x) if isinstance(x, (list, tuple)) else x
