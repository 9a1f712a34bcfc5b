"""A sweep's runs compared: held-out accuracy per arm with seed confidence intervals, curves.

Inputs are the folders a sweep leaves, one per run (`launch/sweep.py`): each holds
`launch/config.py` (the run's resolved config), `eval/warm_start.json` and
`eval/final.json` (held-out summaries, `evaluation.held_out.summarize`), the greedy
summaries of the checkpoints evaluated during RL, `eval/step_<t>.json` (with
`eval.every`), and `logs/{main,sub}/metrics.jsonl`. Runs are grouped into arms by one config key
(`experiment.mode` for the paper's comparison); within an arm the seeds are the
replicates, so each number is a mean over seeds with the half-width of its 95% Student-t
interval (n - 1 degrees of freedom; none for one seed). The change through RL is taken
per seed (after - before, the same warm start), then averaged.

Outputs under `<out>/`: `summary.md` (Markdown tables, one row per arm: held-out accuracy
sampled and greedy before and after RL and its change, format rate, sub-calls per rollout,
the final training rewards R_M and R_S; then the greedy accuracy of each question type
before -> after, which says whose mistakes RL fixed, and S's greedy r_expert per asked
property (where the summaries have it), which says where S's were; then greedy held-out accuracy at
each RL step that every run of the arm evaluated (step 0 is the warm start, the last
the final checkpoint); then, with a reference arm, each
other arm's accuracy after RL minus the reference's, paired by seed: arms that share a
warm start differ only by RL, so the paired difference is free of the warm starts'
spread),
`rewards.png` (mean R_M and R_S per RL step per arm, the band spanning the seeds) and
`accuracy.png` (held-out accuracy, greedy accuracy when every run has a greedy pass, and
format rate per arm before and after RL, with the intervals) and, when the runs have a
greedy pass, `held_out_curve.png` (greedy held-out accuracy per RL step per arm, the
band spanning the seeds). `summary.md` ends with the machines the runs computed on
(`machines/` of each run folder, `machine.py`), each with its runs when they differ.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from mgrpo_jax.metrics import machine
from mgrpo_jax.metrics.report import summary_at
from mgrpo_jax.metrics.writer import read_metrics

SUMMARY_NAME = "summary.md"
_GREEDY = ("greedy", "accuracy")
# Per-run scalars compared across arms: (column label, its path in a held-out summary).
_EVAL_KEYS = (("accuracy", ("accuracy",)), ("greedy accuracy", _GREEDY),
              ("format rate", ("format_rate",)), ("sub-calls / rollout", ("sub_calls_mean",)))
# (label, slice, metric names in order of preference). R_S is that of the calls each step
# made (not of the slots trained on, which in the unsynchronized arm are older calls);
# runs logged before that metric existed have only the slots' mean.
_REWARDS = (("R_M", "main", ("main/reward_mean",)),
            ("R_S", "sub", ("sub/reward_made_mean", "sub/reward_mean")))


class ComparisonError(ValueError):
  """A run folder that cannot be compared; the message names the folder and the file."""


@dataclasses.dataclass(frozen=True)
class RunResult:
  """One finished run of a sweep.

  Attributes:
    name: the run's folder name (e.g. `mgrpo-s0`).
    arm: the value of the grouping key in the run's config (e.g. `mgrpo`).
    seed: `experiment.seed` of the run.
    before: the held-out summary of the warm start (`eval/warm_start.json`).
    after: the held-out summary after RL (`eval/final.json`).
    curves: `{"main": rows, "sub": rows}` of `metrics.jsonl` (absent slice: no rows).
    held_out: `{RL step: greedy held-out accuracy}`: 0 the warm start, the steps of
      `eval/step_<t>.json`, and `experiment.num_steps` after RL (empty without a
      greedy pass).
    machines: `{role: [machine label, ...]}` of the run's `machines/` records
      (`machine.read_labels_at`; empty for a run of a version that kept none).
  """
  name: str
  arm: str
  seed: int
  before: Mapping[str, Any]
  after: Mapping[str, Any]
  curves: Mapping[str, Sequence[Mapping[str, float]]]
  held_out: Mapping[int, float]
  machines: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Estimate:
  """A mean over seeds and the half-width of its 95% t interval (nan for one seed)."""
  mean: float
  half_width: float
  n: int

  def __str__(self) -> str:
    if math.isnan(self.half_width):
      return f"{self.mean:.3f}"
    return f"{self.mean:.3f} ± {self.half_width:.3f}"


def estimate(values: Sequence[float]) -> Estimate:
  """Mean of `values` (one per seed) and its 95% Student-t half-width, t_{0.975,n-1} s/√n."""
  from scipy import stats

  n = len(values)
  if n == 0:
    raise ValueError("estimate() needs at least one value")
  mean = math.fsum(values) / n
  if n == 1:
    return Estimate(mean, math.nan, 1)
  variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
  return Estimate(mean, float(stats.t.ppf(0.975, n - 1)) * math.sqrt(variance / n), n)


def _config_value(config: Mapping[str, Any], dotted: str, path: pathlib.Path) -> Any:
  node: Any = config
  for part in dotted.split("."):
    if not isinstance(node, Mapping) or part not in node:
      raise ComparisonError(f"{path}: the config has no key {dotted!r}")
    node = node[part]
  return node


def _run_config(path: pathlib.Path) -> Mapping[str, Any]:
  """The CONFIG_JSON literal of a run's `launch/config.py` (`training.run` writes it), read
  without executing the file: `metrics` does not depend on `config`."""
  tree = ast.parse(path.read_text(), filename=str(path))
  for node in tree.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1
        and getattr(node.targets[0], "id", None) == "CONFIG_JSON"
        and isinstance(node.value, ast.Constant)):
      return json.loads(node.value.value)
  raise ComparisonError(f"{path}: no CONFIG_JSON string")


def _read_json(path: pathlib.Path) -> Mapping[str, Any]:
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ComparisonError(f"{path}: not JSON ({e})") from e


def load_run(folder: str | pathlib.Path, group_by: str = "experiment.mode") -> RunResult:
  """Reads one run folder (module docstring); `ComparisonError` naming a missing file."""
  folder = pathlib.Path(folder)
  needed = [folder / "launch" / "config.py", folder / "eval" / "warm_start.json",
            folder / "eval" / "final.json"]
  for path in needed:
    if not path.is_file():
      raise ComparisonError(f"{path}: missing (did the run finish with eval.enabled?)")
  config = _run_config(needed[0])
  curves = {}
  for slice_name in ("main", "sub"):
    metrics = folder / "logs" / slice_name / "metrics.jsonl"
    curves[slice_name] = read_metrics(metrics) if metrics.is_file() else []
  before, after = _read_json(needed[1]), _read_json(needed[2])
  last_step = int(_config_value(config, "experiment.num_steps", needed[0]))
  return RunResult(name=folder.name, arm=str(_config_value(config, group_by, needed[0])),
                   seed=int(_config_value(config, "experiment.seed", needed[0])),
                   before=before, after=after, curves=curves,
                   held_out=_held_out_curve(folder, before, after, last_step),
                   machines=machine.read_labels_at(folder))


def _held_out_curve(folder: pathlib.Path, before: Mapping[str, Any],
                    after: Mapping[str, Any], last_step: int) -> dict[int, float]:
  """`RunResult.held_out` of a run folder: {RL step: greedy accuracy}, sorted by step."""
  summaries = {0: before, last_step: after}
  for path in folder.glob("eval/step_*.json"):
    summary = _read_json(path)
    if "step" not in summary:
      raise ComparisonError(f"{path}: no 'step' in the summary")
    summaries[int(summary["step"])] = summary
  curve = {step: _summary_value(summary, _GREEDY) for step, summary in summaries.items()}
  if any(value is None for value in curve.values()):
    return {}
  return dict(sorted(curve.items()))


def load_runs(workdir: str | pathlib.Path, group_by: str = "experiment.mode"
              ) -> list[RunResult]:
  """Every finished run under a sweep's workdir (subfolders with `eval/final.json`)."""
  workdir = pathlib.Path(workdir)
  folders = sorted(p.parent.parent for p in workdir.glob("*/eval/final.json"))
  if not folders:
    raise ComparisonError(f"{workdir}: no run folder with eval/final.json")
  return [load_run(folder, group_by) for folder in folders]


