"""The whole run of `--slice=all` as stages, each resumable and each runnable alone.

  warm_start  (`warm_start.enabled`) the paper's stage 1 (`mgrpo_jax.warm_start.stage`):
              each trained agent, in its own process, learns to copy, then is
              fine-tuned on the noisy oracles' demonstrations and saved as a parameter
              checkpoint; the RL slices start from it.
  eval before (`eval.enabled`) the warm-started agents on the held-out test world
              -> `<local>/eval/warm_start.json`.
  rl          stage 2, M-GRPO: the two slices as processes (`run.run_children`; the step
              protocol of docs/ALGORITHM.md); with `eval.every` = e > 0 they keep the
              checkpoints of every e-th step.
  eval after  the RL run's latest checkpoints -> `<local>/eval/final.json`; with e > 0
              also, greedy only, the checkpoints of steps e, 2e, ... before the last ->
              `<local>/eval/step_<t>.json` (the held-out curve).
  report      PNG plots of the training curves and the before/after table, printed and
              written to `<local>/report/` (`mgrpo_jax.metrics.report`).

A stage whose output exists is skipped, so re-running the command after an interruption
continues where it stopped (the RL stage resumes from its checkpoints).
"""

from __future__ import annotations

import copy
import math

from absl import logging as absl_logging

from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.evaluation.held_out import Source
from mgrpo_jax.evaluation.stage import run_evaluation
from mgrpo_jax.metrics import report
from mgrpo_jax.scale.writers import log
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.warm_start.stage import run_warm_start, with_init_checkpoints


def curve_steps(every: int, num_steps: int) -> range:
  """RL steps whose checkpoints the held-out curve evaluates: e, 2e, ... before the
  last step (evaluated anyway); none for e = 0."""
  return range(every, num_steps, every) if every else range(0)


def run_all(config, workdir: str, spawn) -> None:
  """warm start -> eval before -> RL -> eval after -> report.

  Args:
    config: the run's config.
    workdir: the run's folder.
    spawn: `spawn(config, workdir, slices, stage)` runs `stage` ("warm_start", "rl") of
      each of `slices` ("main", "sub") as concurrent processes (`run.run_children`).
  """
  absl_logging.set_verbosity(absl_logging.WARNING)  # library INFO lines drown the stages
  paths = RunPaths.from_config(config, workdir)
  mode = parse_mode(str(config.experiment.mode))
  before = after = None
  if config.warm_start.enabled:
    config = with_init_checkpoints(config, run_warm_start(config, paths, spawn))
  initial = {role: Source(str(config[role].model.init_checkpoint), "params")
             for role in mode.agents if config[role].model.init_checkpoint}
  if config.eval.enabled and len(initial) == len(mode.agents):
    before = run_evaluation(config, paths, "warm_start", initial)
  every = int(config.eval.every) if config.eval.enabled else 0
  if every:  # keep the curve's checkpoints, and those of a keep_period already set
    config = copy.deepcopy(config)
    config.checkpoint.keep_period = math.gcd(int(config.checkpoint.keep_period), every)
  spawn(config, workdir, ("sub", "main"), "rl")
  curve = []
  if config.eval.enabled:
    final = {role: Source(paths.checkpoints(role), "state")
             for role in mode.agents}
    after = run_evaluation(config, paths, "final", final)
    for step in curve_steps(every, int(config.experiment.num_steps)):
      sources = {role: Source(paths.checkpoints(role), "state", step)
                 for role in mode.agents}
      curve.append((step, run_evaluation(config, paths, f"step_{step}", sources,
                                         greedy_only=True)))
  written = report.write_report(paths.local, paths.logs("main") / "metrics.jsonl",
                                paths.logs("sub") / "metrics.jsonl", before, after,
                                title=f"{config.experiment.name} ({mode.name})", curve=curve)
  for line in written.table.splitlines():
    log(line)
  log(f"report: {', '.join(str(p) for p in written.files)}")
