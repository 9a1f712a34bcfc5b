"""The evaluation stage: one held-out evaluation of a run, written once per label.

It writes the summary to `<local>/eval/<label>.json` (with the RL step it evaluated,
when given: a run extended past that step evaluates its label again; and with its
`evaluation_key`: a launch whose evaluation settings differ, another `eval.split`,
`eval.samples`, `eval.temperature` or `eval.top_p`, evaluates the label again and
replaces it, never reporting a summary of other settings as its own) and, with
`eval.viewer_questions` = n > 0, the first n questions' rollouts as a self-contained
HTML page, `<local>/report/eval_<label>.html` (`metrics.trajectory_page.eval_page_name`:
eval_final.html, eval_warm_start.html, eval_step_00010.html for the checkpoint of RL
step 10; an RL step's own pages are `rl_step_*.html`).

Runs that would evaluate the same parameters on the same questions alike (the arms of
the paper's comparison that share a warm start: mgrpo, frozen_sub and no_alignment)
evaluate them once: `shared_evaluation` keeps the first run's summary and page in a
folder named by `evaluation_key`, and the others copy them.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

from mgrpo_jax import plugins
from mgrpo_jax.config import flat_values
from mgrpo_jax.config.modes import Mode
from mgrpo_jax.core.rewards import RewardWeights
from mgrpo_jax.evaluation import held_out, trajectories
from mgrpo_jax.metrics import trajectory_page
from mgrpo_jax.scale.writers import log
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.utils.atomic_files import atomic_write
from mgrpo_jax.utils.file_lock import file_lock

# Keys that name a run or shape only its RL stage, never what an evaluation of given
# parameters computes (`experiment.mode` enters as `Mode.rollouts`).
_NOT_EVALUATED = ("experiment.name", "experiment.run_id", "experiment.mode",
                  "experiment.num_steps", "experiment.compilation_cache_dir", "logging.",
                  "main.optim.", "sub.optim.", "main.loss.", "sub.loss.", "curriculum.")


def _summary_path(paths: RunPaths, label: str) -> pathlib.Path:
  return paths.local / "eval" / f"{label}.json"


def _page_path(paths: RunPaths, label: str) -> pathlib.Path:
  return paths.local / "report" / trajectory_page.eval_page_name(label)


def evaluation_key(config, mode: Mode) -> str:
  """16 hex digits naming what an evaluation under `config` computes: every config key
  but `_NOT_EVALUATED`, the rollouts of `mode` (the config's `experiment.mode`) and the
  gin-bound reward functions (the
  page's R_M). Equal keys, given the same parameter checkpoints (the
  `<role>.model.init_checkpoint` keys are part of it), mean equal summaries and pages."""
  values = flat_values(config, excluding=_NOT_EVALUATED)
  values["rollouts"] = mode.rollouts
  values.update(plugins.bound_rewards())
  return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def shared_evaluation(paths: RunPaths, label: str, kept: pathlib.Path,
                      evaluate: Callable[[], None]) -> None:
  """Evaluates `label` once for all runs that keep it in the folder `kept`.

  Under the folder's lock: when it holds a summary, copies it (and its trajectory page)
  into this run; else calls `evaluate()`, which writes this run's `label`, and keeps a
  copy (the summary last, so a kept summary is always whole).
  """
  files = ((_page_path(paths, label), kept / "trajectories.html"),
           (_summary_path(paths, label), kept / "summary.json"))
  with file_lock(kept / ".lock"):
    if files[-1][1].exists():
      for mine, theirs in files:
        if theirs.exists():
          atomic_write(mine, theirs.read_bytes())
      log(f"eval {label}: reusing {kept}")
      return
    evaluate()
    for mine, theirs in files:
      if mine.exists():
        atomic_write(theirs, mine.read_bytes())


def evaluated(paths: RunPaths, label: str, key: str, step: int | None = None
              ) -> dict[str, Any] | None:
  """The summary of `label` already written under the evaluation key `key`, or None:
  none yet, one of another RL `step` (a run extended since, whose "final" checkpoints
  are newer), or one computed under other settings (another key, or none recorded)."""
  out = _summary_path(paths, label)
  if not out.exists():
    return None
  summary = json.loads(out.read_text())
  if summary.get("evaluation_key") != key:
    return None
  return summary if step is None or summary.get("step") == step else None


def run_evaluation(config, mode: Mode, paths: RunPaths, label: str,
                   sources: dict[str, held_out.Source], *, greedy_only: bool = False,
                   step: int | None = None) -> dict[str, Any]:
  """Evaluates once per label (and RL `step`, when given); `<local>/eval/<label>.json`
  holds the summary (and `<local>/report/eval_<label>.html` the trajectories, module
  docstring); `mode` is the config's `experiment.mode`."""
  key = evaluation_key(config, mode)
  done = evaluated(paths, label, key, step)
  if done is not None:
    return done
  log(_start_line(config, label, step, greedy_only))
  started = time.perf_counter()
  result = held_out.evaluate_sources(config, mode, paths.local, sources,
                                     greedy_only=greedy_only)
  summary = dict(result.summary, label=label, seconds=time.perf_counter() - started,
                 evaluation_key=key)
  if step is not None:
    summary["step"] = step
  write_page(config, paths, label, result, summary)
  atomic_write(_summary_path(paths, label), json.dumps(summary, indent=1).encode())
  log(f"eval {label}: accuracy {summary['accuracy']:.3f} +- {summary['accuracy_ci95']:.3f} "
      f"on {summary['num_questions']} {config.eval.split} questions ({summary['seconds']:.0f} s)")
  return summary


def _start_line(config, label: str, step: int | None, greedy_only: bool) -> str:
  """The line an evaluation starts with (its last one names its accuracy and seconds)."""
  what = f"the checkpoints of RL step {step}" if step is not None else "the warm start"
  samples = int(config.eval.samples)
  passes = ("greedy only" if greedy_only
            else f"{samples} sample{'s' if samples > 1 else ''} each and greedy")
  return (f"eval {label}: evaluating {what} on up to {int(config.eval.num_questions)} "
          f"{config.eval.split} questions ({passes})")


def write_page(config, paths: RunPaths, label: str, result: held_out.EvalResult,
               summary: dict[str, Any]) -> None:
  """The trajectory page of an evaluation (module docstring); none for n = 0."""
  limit = int(config.eval.viewer_questions)
  if limit == 0:
    return
  credit = trajectories.evaluation_credit(result.main,
                                          RewardWeights.from_config(config.rewards))
  questions = trajectories.page_questions(result.main, result.sub, result.questions,
                                          limit=limit, credit=credit)
  notes = [f"accuracy {summary['accuracy']:.3f} +- {summary['accuracy_ci95']:.3f} over "
           f"{summary['num_questions']} questions, {summary['num_rollouts']} rollouts; "
           f"format rate {summary['format_rate']:.3f}; "
           f"sub-calls per rollout {summary['sub_calls_mean']:.2f}",
           f"showing the first {len(questions)} questions (eval.viewer_questions = {limit})"]
  html = trajectory_page.render(f"Held-out evaluation: {label}", questions, notes=notes)
  atomic_write(_page_path(paths, label), html.encode())
