"""The sweep comparison: seed statistics, run folders as runs write them, table, plots, CLI."""

from __future__ import annotations

import json
import math
import pathlib
import statistics
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.metrics import MetricsWriter, machine
from mgrpo_jax.metrics.comparison import (
  ComparisonError,
  arms,
  estimate,
  final_reward,
  load_run,
  load_runs,
  reward_curve,
  write_comparison,
)
from mgrpo_jax.slices.run import write_launch_files
from mgrpo_jax.store.folder import LocalFolder
from mgrpo_jax.training.paths import RunPaths

ROOT = pathlib.Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T_975_DF1 = 12.706204736174696
T_975_DF2 = 4.302652729911275


def _cell(values):
  """The reference: mean ± t_{0.975,1} * sample sd / sqrt(2), for two seeds."""
  half_width = T_975_DF1 * statistics.stdev(values) / math.sqrt(2)
  return f"{statistics.mean(values):.3f} ± {half_width:.3f}"


def _summary(accuracy, format_rate=0.5, sub_calls=1.0):
  return {"num_questions": 10, "num_rollouts": 20, "accuracy": accuracy,
          "accuracy_ci95": 0.1, "format_rate": format_rate, "sub_calls_mean": sub_calls}


def _write_run(workdir, name, mode, seed, before, after, rewards_main, rewards_sub=None, *,
               during=None, num_steps=None):
  """A run folder with the files a finished run leaves (real config and metrics writers);
  `during` {RL step: summary} are the checkpoints evaluated during RL."""
  folder = workdir / name
  config = base_config()
  apply_overrides(config, {"experiment.mode": mode, "experiment.seed": seed})
  if num_steps is not None:
    apply_overrides(config, {"experiment.num_steps": num_steps})
  write_launch_files(config, RunPaths(str(folder), folder, str(folder / "store")))
  (folder / "eval").mkdir(parents=True)
  (folder / "eval" / "warm_start.json").write_text(json.dumps(before))
  (folder / "eval" / "final.json").write_text(json.dumps(after))
  for step, summary in (during or {}).items():
    (folder / "eval" / f"step_{step}.json").write_text(json.dumps(dict(summary, step=step)))
  for slice_name, key, rewards in (("main", "main/reward_mean", rewards_main),
                                   ("sub", "sub/reward_mean", rewards_sub)):
    if rewards is None:
      continue
    with MetricsWriter(folder / "logs" / slice_name, tensorboard=False) as writer:
      for step, reward in enumerate(rewards):
        writer.write(step, {key: reward})
  return folder


@pytest.fixture
def sweep(tmp_path):
  """Two arms x two seeds, plus a run still going (no eval/final.json)."""
  _write_run(tmp_path, "mgrpo-s0", "mgrpo", 0, _summary(0.0), _summary(0.2, 0.7, 1.5),
             [0.1, 0.2, 0.3], [0.2, 0.3, 0.4])
  _write_run(tmp_path, "mgrpo-s1", "mgrpo", 1, _summary(0.1), _summary(0.4, 0.9, 2.5),
             [0.1, 0.3, 0.5], [0.2, 0.4, 0.6])
  _write_run(tmp_path, "single_agent-s0", "single_agent", 0, _summary(0.1, 0.3, 0.0),
             _summary(0.1, 0.4, 0.0), [0.0, 0.1, 0.1])
  _write_run(tmp_path, "single_agent-s1", "single_agent", 1, _summary(0.3, 0.3, 0.0),
             _summary(0.2, 0.4, 0.0), [0.0, 0.0, 0.3])
  (tmp_path / "frozen_sub-s0" / "eval").mkdir(parents=True)
  return tmp_path


def test_estimate_is_the_student_t_interval_over_seeds():
  three = estimate([0.1, 0.2, 0.3])
  assert three.mean == pytest.approx(0.2)
  assert three.half_width == pytest.approx(T_975_DF2 * 0.1 / math.sqrt(3))
  assert three.n == 3
  assert str(three) == "0.200 ± 0.248"
  one = estimate([0.4])
  assert math.isnan(one.half_width) and str(one) == "0.400"
  with pytest.raises(ValueError, match="at least one"):
    estimate([])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=6), st.floats(-1.0, 1.0))
def test_estimate_shifts_with_the_values_and_keeps_its_width(values, shift):
  base, moved = estimate(values), estimate([v + shift for v in values])
  assert base.half_width >= 0.0
  assert min(values) - 1e-12 <= base.mean <= max(values) + 1e-12
  assert moved.mean == pytest.approx(base.mean + shift, abs=1e-9)
  assert moved.half_width == pytest.approx(base.half_width, abs=1e-9)


