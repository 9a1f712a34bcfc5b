"""Command-line helpers shared by the launchers (`launch/tpu_run.py`, `launch/sweep.py`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

from absl import flags

_HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull")


def parse_flags(argv: list[str], fail: Callable[[str], NoReturn]) -> list[str]:
  """absl flag parsing where a bad flag (or config override) ends in `fail(message)`.

  Asking for help exits 0 (absl itself exits 1 after printing it).
  """
  try:
    return flags.FLAGS(argv)
  except SystemExit:
    if any(arg.split("=")[0] in _HELP_FLAGS for arg in argv[1:]):
      sys.exit(0)
    raise
  except flags.Error as e:
    fail(str(e))
  except (AttributeError, KeyError) as e:  # `--config.a.b=...` naming no such key
    fail(f"bad config override: {e}")
