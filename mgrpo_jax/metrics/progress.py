"""The one-line console summary of a training step."""

from __future__ import annotations

from collections.abc import Mapping


def _number(value: float) -> str:
  if value == 0 or 1e-3 <= abs(value) < 1e5:
    return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:.0f}"
  return f"{value:.2e}"


def format_progress(step: int, num_steps: int, scalars: Mapping[str, float],
                    timings: Mapping[str, float] | None = None,
                    tokens_per_second: Mapping[str, float] | None = None) -> str:
  """Formats e.g. `step 3/10 | main/reward 0.41 | rollout 1.2s update 0.4s | main 512 tok/s`.

  Args:
    step: the step just finished (1-based for display).
    num_steps: the run's total steps.
    scalars: headline metrics, shown in the given order.
    timings: seconds per phase (rollout, sub_calls, scoring, store, update, checkpoint).
    tokens_per_second: throughput per agent.
  """
  parts = [f"step {step}/{num_steps}"]
  if scalars:
    parts.append(" ".join(f"{name} {_number(v)}" for name, v in scalars.items()))
  if timings:
    parts.append(" ".join(f"{name} {v:.2f}s" for name, v in timings.items()))
  if tokens_per_second:
    parts.append(" ".join(f"{name} {v:.0f} tok/s" for name, v in tokens_per_second.items()))
  return " | ".join(parts)
