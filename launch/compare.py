r"""Compares a sweep's finished runs: Markdown tables per arm and plots.

  python launch/compare.py --workdir=runs/paper_comparison
  python launch/compare.py --workdir=runs/my_sweep --group_by=mgrpo.aligned_sub_calls

Reads every `<workdir>/<run>/` with `eval/final.json` (runs still going or failed are
left out), groups them by the config key --group_by (the arms; the seeds are the
replicates; --reference is the arm the others are compared with seed by seed) and
writes `<out>/summary.md`, `<out>/rewards.png`, `<out>/accuracy.png` and, when the runs
evaluated greedily, `<out>/held_out_curve.png` (`mgrpo_jax/metrics/comparison.py` says
what each holds), printing the table. Exit status 2 with one line naming the folder or
file when there is nothing to compare.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from absl import app, flags

from mgrpo_jax.metrics.comparison import ComparisonError, write_comparison
from mgrpo_jax.utils import cli

_WORKDIR = flags.DEFINE_string("workdir", "runs/paper_comparison", "The sweep's folder.")
_OUT = flags.DEFINE_string("out", "", "Output folder; empty: <workdir>/comparison.")
_GROUP_BY = flags.DEFINE_string("group_by", "experiment.mode",
                                "Dotted config key whose value names a run's arm.")
_ORDER = flags.DEFINE_list("order", ["mgrpo", "frozen_sub", "single_agent", "single_agent_long",
                                     "shared_policy", "no_alignment"],
                           "Arms listed first, in this order (others follow by name).")
_REFERENCE = flags.DEFINE_string(
    "reference", "mgrpo", "The arm every other arm's accuracy after RL is compared with, "
    "seed by seed (a table of paired differences); none when no arm has this name.")


def _fail(message: str) -> NoReturn:
  sys.stderr.write(f"compare.py: error: {message}\n")
  sys.exit(2)


def _parse_flags(argv: list[str]) -> list[str]:
  return cli.parse_flags(argv, _fail)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    _fail(f"unexpected arguments {argv[1:]}")
  try:
    markdown, files = write_comparison(_WORKDIR.value, _OUT.value or None,
                                       group_by=_GROUP_BY.value, order=_ORDER.value,
                                       reference=_REFERENCE.value or None)
  except ComparisonError as e:
    _fail(str(e))
  sys.stdout.write(markdown)
  sys.stdout.write("wrote " + ", ".join(str(f) for f in files) + "\n")


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_flags)