def reward_curve(run: RunResult, slice_name: str, keys: Sequence[str]) -> list[float]:
  """The run's per-step values of the first of `keys` its slice logged ([] if none)."""
  rows = run.curves.get(slice_name, ())
  for key in keys:
    values = [float(r[key]) for r in rows if key in r]
    if values:
      return values
  return []


def final_reward(run: RunResult, slice_name: str, keys: Sequence[str]) -> float | None:
  """`reward_curve`'s value at the run's last RL step (None when that slice logged none)."""
  curve = reward_curve(run, slice_name, keys)
  return curve[-1] if curve else None


def arms(runs: Sequence[RunResult], order: Sequence[str] = ()) -> dict[str, list[RunResult]]:
  """Runs grouped by arm, in `order` first then by name; seeds sorted within an arm."""
  grouped: dict[str, list[RunResult]] = {}
  for run in sorted(runs, key=lambda r: (r.arm, r.seed)):
    grouped.setdefault(run.arm, []).append(run)
  ranked = [a for a in order if a in grouped] + sorted(a for a in grouped if a not in order)
  return {a: grouped[a] for a in ranked}


def _summary_value(summary: Mapping[str, Any], path: Sequence[str]) -> float | None:
  """The number at `path` in a held-out summary; None where it has none (e.g. no greedy
  pass)."""
  node = summary_at(summary, path)
  return None if node is None else float(node)


