"""The one-line console summary of a training step, and progress lines of long phases.

A step's line is short by default (`format_step`: the step, a few headline numbers and
its seconds, well within 120 characters) and full on request (`format_progress`: the
slice's chosen metrics, every phase's seconds and the throughputs); metrics.jsonl holds
every number either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping


def _number(value: float) -> str:
  if value == 0 or 1e-3 <= abs(value) < 1e5:
    return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:.0f}"
  return f"{value:.2e}"


def format_step(step: int, num_steps: int, headline: Mapping[str, float],
                seconds: float) -> str:
  """Formats e.g. `step 3/80 | R_M 0.41 correct 0.5 format 1 sub-calls 1.2 | 3.1 s/step`.

  Args:
    step: the step just finished (1-based for display).
    num_steps: the run's total steps.
    headline: the few numbers a reader follows, shown in the given order.
    seconds: the step's wall seconds.
  """
  parts = [f"step {step}/{num_steps}"]
  if headline:
    parts.append(" ".join(f"{name} {_number(v)}" for name, v in headline.items()))
  parts.append(f"{seconds:.1f} s/step")
  return " | ".join(parts)


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


class PhaseProgress:
  """Progress of a long phase (e.g. the warm start's SFT steps) as plain log lines.

  Called with (done, total) after each unit of work; emits at most one line every
  `every_s` seconds, e.g. `warm start main (sft): 300/750 steps, 40 s, about 60 s left`.
  Lines rather than a redrawn bar: the phases run in child processes whose output the
  `--slice=all` parent prefixes and relays line by line (and notebooks and CI logs show
  lines), so the same output reads well everywhere. The phase's own closing line is its
  caller's.

  Args:
    label: names the phase.
    emit: writes one line (`scale.writers.log`).
    every_s: seconds between lines at least.
    unit: what `done` counts.
    clock: seconds, monotonic (a fake one in tests).
  """

  def __init__(self, label: str, emit: Callable[[str], None], *, every_s: float = 20.0,
               unit: str = "steps", clock: Callable[[], float] = time.monotonic) -> None:
    self.label, self.emit, self.every_s, self.unit, self.clock = label, emit, every_s, unit, clock
    self.started = self.last = clock()

  def __call__(self, done: int, total: int) -> None:
    now = self.clock()
    if done >= total or now - self.last < self.every_s:
      return
    self.last = now
    elapsed = now - self.started
    left = elapsed * (total - done) / max(done, 1)
    self.emit(f"{self.label}: {done}/{total} {self.unit}, {elapsed:.0f} s, "
              f"about {left:.0f} s left")