def test_runs_are_read_from_the_files_a_run_writes(sweep):
  runs = load_runs(sweep)
  assert [(r.name, r.arm, r.seed) for r in runs] == [
      ("mgrpo-s0", "mgrpo", 0), ("mgrpo-s1", "mgrpo", 1),
      ("single_agent-s0", "single_agent", 0), ("single_agent-s1", "single_agent", 1)]
  assert runs[1].after["accuracy"] == 0.4
  assert [row["main/reward_mean"] for row in runs[1].curves["main"]] == [0.1, 0.3, 0.5]
  assert runs[2].curves["sub"] == []
  grouped = arms(runs, order=("single_agent", "mgrpo"))
  assert list(grouped) == ["single_agent", "mgrpo"]
  assert list(arms(runs)) == ["mgrpo", "single_agent"]
  by_seed = arms(load_runs(sweep, group_by="experiment.seed"))
  assert {k: [r.name for r in v] for k, v in by_seed.items()} == {
      "0": ["mgrpo-s0", "single_agent-s0"], "1": ["mgrpo-s1", "single_agent-s1"]}


def test_r_s_is_that_of_the_calls_made_when_the_run_logged_it(sweep):
  """Runs logged before `sub/reward_made_mean` existed fall back to the slots' mean."""
  runs = load_runs(sweep)
  assert reward_curve(runs[0], "sub", ("sub/reward_made_mean", "sub/reward_mean")) == [
      0.2, 0.3, 0.4]
  logs = sweep / "mgrpo-s0" / "logs" / "sub"
  (logs / "metrics.jsonl").unlink()  # the same run, logged by a version with the key
  with MetricsWriter(logs, tensorboard=False) as writer:
    for step, made in enumerate((0.5, 0.6, 0.7)):
      writer.write(step, {"sub/reward_mean": 0.0, "sub/reward_made_mean": made})
  run = load_runs(sweep)[0]
  assert reward_curve(run, "sub", ("sub/reward_made_mean", "sub/reward_mean")) == [
      0.5, 0.6, 0.7]
  assert final_reward(run, "sub", ("sub/reward_made_mean", "sub/reward_mean")) == 0.7


def test_a_bad_run_folder_is_named(sweep, tmp_path_factory):
  with pytest.raises(ComparisonError, match=r"frozen_sub-s0/launch/config\.py: missing"):
    load_run(sweep / "frozen_sub-s0")
  with pytest.raises(ComparisonError, match="no key 'experiment.arm'"):
    load_runs(sweep, group_by="experiment.arm")
  (sweep / "mgrpo-s0" / "eval" / "final.json").write_text("{not json")
  with pytest.raises(ComparisonError, match=r"mgrpo-s0/eval/final\.json: not JSON"):
    load_runs(sweep)
  empty = tmp_path_factory.mktemp("empty")
  with pytest.raises(ComparisonError, match="no run folder"):
    load_runs(empty)


def test_the_table_holds_the_seed_statistics(sweep):
  markdown, files = write_comparison(sweep, order=("mgrpo", "single_agent"))
  lines = markdown.splitlines()
  held_out = next(line for line in lines if line.startswith("| mgrpo |"))
  cells = [c.strip() for c in held_out.strip("|").split("|")]
  assert cells == ["mgrpo", "0, 1", _cell([0.0, 0.1]), _cell([0.2, 0.4]), _cell([0.2, 0.3]),
                   "–", "–", "–",  # these summaries have no greedy pass
                   "0.500 ± 0.000", _cell([0.7, 0.9]), _cell([1.5, 2.5])]
  assert not any("by type" in line for line in lines)
  training = [line for line in lines if line.startswith("| single_agent |")][1]
  cells = [c.strip() for c in training.strip("|").split("|")]
  assert cells[2] == _cell([0.1, 0.1])  # format change
  assert cells[4] == _cell([0.1, 0.3])  # R_M of the last step
  assert cells[5] == "–"  # the single agent logs no R_S
  assert lines.index(held_out) < lines.index(training)
  assert (sweep / "comparison" / "summary.md").read_text() == markdown
  assert sorted(f.name for f in files) == ["accuracy.png", "rewards.png", "summary.md"]
  for name in ("accuracy.png", "rewards.png"):
    assert (sweep / "comparison" / name).read_bytes()[:8] == PNG_MAGIC


