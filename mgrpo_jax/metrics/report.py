"""The end-of-run report: training curves as PNG and the before/after table.

Inputs are files the run already wrote: each slice's `metrics.jsonl` (`read_metrics`)
and the held-out evaluation summaries (`evaluation.held_out`, dicts with accuracy,
its 95% half-width, format rate, sub-calls and tool calls per rollout). Outputs, under
`<local>/report/`: `rewards.png` (mean R_M and R_S per RL step), `accuracy.png` (M's
training accuracy per step, the held-out accuracy before and after RL as markers, and
the greedy held-out accuracy at the warm start, at the evaluated RL checkpoints
(`curve`) and after RL as a line), and `summary.txt` (the table that is also printed; its
last line names the machines the run computed on, whose CPU and jax version decide its
float results: `machine.py`). `file_lines` names them, with the rest of the folder (the
evaluations' and training steps' trajectory pages) and the held-out summaries in
`<local>/eval/`: the lines a run's console ends with.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from mgrpo_jax.metrics.writer import read_metrics

LABEL = 32
ROWS = (("held-out accuracy", "accuracy"), ("  95% half-width", "accuracy_ci95"),
        ("format rate", "format_rate"), ("sub-calls per rollout", "sub_calls_mean"))
# Rows of the greedy pass (temperature 0), shown when every summary has one.
GREEDY_ROWS = (("greedy accuracy", ("greedy", "accuracy")),
               ("  95% half-width (greedy)", ("greedy", "accuracy_ci95")))
# Rows shown when a summary has them (`evaluation.copy_rates`).
COPY_ROWS = (("M first action = oracle's", "first_action_oracle_rate"),
             ("S query = its sub-task", "sub_query_copy_rate"))
# S's reports scored by the expert judge (`held_out.sub_expert_scores`), shown when
# every summary has them; per property for the greedy pass only.
EXPERT_ROWS = (("S report r_expert", ("sub_expert_mean",)),
               ("S report r_expert (greedy)", ("greedy", "sub_expert_mean")))
# Rows of `evaluation`'s held-out turn accuracy (teacher-forced), per trained role.
TURN_LABELS = {"main": "M", "sub": "S"}


@dataclasses.dataclass(frozen=True)
class Report:
  """The printed table and the files written."""
  table: str
  files: tuple[pathlib.Path, ...]


def _series(rows: Sequence[Mapping[str, float]], key: str) -> tuple[list[int], list[float]]:
  steps = [int(r["step"]) + 1 for r in rows if key in r]
  return steps, [float(r[key]) for r in rows if key in r]


def summary_at(summary: Mapping[str, Any], path: Sequence[str]) -> Any | None:
  """What a held-out summary holds at `path` (keys, outermost first); None where it
  holds nothing (e.g. no greedy pass, or no S to score)."""
  node: Any = summary
  for part in path:
    if not isinstance(node, Mapping) or part not in node:
      return None
    node = node[part]
  return node


def summary_table(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                  title: str = "") -> str:
  """A fixed-width table: one row per metric, columns warm start / after RL / change."""
  columns = [("warm start", before), ("after RL", after)]
  columns = [(name, s) for name, s in columns if s is not None]
  if not columns:
    return f"{title}: no evaluation"
  keys = list(ROWS)
  greedy = all("greedy" in s for _, s in columns)
  if greedy:
    keys += list(GREEDY_ROWS)
  keys += [(label, key) for label, key in COPY_ROWS if all(key in s for _, s in columns)]
  roles = sorted({r for _, s in columns for r in s.get("turn_accuracy", {})})
  keys += [(f"{TURN_LABELS.get(r, r)} turns right (forced)", ("turn_accuracy", r, "all"))
           for r in roles]
  keys += [(f"{TURN_LABELS.get(r, r)} demonstrated turns ({kind})",
            ("demonstrated_turn_accuracy", r, field))
           for kind, field in (("forced", "all"), ("ceiling", "ceiling")) for r in roles
           if all(summary_at(s, ("demonstrated_turn_accuracy", r, field)) is not None
                  for _, s in columns)]
  tools = sorted({t for _, s in columns for t in s.get("tool_calls_mean", {})})
  keys += [(f"{t} calls per rollout", ("tool_calls_mean", t)) for t in tools]
  types = sorted({t for _, s in columns for t in s.get("accuracy_by_type", {})})
  keys += [(f"accuracy: {t}", ("accuracy_by_type", t)) for t in types]
  if greedy:
    keys += [(f"greedy accuracy: {t}", ("greedy", "accuracy_by_type", t)) for t in types]
  keys += [(label, key) for label, key in EXPERT_ROWS
           if all(summary_at(s, key) is not None for _, s in columns)]
  if all(summary_at(s, ("greedy", "sub_expert_by_property")) is not None for _, s in columns):
    props = sorted({p for _, s in columns for p in s["greedy"]["sub_expert_by_property"]})
    keys += [(f"greedy S r_expert: {p}", ("greedy", "sub_expert_by_property", p))
             for p in props]

  def value(summary, key):
    if isinstance(key, tuple):
      found = summary_at(summary, key)
      return 0.0 if found is None else found
    return summary.get(key)

  header = f"{'':{LABEL}s}" + "".join(f"{name:>12s}" for name, _ in columns)
  if len(columns) == 2:
    header += f"{'change':>12s}"
  lines = [title, header] if title else [header]
  for label, key in keys:
    values = [value(s, key) for _, s in columns]
    line = f"{label:{LABEL}s}" + "".join(f"{v:12.3f}" for v in values)
    if len(columns) == 2 and "accuracy_ci95" not in (key if isinstance(key, tuple) else (key,)):
      line += f"{values[1] - values[0]:+12.3f}"
    lines.append(line)
  n = columns[-1][1].get("num_questions", 0)
  asked = ("validation questions of the training world"
           if columns[-1][1].get("split") == "validation"
           else "held-out questions of an unseen test world")
  lines.append(f"({n} {asked}, "
               f"{columns[-1][1].get('num_rollouts', 0) // max(n, 1)} samples each"
               f"{_sampling_note(columns)})")
  return "\n".join(lines)


def _sampling_note(columns: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
  """How the columns' sampled rollouts were drawn, per column, where not at temperature
  1 from the whole distribution (`eval.temperature`, `eval.top_p`)."""
  note = ""
  for key, words in (("temperature", "at temperature"), ("top_p", "from the nucleus top_p")):
    values = [s.get(key, 1.0) for _, s in columns]
    if any(v != 1.0 for v in values):
      note += f", sampled {words} " + " / ".join(f"{v:g}" for v in values)
  return note


def greedy_curve(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                 curve: Sequence[tuple[int, Mapping[str, Any]]], last: int
                 ) -> tuple[list[int], list[float], list[float]]:
  """(steps, greedy accuracy, 95% half-width) of the summaries that have a greedy pass:
  `before` at step 0, `curve`'s (step, summary) pairs, `after` at step `last`."""
  points = [(0, before)] + list(curve) + [(last, after)]
  points = [(t, s["greedy"]) for t, s in points if s is not None and "greedy" in s]
  return ([t for t, _ in points], [float(g["accuracy"]) for _, g in points],
          [float(g["accuracy_ci95"]) for _, g in points])


