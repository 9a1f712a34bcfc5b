"""The run's console: a training step's line, short by default and full with `--verbose`,
the world build's lines, and the report files the run ends by naming."""

from __future__ import annotations

import io

import pytest

from mgrpo_jax.config import base_config
from mgrpo_jax.metrics import format_progress
from mgrpo_jax.metrics.report import file_lines
from mgrpo_jax.scale import writers
from mgrpo_jax.slices import run
from mgrpo_jax.slices.common import Timer
from mgrpo_jax.slices.step_log import step_line
from mgrpo_jax.tasks import world_data
from mgrpo_jax.tasks.world_setup import WorldSetup

# A main and a sub step of the paper comparison's metrics.jsonl (step 80 of 80).
MAIN = {"main/advantage_abs_mean": 0.5023017525672913, "main/correct_mean": 0.546875,
        "main/format_ok_mean": 0.84375, "main/from_cache": 0.0,
        "main/reward_mean": 0.5765625238418579, "main/sampled_tokens": 1626.0,
        "main/sub_calls_max": 3.0, "main/sub_calls_mean": 1.265625,
        "main/update/grad_norm": 0.2135729193687439,
        "main/update/learning_rate": 4.1610005041547993e-07,
        "main/update/loss": -1.3969838619232178e-08, "main/update/num_tokens": 1626.0,
        "sub/sampled_tokens": 1218.0}
MAIN_TIMES = {"wait_sub": 0.00019151900050928816, "rollout": 3.6325491039970075,
              "sub_calls": 2.042014372000267, "scoring": 0.0012530300009530038,
              "store": 0.03905429400037974, "update": 5.351251500000217,
              "checkpoint": 0.6737644829991041, "page": 0.5}
MAIN_THROUGHPUT = {"update": 303.8541544907643, "main": 1022.2977010748685,
                   "sub": 596.469846980999}
MAIN_PROGRESS = {"main/reward": MAIN["main/reward_mean"], "loss": MAIN["main/update/loss"],
                 "sub_calls": MAIN["main/sub_calls_mean"]}
SUB = {"sub/advantage_abs_mean": 0.4375782907009125, "sub/calls": 81.0,
       "sub/reward_made_mean": 0.6401234269142151, "sub/reward_mean": 0.692916750907898,
       "sub/valid_slots": 120.0, "sub/update/loss": 2.3e-09}
SUB_TIMES = {"wait_outcomes": 7.074765789999219, "load": 0.051576580000983085,
             "scoring": 0.010291160997439874, "update": 4.2, "store": 0.006593335998331895,
             "checkpoint": 0.61}


@pytest.fixture
def verbose():
  """`--verbose` in this process for the test, as the launcher sets it."""
  writers.set_verbose(True)
  yield
  writers.set_verbose(False)


def _timer(seconds: dict[str, float], elapsed: float) -> Timer:
  timer = Timer()
  timer.seconds.update(seconds)
  timer.elapsed = lambda: elapsed
  return timer


def test_a_step_line_names_the_headline_numbers_within_120_characters():
  main = step_line("main", 79, 80, MAIN, _timer(MAIN_TIMES, 12.34), MAIN_THROUGHPUT,
                   MAIN_PROGRESS)
  assert main == ("step 80/80 | R_M 0.577 correct 0.547 format 0.844 sub-calls 1.266 | "
                  "12.3 s/step")
  sub = step_line("sub", 79, 80, SUB, _timer(SUB_TIMES, 12.1), {"update": 280.5},
                  {"sub/reward": SUB["sub/reward_mean"], "calls": SUB["sub/calls"],
                   "loss": SUB["sub/update/loss"]})
  assert sub == "step 80/80 | R_S 0.693 calls 81 | 12.1 s/step"
  # The widest numbers a run prints, behind the `--slice=all` parent's longest prefix.
  wide = {key: -1.23456e-10 for key in MAIN}
  line = step_line("main", 99_998, 99_999, wide, _timer(MAIN_TIMES, 12_345.6), {}, {})
  assert len("[rl] [main] " + line) <= 120, line
  assert "loss" not in main and "tok/s" not in main  # the full line's numbers