def arm_row(runs: Sequence[RunResult]) -> dict[str, Estimate | None]:
  """The compared quantities of one arm: `<label> before/after/change` (None unless every
  run has the value) and final rewards."""
  row: dict[str, Estimate | None] = {}
  for label, path in _EVAL_KEYS:
    before = [_summary_value(r.before, path) for r in runs]
    after = [_summary_value(r.after, path) for r in runs]
    if None in before or None in after:
      row.update({f"{label} {phase}": None for phase in ("before", "after", "change")})
      continue
    row[f"{label} before"] = estimate(before)
    row[f"{label} after"] = estimate(after)
    row[f"{label} change"] = estimate([a - b for a, b in zip(after, before, strict=True)])
  for label, slice_name, keys in _REWARDS:
    values = [final_reward(r, slice_name, keys) for r in runs]
    present = [v for v in values if v is not None]
    row[f"{label} last step"] = estimate(present) if present else None
  return row


def held_out_curve(runs: Sequence[RunResult]) -> dict[int, Estimate]:
  """{RL step: greedy held-out accuracy over seeds} at the steps every run evaluated."""
  steps = set.intersection(*(set(r.held_out) for r in runs)) if runs else set()
  return {step: estimate([r.held_out[step] for r in runs]) for step in sorted(steps)}


def paired_differences(runs: Sequence[RunResult], reference: Sequence[RunResult]
                       ) -> dict[str, Estimate | None]:
  """Held-out accuracy after RL (sampled, greedy) of `runs` minus `reference`'s, seed by
  seed, over the seeds both have; None where no seed (or no greedy pass) pairs."""
  by_seed = {r.seed: r for r in reference}
  pairs = [(r, by_seed[r.seed]) for r in runs if r.seed in by_seed]
  out: dict[str, Estimate | None] = {}
  for label, path in _EVAL_KEYS[:2]:
    values = [(_summary_value(a.after, path), _summary_value(b.after, path)) for a, b in pairs]
    usable = [a - b for a, b in values if a is not None and b is not None]
    out[f"{label} after"] = estimate(usable) if usable and len(usable) == len(values) else None
  return out


