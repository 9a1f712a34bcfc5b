"""Imports a script of benchmarks/ (not a package) as a module, for the tests of its
pure parts."""

from __future__ import annotations

import importlib
import pathlib
import sys
from types import ModuleType

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def import_benchmark(name: str) -> ModuleType:
  """`benchmarks/<name>.py` as the module `name` (its own imports of its sibling scripts
  resolve while it loads)."""
  sys.path.insert(0, str(BENCHMARKS))
  try:
    return importlib.import_module(name)
  finally:
    sys.path.pop(0)