def test_the_machines_the_runs_computed_on_are_named(sweep):
  markdown = write_comparison(sweep)[0]
  assert "computed on" not in markdown  # runs without machine records
  cpu = {"backend": "cpu", "packages": {"jax": "0.10.2"},
         "cpu": {"arch": "x86_64", "model": "Xeon", "isa": ["avx2"], "cores": 2}}
  for run in ("mgrpo-s0", "mgrpo-s1", "single_agent-s0", "single_agent-s1"):
    for role in ("main_rl", "sub_rl"):
      machine.record(LocalFolder(sweep / run), role, cpu)
  assert load_run(sweep / "mgrpo-s1").machines == {
      "main_rl": ["cpu: Xeon x86_64 (avx2), 2 cores; jax 0.10.2"],
      "sub_rl": ["cpu: Xeon x86_64 (avx2), 2 cores; jax 0.10.2"]}
  lines = write_comparison(sweep)[0].splitlines()
  assert lines[-1] == "Every run computed on cpu: Xeon x86_64 (avx2), 2 cores; jax 0.10.2."
  avx512 = dict(cpu, cpu=dict(cpu["cpu"], isa=["avx2", "avx512f"]))
  machine.record(LocalFolder(sweep / "single_agent-s1"), "main_rl", avx512)
  lines = write_comparison(sweep)[0].splitlines()
  assert lines[-3:] == [
      "The runs computed on several machines, whose float results differ (the same run on "
      "two of them gives other accuracies):",
      "- cpu: Xeon x86_64 (avx2), 2 cores; jax 0.10.2: mgrpo-s0, mgrpo-s1, single_agent-s0, "
      "single_agent-s1",
      "- cpu: Xeon x86_64 (avx2 avx512f), 2 cores; jax 0.10.2: single_agent-s1"]


def _greedy(accuracy, by_type):
  return dict(_summary(accuracy), greedy={"accuracy": accuracy, "accuracy_by_type": by_type})


def test_greedy_accuracy_and_each_types_change_are_compared(tmp_path):
  _write_run(tmp_path, "mgrpo-s0", "mgrpo", 0, _greedy(0.5, {"lookup": 0.8, "puzzle": 0.0}),
             _greedy(0.8, {"lookup": 0.9, "puzzle": 0.75}), [0.1])
  _write_run(tmp_path, "mgrpo-s1", "mgrpo", 1, _greedy(0.6, {"lookup": 0.6, "puzzle": 0.5}),
             _greedy(0.9, {"lookup": 1.0, "puzzle": 1.0}), [0.1])
  _write_run(tmp_path, "frozen_sub-s0", "frozen_sub", 0, _greedy(0.5, {"lookup": 0.8}),
             _greedy(0.6, {"lookup": 0.8}), [0.1])
  markdown, _ = write_comparison(tmp_path, order=("mgrpo", "frozen_sub"))
  lines = markdown.splitlines()
  held_out = [c.strip() for c in lines[2].strip("|").split("|")]
  assert held_out[:2] == ["mgrpo", "0, 1"]
  assert held_out[5:8] == [_cell([0.5, 0.6]), _cell([0.8, 0.9]), _cell([0.3, 0.3])]
  header = next(i for i, line in enumerate(lines) if "by type, before -> after" in line)
  assert lines[header].endswith("| seeds | lookup | puzzle |")
  assert lines[header + 2] == "| mgrpo | 0, 1 | 0.700 -> 0.950 | 0.250 -> 0.875 |"
  assert lines[header + 3] == "| frozen_sub | 0 | 0.800 -> 0.800 | – |"
  assert not any("paired by seed" in line for line in lines)
  assert not any("r_expert" in line for line in lines)  # summaries without S's scores


def _scored(accuracy, by_property):
  summary = _greedy(accuracy, {})
  summary["greedy"]["sub_expert_by_property"] = by_property
  return summary


def test_s_reports_per_asked_property_are_compared(tmp_path):
  _write_run(tmp_path, "mgrpo-s0", "mgrpo", 0, _scored(0.5, {"boss": 0.2, "year": 1.0}),
             _scored(0.8, {"boss": 0.8, "year": 1.0}), [0.1])
  _write_run(tmp_path, "mgrpo-s1", "mgrpo", 1, _scored(0.6, {"boss": 0.4, "year": 0.5}),
             _scored(0.9, {"boss": 1.0, "year": 1.0}), [0.1])
  _write_run(tmp_path, "frozen_sub-s0", "frozen_sub", 0, _scored(0.5, {"boss": 0.2}),
             _scored(0.6, {"boss": 0.2}), [0.1])
  lines = write_comparison(tmp_path, order=("mgrpo", "frozen_sub"))[0].splitlines()
  header = next(i for i, line in enumerate(lines) if "r_expert by asked property" in line)
  assert lines[header].endswith("| seeds | boss | year |")
  assert lines[header + 2] == "| mgrpo | 0, 1 | 0.300 -> 0.900 | 0.750 -> 1.000 |"
  assert lines[header + 3] == "| frozen_sub | 0 | 0.200 -> 0.200 | – |"


