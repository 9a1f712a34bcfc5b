"""Plain-data form of records for JSON (the slices' cache files, a multi-host exchange).

`to_plain` turns numpy arrays and scalars into lists and Python numbers. float32 values
survive the round trip exactly (every float32 is a JSON double), and `from_dict` of the
records casts back to their dtypes, so a record read back is bitwise the one written.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def to_plain(value: Any) -> Any:
  """`value` with numpy arrays and scalars turned into lists and Python numbers."""
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, np.generic):
    return value.item()
  if isinstance(value, dict):
    return {str(k): to_plain(v) for k, v in value.items()}
  if isinstance(value, list | tuple):
    return [to_plain(v) for v in value]
  return value