def summary_markdown(grouped: Mapping[str, Sequence[RunResult]], group_by: str,
                     reference: str | None = None) -> str:
  """Markdown tables, one row per arm (module docstring); the paired table when
  `reference` names an arm."""
  rows = {arm: arm_row(runs) for arm, runs in grouped.items()}

  def cell(value: Estimate | None) -> str:
    return "–" if value is None else str(value)

  def seeds(arm: str) -> str:
    return ", ".join(str(r.seed) for r in grouped[arm])

  held_out = ["accuracy before", "accuracy after", "accuracy change",
              "greedy accuracy before", "greedy accuracy after", "greedy accuracy change",
              "format rate before", "format rate after", "sub-calls / rollout after"]
  training = ["format rate change", "sub-calls / rollout change", "R_M last step",
              "R_S last step"]
  lines = []
  tables = (("held-out test world", held_out), ("changes through RL, training rewards", training))
  for title, columns in tables:
    lines += [f"| {group_by} ({title}) | seeds | " + " | ".join(columns) + " |",
              "|---|---|" + "---|" * len(columns)]
    lines += [f"| {arm} | {seeds(arm)} | " + " | ".join(cell(rows[arm][c]) for c in columns)
              + " |" for arm in rows]
    lines.append("")
  for key, title in _GREEDY_BREAKDOWNS:
    lines += _before_after_table(grouped, group_by, seeds, key, title)
  lines += _held_out_curve_table(grouped, group_by, seeds)
  if reference in grouped:
    columns = ["accuracy after", "greedy accuracy after"]
    lines += [f"| {group_by} minus {reference} (paired by seed) | seeds | "
              + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for arm, runs in grouped.items():
      if arm == reference:
        continue
      paired = paired_differences(runs, grouped[reference])
      shared = sorted({r.seed for r in runs} & {r.seed for r in grouped[reference]})
      lines.append(f"| {arm} | {', '.join(map(str, shared))} | "
                   + " | ".join(cell(paired[c]) for c in columns) + " |")
    lines.append("")
  n = {r.after.get("num_questions", 0) for runs in grouped.values() for r in runs}
  lines.append(f"Means over seeds ± the half-width of the 95% t interval over seeds; "
               f"held-out questions per run: {', '.join(str(v) for v in sorted(n))}.")
  lines += _machines_lines(grouped)
  return "\n".join(lines) + "\n"


def _machines_lines(grouped: Mapping[str, Sequence[RunResult]]) -> list[str]:
  """Markdown lines naming the machines the runs computed on (`RunResult.machines`): one
  line when all share one; else each machine with its runs, since float results, and so
  accuracies, differ between machines (`machine.py`). None without records."""
  runs_of = machine.owners_by_machine(
      {run.name: [label for history in run.machines.values() for label in history]
       for runs in grouped.values() for run in runs})
  if not runs_of:
    return []
  if len(runs_of) == 1:
    return ["", f"Every run computed on {next(iter(runs_of))}."]
  return ["", "The runs computed on several machines, whose float results differ (the same "
          "run on two of them gives other accuracies):"] + [
              f"- {label}: {', '.join(names)}" for label, names in runs_of.items()]


# Per-key tables of the greedy pass (`_before_after_table`): the summary key, the title.
_GREEDY_BREAKDOWNS = (("accuracy_by_type", "greedy accuracy by type"),
                      ("sub_expert_by_property", "greedy S r_expert by asked property"))


def _before_after_table(grouped: Mapping[str, Sequence[RunResult]], group_by: str, seeds,
                        key: str, title: str) -> list[str]:
  """Markdown lines: each arm's greedy-pass breakdown `key` (accuracy per question type,
  S's r_expert per asked property), before -> after RL, means over the seeds whose
  summaries hold the column; none when no run has the breakdown."""
  def breakdown(summary: Mapping[str, Any]) -> Mapping[str, float]:
    return summary.get("greedy", {}).get(key, {})

  runs = [r for arm_runs in grouped.values() for r in arm_runs]
  names = sorted({n for r in runs for summary in (r.before, r.after) for n in breakdown(summary)})
  if not names:
    return []

  def cell(arm: str, name: str) -> str:
    pairs = [(breakdown(r.before)[name], breakdown(r.after)[name])
             for r in grouped[arm] if name in breakdown(r.before)
             and name in breakdown(r.after)]
    if not pairs:
      return "–"
    before, after = (math.fsum(values) / len(pairs) for values in zip(*pairs, strict=True))
    return f"{before:.3f} -> {after:.3f}"

  lines = [f"| {group_by} ({title}, before -> after) | seeds | "
           + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
  lines += [f"| {arm} | {seeds(arm)} | " + " | ".join(cell(arm, n) for n in names) + " |"
            for arm in grouped]
  return lines + [""]


def _held_out_curve_table(grouped: Mapping[str, Sequence[RunResult]], group_by: str, seeds
                          ) -> list[str]:
  """Markdown lines: each arm's greedy held-out accuracy per RL step (`held_out_curve`),
  one column per step any arm has; none when no arm has a step after 0 but the last."""
  curves = {arm: held_out_curve(runs) for arm, runs in grouped.items()}
  steps = sorted({step for curve in curves.values() for step in curve})
  if len(steps) <= 2:
    return []
  lines = [f"| {group_by} (greedy held-out accuracy at RL step) | seeds | "
           + " | ".join(str(step) for step in steps) + " |", "|---|---|" + "---|" * len(steps)]
  lines += [f"| {arm} | {seeds(arm)} | "
            + " | ".join(str(curves[arm][s]) if s in curves[arm] else "–" for s in steps) + " |"
            for arm in grouped]
  return lines + [""]


def plot_comparison(grouped: Mapping[str, Sequence[RunResult]], folder: pathlib.Path
                    ) -> list[pathlib.Path]:
  """Writes rewards.png, accuracy.png and, with greedy passes, held_out_curve.png (module
  docstring); returns their paths."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np

  folder.mkdir(parents=True, exist_ok=True)
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharex=True)
  for ax, (label, slice_name, keys) in zip(axes, _REWARDS, strict=True):
    for index, (arm, runs) in enumerate(grouped.items()):
      color = f"C{index % 10}"  # one colour per arm in both panels
      curves = [reward_curve(run, slice_name, keys) for run in runs]
      curves = [c for c in curves if c]
      if not curves:
        continue
      length = min(len(c) for c in curves)
      values = np.array([c[:length] for c in curves])
      steps = np.arange(1, length + 1)
      ax.plot(steps, values.mean(0), marker="o", color=color, label=arm)
      ax.fill_between(steps, values.min(0), values.max(0), color=color, alpha=0.15)
    ax.set(xlabel="RL step", ylabel=f"mean {label}", title=f"Training reward {label}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend()
  rewards = _save(plt, fig, folder / "rewards.png")

  names = list(grouped)
  panels = [(label, path) for label, path in _EVAL_KEYS[:3]
            if all(_summary_value(summary, path) is not None for runs in grouped.values()
                   for r in runs for summary in (r.before, r.after))]
  fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.5), squeeze=False)
  x = np.arange(len(names))
  for ax, (label, path) in zip(axes[0], panels, strict=True):
    for offset, phase in ((-0.18, "before"), (0.18, "after")):
      values = [estimate([_summary_value(getattr(r, phase), path) for r in grouped[a]])
                for a in names]
      means = np.array([v.mean for v in values])
      widths = np.array([0.0 if math.isnan(v.half_width) else v.half_width for v in values])
      # A rate is in [0, 1]: the interval is drawn clipped to it.
      errors = [np.minimum(widths, means), np.minimum(widths, 1.0 - means)]
      ax.bar(x + offset, means, width=0.36, yerr=errors, capsize=4,
             label="warm start" if phase == "before" else "after RL")
    ax.set_xticks(x, names, rotation=25, ha="right")  # arm names are long
    ax.set(ylabel=f"held-out {label}", title=f"Held-out {label} (95% t over seeds)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
  files = [rewards, _save(plt, fig, folder / "accuracy.png")]

  curves = {arm: held_out_curve(runs) for arm, runs in grouped.items()}
  if any(curves.values()):
    fig, ax = plt.subplots(figsize=(7.5, 3.5))
    for index, (arm, curve) in enumerate(curves.items()):
      if not curve:
        continue
      color = f"C{index % 10}"  # the arm's colour in rewards.png
      steps = np.array(list(curve))
      values = np.array([[r.held_out[step] for step in curve] for r in grouped[arm]])
      ax.plot(steps, values.mean(0), marker="o", color=color, label=arm)
      ax.fill_between(steps, values.min(0), values.max(0), color=color, alpha=0.15)
    ax.set(xlabel="RL step (0: warm start)", ylabel="held-out greedy accuracy",
           title="Held-out greedy accuracy during RL (band: seeds)", ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    files.append(_save(plt, fig, folder / "held_out_curve.png"))
  return files


def _save(plt: Any, fig: Any, path: pathlib.Path) -> pathlib.Path:
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def write_comparison(workdir: str | pathlib.Path, out: str | pathlib.Path | None = None, *,
                     group_by: str = "experiment.mode", order: Sequence[str] = (),
                     reference: str | None = None) -> tuple[str, list[pathlib.Path]]:
  """Loads a sweep's runs, writes `summary.md` (with the table paired against the arm
  `reference`, when it is one) and the plots under `out` (default
  `<workdir>/comparison`); returns the Markdown and the written paths."""
  grouped = arms(load_runs(workdir, group_by), order)
  folder = pathlib.Path(out) if out else pathlib.Path(workdir) / "comparison"
  files = plot_comparison(grouped, folder)
  markdown = summary_markdown(grouped, group_by, reference)
  summary = folder / SUMMARY_NAME
  summary.write_text(markdown)
  return markdown, files + [summary]