def test_the_held_out_curve_is_compared_at_the_steps_every_seed_evaluated(tmp_path):
  for seed, (before, during, after) in enumerate(((0.5, (0.6, 0.7), 0.8), (0.6, (0.8, 0.9), 1.0))):
    _write_run(tmp_path, f"mgrpo-s{seed}", "mgrpo", seed, _greedy(before, {}),
               _greedy(after, {}), [0.1], num_steps=30,
               during={10: _greedy(during[0], {}), 20: _greedy(during[1], {})})
  # frozen_sub's second seed stopped evaluating after step 10 (e.g. eval.every changed).
  _write_run(tmp_path, "frozen_sub-s0", "frozen_sub", 0, _greedy(0.5, {}), _greedy(0.6, {}),
             [0.1], num_steps=30, during={10: _greedy(0.5, {}), 20: _greedy(0.5, {})})
  _write_run(tmp_path, "frozen_sub-s1", "frozen_sub", 1, _greedy(0.6, {}), _greedy(0.7, {}),
             [0.1], num_steps=30, during={10: _greedy(0.6, {})})
  runs = {r.name: r for r in load_runs(tmp_path)}
  assert runs["mgrpo-s0"].held_out == {0: 0.5, 10: 0.6, 20: 0.7, 30: 0.8}
  assert list(runs["frozen_sub-s1"].held_out) == [0, 10, 30]
  markdown, files = write_comparison(tmp_path, order=("mgrpo", "frozen_sub"))
  lines = markdown.splitlines()
  header = lines.index("| experiment.mode (greedy held-out accuracy at RL step) | seeds "
                       "| 0 | 10 | 20 | 30 |")
  assert lines[header + 2] == (f"| mgrpo | 0, 1 | {_cell([0.5, 0.6])} | {_cell([0.6, 0.8])} | "
                               f"{_cell([0.7, 0.9])} | {_cell([0.8, 1.0])} |")
  assert lines[header + 3] == (f"| frozen_sub | 0, 1 | {_cell([0.5, 0.6])} | "
                               f"{_cell([0.5, 0.6])} | – | {_cell([0.6, 0.7])} |")
  curve = tmp_path / "comparison" / "held_out_curve.png"
  assert curve in files and curve.read_bytes()[:8] == PNG_MAGIC
  (tmp_path / "mgrpo-s1" / "eval" / "step_20.json").write_text(json.dumps(_greedy(0.9, {})))
  with pytest.raises(ComparisonError, match=r"mgrpo-s1/eval/step_20\.json: no 'step'"):
    load_runs(tmp_path)


def test_arms_are_compared_with_the_reference_seed_by_seed(tmp_path):
  for seed, (ours, theirs) in enumerate(((0.8, 0.6), (0.9, 0.8), (0.7, 0.3))):
    _write_run(tmp_path, f"mgrpo-s{seed}", "mgrpo", seed, _greedy(0.5, {}), _greedy(ours, {}),
               [0.1])
    _write_run(tmp_path, f"frozen_sub-s{seed}", "frozen_sub", seed, _greedy(0.5, {}),
               _greedy(theirs, {}), [0.1])
  _write_run(tmp_path, "single_agent-s7", "single_agent", 7, _summary(0.1), _summary(0.2), [0.1])
  markdown, _ = write_comparison(tmp_path, order=("mgrpo", "frozen_sub"), reference="mgrpo")
  lines = markdown.splitlines()
  header = lines.index("| experiment.mode minus mgrpo (paired by seed) | seeds | accuracy after "
                       "| greedy accuracy after |")
  want = _cell3([-0.2, -0.1, -0.4])
  assert lines[header + 2] == f"| frozen_sub | 0, 1, 2 | {want} | {want} |"
  assert lines[header + 3] == "| single_agent |  | – | – |"  # no seed in common


def _cell3(values):
  """The reference: mean ± t_{0.975,2} * sample sd / sqrt(3), for three seeds."""
  half_width = T_975_DF2 * statistics.stdev(values) / math.sqrt(3)
  return f"{statistics.mean(values):.3f} ± {half_width:.3f}"


def test_the_command_line_prints_the_table_or_names_the_problem(sweep, tmp_path_factory):
  out = tmp_path_factory.mktemp("out")
  done = subprocess.run([sys.executable, str(ROOT / "launch" / "compare.py"),
                         f"--workdir={sweep}", f"--out={out}"],
                        capture_output=True, text=True, timeout=120, cwd=ROOT)
  assert done.returncode == 0, done.stderr
  assert "| mgrpo | 0, 1 |" in done.stdout and (out / "rewards.png").is_file()
  empty = tmp_path_factory.mktemp("empty")
  failed = subprocess.run([sys.executable, str(ROOT / "launch" / "compare.py"),
                           f"--workdir={empty}"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
  assert failed.returncode == 2
  assert failed.stderr.strip() == f"compare.py: error: {empty}: no run folder with eval/final.json"
