"""The whole run of `--slice=all` as stages, each resumable and each runnable alone.

  warm_start  (`warm_start.enabled`) the paper's stage 1 (`mgrpo_jax.warm_start.stage`):
              each trained agent, in its own process, learns to copy, then is
              fine-tuned on the noisy oracles' demonstrations and saved as a parameter
              checkpoint; the RL slices start from it.
  eval before (`eval.enabled`) the warm-started agents on the held-out test world
              -> `<local>/eval/warm_start.json`, in a child process
              (`--slice=all --stage=eval_before`); runs that share a warm-start folder
              (`warm_start.dir`) and roll out alike evaluate it once (the first one;
              `evaluation.stage.shared_evaluation`, kept in `<folder>/eval/<key>/`).
  rl          stage 2, M-GRPO: the two slices as processes (`run.run_children`; the step
              protocol of docs/ALGORITHM.md); with `eval.every` = e > 0 they keep the
              checkpoints of every e-th step.
  eval after  the RL run's latest checkpoints -> `<local>/eval/final.json` (evaluated
              again when the run is extended past the step it holds); with e > 0
              also, greedy only, the checkpoints of steps e, 2e, ... before the last ->
              `<local>/eval/step_<t>.json` (the held-out curve); one child process
              (`--slice=all --stage=eval_after`).
  report      PNG plots of the training curves and the before/after table, printed and
              written to `<local>/report/` (`mgrpo_jax.metrics.report`); the last lines
              name that folder and every file in it (plots, table, trajectory pages),
              and the evaluations' summaries in `<local>/eval/`.
  stage 2     (`curriculum.stage2_steps`) the paper's stage 2 on the stage-2 questions the
              stage-1 agents fail most, as its own run in `<local>/stage2`
              (`curriculum.py`), with its own evaluations and report.

A stage whose output exists is skipped, so re-running the command after an interruption
continues where it stopped (the RL stage resumes from its checkpoints). This process
only orchestrates: it runs on JAX's CPU backend and computes nothing on a device, so
the children own the host's accelerators (`child_env`).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from absl import logging as absl_logging

from mgrpo_jax.config.modes import Mode
from mgrpo_jax.evaluation.held_out import Source
from mgrpo_jax.evaluation.stage import (
  evaluated,
  evaluation_key,
  run_evaluation,
  shared_evaluation,
)
from mgrpo_jax.metrics import machine, report
from mgrpo_jax.scale.writers import log
from mgrpo_jax.slices import curriculum
from mgrpo_jax.store.folder import open_folder
from mgrpo_jax.training.paths import RunPaths, warm_start_folder
from mgrpo_jax.warm_start.stage import run_warm_start, with_init_checkpoints


def curve_steps(every: int, num_steps: int) -> range:
  """RL steps whose checkpoints the held-out curve evaluates: e, 2e, ... before the
  last step (evaluated anyway); none for e = 0."""
  return range(every, num_steps, every) if every else range(0)


def _keeps_curve_checkpoints(config):
  """With `eval.every` = e > 0, the config whose RL run keeps every e-th step's
  checkpoints (and those of a `keep_period` already set)."""
  every = int(config.eval.every) if config.eval.enabled else 0
  if not every:
    return config
  config = copy.deepcopy(config)
  config.checkpoint.keep_period = math.gcd(int(config.checkpoint.keep_period), every)
  return config


def _evaluation_sources(config, mode: Mode, paths: RunPaths
                        ) -> dict[str, tuple[int, dict[str, Source]]]:
  """{label: (RL step, the checkpoints it evaluates)} of one run, in the order they are
  evaluated; "final" is the last step's."""
  last = int(config.experiment.num_steps)
  sources = {"final": (last, {role: Source(paths.checkpoints(role), "state")
                              for role in mode.agents})}
  for step in curve_steps(int(config.eval.every), last):
    sources[f"step_{step}"] = (step, {role: Source(paths.checkpoints(role), "state", step)
                                      for role in mode.agents})
  return sources


def run_evaluation_stage(config, mode: Mode, workdir: str, stage: str) -> None:
  """One evaluation stage in its own process (`--slice=all --stage=<stage>`):
  "eval_before" the warm start's parameter checkpoints (`<role>.model.init_checkpoint`),
  "eval_after" the RL run's latest checkpoints, then the held-out curve (greedy); `mode`
  is the config's `experiment.mode`."""
  paths = RunPaths.from_config(config, workdir)
  if stage == "eval_before":
    run_evaluation(config, mode, paths, "warm_start", {
        role: Source(str(config[role].model.init_checkpoint), "params") for role in mode.agents})
    return
  for label, (step, sources) in _evaluation_sources(config, mode, paths).items():
    run_evaluation(config, mode, paths, label, sources, greedy_only=label != "final",
                   step=step)


