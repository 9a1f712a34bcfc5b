"""The evaluation stage: one held-out evaluation of a run, written once per label."""

from __future__ import annotations

import json
import time
from typing import Any

from mgrpo_jax.evaluation import held_out
from mgrpo_jax.scale.writers import log
from mgrpo_jax.training.files import atomic_write
from mgrpo_jax.training.paths import RunPaths


def run_evaluation(config, paths: RunPaths, label: str, sources: dict[str, held_out.Source],
                   *, greedy_only: bool = False) -> dict[str, Any]:
  """Evaluates once per label; `<local>/eval/<label>.json` holds the summary."""
  out = paths.local / "eval" / f"{label}.json"
  if out.exists():
    return json.loads(out.read_text())
  started = time.perf_counter()
  result = held_out.evaluate_sources(config, paths.local, sources, greedy_only=greedy_only)
  summary = dict(result.summary, label=label, seconds=time.perf_counter() - started)
  atomic_write(out, json.dumps(summary, indent=1).encode())
  log(f"eval {label}: accuracy {summary['accuracy']:.3f} +- {summary['accuracy_ci95']:.3f} "
      f"on {summary['num_questions']} test questions ({summary['seconds']:.0f} s)")
  return summary