def test_verbose_gives_the_full_line(verbose):
  del verbose
  timer = _timer(MAIN_TIMES, 12.34)
  line = step_line("main", 79, 80, MAIN, timer, MAIN_THROUGHPUT, MAIN_PROGRESS)
  assert line == format_progress(80, 80, MAIN_PROGRESS, MAIN_TIMES, MAIN_THROUGHPUT)
  assert line.startswith("step 80/80 | main/reward 0.577 loss -1.40e-08 sub_calls 1.266 | ")
  assert line.endswith(" | update 304 tok/s main 1022 tok/s sub 596 tok/s")


def _children_commands(monkeypatch, tmp_path) -> list[list[str]]:
  """The commands `run_children` starts (children that exit at once)."""
  commands = []

  class _Exited:
    pid, returncode = 12345, 0

    def __init__(self, command, **kwargs):
      del kwargs
      commands.append(command)
      self.stdout = io.BytesIO()

    def poll(self):
      return 0

  monkeypatch.setattr(run.subprocess, "Popen", _Exited)
  config = base_config()
  run.run_children(config, str(tmp_path), ("sub", "main"), "rl")
  return commands


def test_the_children_get_verbose_when_the_launcher_has_it(monkeypatch, tmp_path, verbose):
  del verbose
  commands = _children_commands(monkeypatch, tmp_path)
  assert commands and all("--verbose" in command for command in commands)
  writers.set_verbose(False)
  commands = _children_commands(monkeypatch, tmp_path)
  assert commands and not any("--verbose" in command for command in commands)


def test_the_world_build_says_when_it_starts_and_ends(monkeypatch, tmp_path):
  built = []

  def build(size, seed, out, **kwargs):
    built.append((size, seed, kwargs))
    out.mkdir(parents=True)
    (out / "manifest.json").write_text("{}")

  monkeypatch.setattr(world_data.build_lib, "build", build)
  config = base_config()
  world = config.world
  lines = []
  setup = WorldSetup.from_config(config)
  assert world_data.ensure_world(tmp_path, setup, lines.append) == tmp_path / "data" / "world"
  assert lines[0] == (f"world: building the {world.size} {world.render} world "
                      f"(seed {world.seed}, test world seed {world.test_seed})")
  assert lines[1].startswith("world: built in ") and lines[1].endswith(" s")
  world_data.ensure_world(tmp_path, setup, lines.append)  # built: nothing to say
  assert len(built) == 1 and len(lines) == 2


def test_the_last_lines_name_every_report_file(tmp_path):
  report, evals = tmp_path / "report", tmp_path / "eval"
  report.mkdir()
  evals.mkdir()
  pages = ["eval_warm_start.html", "eval_final.html"] + [
      f"rl_step_{t:05d}.html" for t in range(0, 80, 5)]
  names = ["summary.txt", "rewards.png", "accuracy.png", "notes.md", *pages]
  for name in names:
    (report / name).write_text("x")
  for label in ("warm_start", "final", "step_10", "step_20"):
    (evals / f"{label}.json").write_text("{}")
  lines = file_lines(tmp_path)
  assert lines[0] == f"report: {report}"
  assert lines[1] == "  table: summary.txt"
  assert lines[2] == "  plots: accuracy.png rewards.png"
  assert lines[3].startswith("  trajectory pages: eval_final.html eval_warm_start.html "
                             "rl_step_00000.html rl_step_00005.html ")
  assert lines[-3] == "  other: notes.md"
  assert lines[-2:] == [f"held-out summaries: {evals}",
                        "  eval: final.json step_10.json step_20.json warm_start.json"]
  assert all(len(line) <= 120 for line in lines[1:]), lines
  named = " ".join(lines).split()
  assert all(name in named for name in names)
  assert all(f"{label}.json" in named for label in ("warm_start", "final", "step_10"))
  assert file_lines(tmp_path / "none") == [f"report: {tmp_path / 'none' / 'report'}"]