def plot_training(main_rows: Sequence[Mapping[str, float]],
                  sub_rows: Sequence[Mapping[str, float]], folder: pathlib.Path,
                  before: Mapping[str, Any] | None = None,
                  after: Mapping[str, Any] | None = None,
                  curve: Sequence[tuple[int, Mapping[str, Any]]] = ()) -> list[pathlib.Path]:
  """Writes rewards.png and accuracy.png (module docstring); returns their paths."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  folder.mkdir(parents=True, exist_ok=True)
  fig, ax = plt.subplots(figsize=(6, 3.5))
  for rows, key, label in ((main_rows, "main/reward_mean", "R_M (main agent)"),
                           (sub_rows, "sub/reward_mean", "R_S (sub-agent)")):
    steps, values = _series(rows, key)
    if steps:
      ax.plot(steps, values, marker="o", label=label)
  ax.set(xlabel="RL step", ylabel="mean reward", title="Training rewards per agent")
  rewards = _save_figure(plt, fig, ax, folder / "rewards.png")

  fig, ax = plt.subplots(figsize=(6, 3.5))
  steps, values = _series(main_rows, "main/correct_mean")
  if steps:
    ax.plot(steps, values, marker="o", label="training rollouts")
  last = steps[-1] if steps else 1
  for x, summary, label in ((0, before, "held-out, warm start"),
                            (last, after, "held-out, after RL")):
    if summary is not None:
      ax.errorbar([x], [summary["accuracy"]], yerr=[summary["accuracy_ci95"]], fmt="s",
                  capsize=4, label=label)
  steps, values, half_widths = greedy_curve(before, after, curve, last)
  if steps:
    ax.errorbar(steps, values, yerr=half_widths, marker="^", capsize=3,
                label="held-out, greedy")
  ax.set(xlabel="RL step", ylabel="accuracy", ylim=(-0.02, 1.02), title="Main agent accuracy")
  accuracy = _save_figure(plt, fig, ax, folder / "accuracy.png")
  return [rewards, accuracy]


def _save_figure(plt: Any, fig: Any, ax: Any, path: pathlib.Path) -> pathlib.Path:
  """Grid, legend, tight layout; writes `path` (PNG, 100 dpi) and closes the figure."""
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def write_report(local: pathlib.Path, main_metrics: pathlib.Path, sub_metrics: pathlib.Path,
                 before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, *,
                 title: str = "", curve: Sequence[tuple[int, Mapping[str, Any]]] = (),
                 machines: str = "") -> Report:
  """Plots and table of one run under `<local>/report/` (module docstring); `machines`,
  the line naming where the run computed (`machine.computed_on`), ends the table."""
  folder = pathlib.Path(local) / "report"
  main_rows = read_metrics(main_metrics) if pathlib.Path(main_metrics).exists() else []
  sub_rows = read_metrics(sub_metrics) if pathlib.Path(sub_metrics).exists() else []
  files = plot_training(main_rows, sub_rows, folder, before, after, curve)
  table = summary_table(before, after, title)
  if curve:
    table += "\ngreedy held-out accuracy during RL: " + ", ".join(
        f"step {t} {s['greedy']['accuracy']:.3f} +- {s['greedy']['accuracy_ci95']:.3f}"
        for t, s in curve)
  if machines:
    table += "\n" + machines
  summary = folder / "summary.txt"
  summary.write_text(table + "\n")
  return Report(table, tuple(files) + (summary,))


# The kinds of a report folder's files, in the order `file_lines` names them.
_FILE_KINDS = (("table", "summary.txt"), ("plots", "*.png"),
               ("trajectory pages", "*.html"))


def _natural(name: str) -> list[Any]:
  """Sorts "step_5" before "step_10"."""
  return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _named(kind: str, names: Sequence[str], width: int) -> list[str]:
  """`  <kind>: a b c`, wrapped at `width` characters under its first name."""
  return textwrap.wrap(" ".join(names), width, initial_indent=f"  {kind}: ",
                       subsequent_indent=" " * (len(kind) + 4), break_on_hyphens=False,
                       break_long_words=False)


def file_lines(local: pathlib.Path, width: int = 120) -> list[str]:
  """Lines naming the report folder under `local` and each file in it, by kind (the
  table, the plots, the trajectory pages, any other), then `<local>/eval/` and its
  held-out summaries; names wrap at `width` characters."""
  folder, evals = pathlib.Path(local) / "report", pathlib.Path(local) / "eval"
  names = sorted((p.name for p in folder.glob("*") if p.is_file()), key=_natural)
  lines = [f"report: {folder}"]
  for kind, pattern in _FILE_KINDS:
    lines += _named(kind, [n for n in names if pathlib.PurePath(n).match(pattern)], width)
  lines += _named("other", [n for n in names if not any(
      pathlib.PurePath(n).match(pattern) for _, pattern in _FILE_KINDS)], width)
  summaries = sorted((p.name for p in evals.glob("*.json")), key=_natural)
  if summaries:
    lines += [f"held-out summaries: {evals}"] + _named("eval", summaries, width)
  return lines