def _evaluate(config, key: str, workdir: str, spawn, stage: str,
              labels: dict[str, int | None]) -> dict[str, dict[str, Any]]:
  """The summaries of `labels` ({label: RL step or None}), evaluated by a `stage`
  child unless all are done under `key` (the config's `evaluation_key`)."""
  paths = RunPaths.from_config(config, workdir)
  if any(evaluated(paths, label, key, step) is None for label, step in labels.items()):
    spawn(config, workdir, ("all",), stage)
  return {label: evaluated(paths, label, key, step) for label, step in labels.items()}


def _evaluate_warm_start(config, mode: Mode, workdir: str, spawn) -> dict[str, Any]:
  """The warm start's held-out summary: evaluated by an "eval_before" child, or, for a
  warm-start folder shared with other runs (`warm_start.dir`), copied from the one of
  them that evaluated it under the same `evaluation_key`."""
  labels = {"warm_start": None}
  paths = RunPaths.from_config(config, workdir)
  key = evaluation_key(config, mode)
  if (config.warm_start.enabled and config.warm_start.dir
      and evaluated(paths, "warm_start", key) is None):
    kept = warm_start_folder(config, paths) / "eval" / key
    shared_evaluation(paths, "warm_start", kept,
                      lambda: _evaluate(config, key, workdir, spawn, "eval_before", labels))
  return _evaluate(config, key, workdir, spawn, "eval_before", labels)["warm_start"]


def run_all(config, mode: Mode, workdir: str, spawn) -> None:
  """warm start -> eval before -> RL -> eval after -> report; every stage in children.

  Args:
    config: the run's config.
    mode: its `experiment.mode`, parsed.
    workdir: the run's folder.
    spawn: `spawn(config, workdir, slices, stage)` runs `stage` ("warm_start", "rl",
      "eval_before", "eval_after") of each of `slices` ("main", "sub"; "all" for an
      evaluation) as concurrent processes (`run.run_children`).
  """
  absl_logging.set_verbosity(absl_logging.WARNING)  # library INFO lines drown the stages
  paths = RunPaths.from_config(config, workdir)
  if int(config.curriculum.stage2_steps):
    curriculum.check_stage2(config, mode, paths)
  before = after = None
  if config.warm_start.enabled:
    config = with_init_checkpoints(config, mode, run_warm_start(config, mode, paths, spawn))
  warm_started = all(config[role].model.init_checkpoint for role in mode.agents)
  if config.eval.enabled and warm_started:
    before = _evaluate_warm_start(config, mode, workdir, spawn)
  config = _keeps_curve_checkpoints(config)
  spawn(config, workdir, ("sub", "main"), "rl")
  curve = []
  if config.eval.enabled:
    summaries = _evaluate(config, evaluation_key(config, mode), workdir, spawn, "eval_after",
                          {label: step for label, (step, _) in
                           _evaluation_sources(config, mode, paths).items()})
    after = summaries.pop("final")
    curve = [(int(label.removeprefix("step_")), summary) for label, summary in summaries.items()]
  written = report.write_report(paths.local, paths.logs("main") / "metrics.jsonl",
                                paths.logs("sub") / "metrics.jsonl", before, after,
                                title=f"{config.experiment.name} ({mode.name})", curve=curve,
                                machines=machine.computed_on(
                                    machine.read_labels(open_folder(workdir))))
  for line in written.table.splitlines() + report.file_lines(paths.local):
    log(line)
  if int(config.curriculum.stage2_steps):
    _run_stage2(config, mode, workdir, spawn)


def _run_stage2(config, mode: Mode, workdir: str, spawn) -> None:
  """The two-stage curriculum's stage 2 (`curriculum.py`): its questions chosen by a
  `select_stage2` child (once), then its own run in `<workdir>/stage2`."""
  paths = RunPaths.from_config(config, workdir)
  folder = curriculum.stage2_folder(paths)
  if (folder / curriculum.SELECTION).exists():
    curriculum.check_selection(config, folder)
  else:
    spawn(config, workdir, ("all",), "select_stage2")
  log(f"stage 2: {folder}")
  run_all(curriculum.stage2_config(config, mode, paths), mode, str(folder), spawn)
