"""One evaluation per label, and one per evaluation key across runs (evaluation/stage.py);
its trajectory page shows the run's R_M."""

from __future__ import annotations

import json
import re
import threading
import types

import pytest

from mgrpo_jax import plugins
from mgrpo_jax.agents.records import MainRecord
from mgrpo_jax.config import apply_overrides, base_config, flat_values
from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.evaluation import stage as evaluation_stage
from mgrpo_jax.evaluation.stage import shared_evaluation, write_page
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.utils.atomic_files import atomic_write
from tests.support import user_rewards
from tests.support.page_records import trajectory


def _config(**overrides):
  config = base_config()
  apply_overrides(config, {"warm_start.dir": "../warm_start/multi-s0",
                           "main.model.init_checkpoint": "/w/multi-s0/main",
                           "sub.model.init_checkpoint": "/w/multi-s0/sub", **overrides})
  return config


def evaluation_key(config) -> str:
  """The key of `config` in its own `experiment.mode`."""
  return evaluation_stage.evaluation_key(config, parse_mode(str(config.experiment.mode)))


def test_flat_values_lists_every_key_but_the_excluded_ones_and_groups():
  config = _config()
  values = flat_values(config)
  assert values["experiment.seed"] == 0 and values["main.optim.learning_rate"] > 0
  assert list(values) == sorted(values)
  kept = flat_values(config, excluding=("experiment.seed", "main.optim."))
  assert set(values) - set(kept) == {"experiment.seed"} | {
      key for key in values if key.startswith("main.optim.")}


def test_the_decoupled_modes_and_run_labels_share_a_key_and_nothing_else_does():
  key = evaluation_key(_config(**{"experiment.mode": "mgrpo"}))
  same = [{"experiment.mode": "frozen_sub"}, {"experiment.mode": "no_alignment"},
          {"experiment.name": "frozen_sub", "experiment.run_id": "frozen_sub-s0"},
          {"experiment.num_steps": 80}, {"main.optim.learning_rate": 0.0},
          {"sub.loss.clip_high": 0.5}, {"experiment.compilation_cache_dir": "../jax_cache"}]
  for overrides in same:
    assert evaluation_key(_config(**overrides)) == key, overrides
  other = [{"experiment.mode": "shared_policy"}, {"experiment.mode": "single_agent"},
           {"experiment.seed": 1}, {"eval.num_questions": 7}, {"eval.samples": 3},
           {"world.test_seed": 5}, {"main.sampling.temperature": 0.5},
           {"main.model.init_checkpoint": "/w/multi-s1/main"},
           {"mgrpo.max_sub_calls": 2}, {"rewards.a1": 0.2}]
  keys = [evaluation_key(_config(**overrides)) for overrides in other]
  assert len(set(keys) | {key}) == len(other) + 1, dict(zip(map(str, other), keys, strict=True))
  assert len(key) == 16 and int(key, 16) >= 0


def _paths(tmp_path, run):
  return RunPaths.from_config(_config(**{"experiment.run_id": run}), str(tmp_path / run))


def _writer(paths, label, text, calls):
  """What `run_evaluation` leaves: the run's summary and trajectory page."""
  def evaluate():
    calls.append(paths.local.name)
    atomic_write(paths.local / "report" / f"eval_{label}.html", f"<p>{text}".encode())
    atomic_write(paths.local / "eval" / f"{label}.json", json.dumps({"accuracy": text}).encode())
  return evaluate


def _files(paths, label):
  return ((paths.local / "eval" / f"{label}.json").read_bytes(),
          (paths.local / "report" / f"eval_{label}.html").read_bytes())


def test_the_first_run_evaluates_and_the_others_copy_its_files(tmp_path):
  kept, calls = tmp_path / "warm_start" / "eval" / "k", []
  first, second = _paths(tmp_path, "mgrpo-s0"), _paths(tmp_path, "frozen_sub-s0")
  shared_evaluation(first, "warm_start", kept, _writer(first, "warm_start", "0.5", calls))
  shared_evaluation(second, "warm_start", kept, _writer(second, "warm_start", "0.9", calls))
  assert calls == ["mgrpo-s0"]
  assert _files(second, "warm_start") == _files(first, "warm_start") == (
      b'{"accuracy": "0.5"}', b"<p>0.5")


def test_a_failed_evaluation_keeps_nothing_so_the_next_run_evaluates(tmp_path):
  kept, calls = tmp_path / "k", []
  first, second = _paths(tmp_path, "a"), _paths(tmp_path, "b")

  def fails():
    calls.append("a")
    raise RuntimeError("the evaluation child exited 1")

  with pytest.raises(RuntimeError, match="exited 1"):
    shared_evaluation(first, "warm_start", kept, fails)
  assert not (kept / "summary.json").exists()
  shared_evaluation(second, "warm_start", kept, _writer(second, "warm_start", "0.7", calls))
  assert calls == ["a", "b"] and (kept / "summary.json").read_bytes() == b'{"accuracy": "0.7"}'


def test_runs_that_start_together_evaluate_once(tmp_path):
  kept, calls = tmp_path / "k", []
  runs = [_paths(tmp_path, f"r{i}") for i in range(4)]
  threads = [threading.Thread(target=shared_evaluation,
                              args=(paths, "warm_start", kept,
                                    _writer(paths, "warm_start", paths.local.name, calls)))
             for paths in runs]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert len(calls) == 1
  assert len({_files(paths, "warm_start") for paths in runs}) == 1


@pytest.mark.usefixtures("clean_gin")
def test_a_gin_bound_reward_gets_its_own_evaluation_key():
  key = evaluation_key(_config())
  plugins.parse_gin([], [f"import {user_rewards.__name__}", user_rewards.BINDING])
  assert evaluation_key(_config()) != key


def _page_rewards(tmp_path, **overrides) -> list[str]:
  """R_M of each rollout on the evaluation page `write_page` writes under `overrides`."""
  config = _config(**{"eval.viewer_questions": 1, **overrides})
  paths = RunPaths.from_config(config, str(tmp_path))
  main = [MainRecord("a", k, "main", trajectory([(f"<result>{a}</result>", None, "")], a),
                     0, float(a == "gold")) for k, a in enumerate(("gold", "no"))]
  question = types.SimpleNamespace(text="text a", answer="gold", type="lookup")
  result = types.SimpleNamespace(main=main, sub=[], questions={"a": question})
  summary = {"accuracy": 0.5, "accuracy_ci95": 0.1, "num_questions": 1, "num_rollouts": 2,
             "format_rate": 1.0, "sub_calls_mean": 0.0}
  write_page(config, paths, "final", result, summary)
  page = (paths.local / "report" / "eval_final.html").read_text()
  return re.findall(r"R_M (-?[0-9.]+)", page)


@pytest.mark.usefixtures("clean_gin")
def test_the_evaluation_page_shows_the_runs_r_main(tmp_path):
  assert _page_rewards(tmp_path / "paper") == ["1.000", "0.100"]
  assert _page_rewards(tmp_path / "weights", **{"rewards.a1": 0.3, "rewards.a2": 0.5}) == [
      "0.800", "0.300"]
  plugins.parse_gin([], [f"import {user_rewards.__name__}", user_rewards.BINDING])
  assert _page_rewards(tmp_path / "gin") == ["2.000", "-1.000"]


def test_an_evaluation_says_what_it_evaluates_as_it_starts_and_its_result_as_it_ends(
    monkeypatch, tmp_path, capsys):
  from mgrpo_jax.evaluation import held_out, stage

  def evaluate_sources(config, mode, root, sources, *, greedy_only):
    del config, mode, root, sources
    assert greedy_only
    print("evaluating", flush=True)
    return held_out.EvalResult({"accuracy": 0.75, "accuracy_ci95": 0.125,
                                "num_questions": 40}, [], [])

  monkeypatch.setattr(held_out, "evaluate_sources", evaluate_sources)
  paths = _paths(tmp_path, "mgrpo-s0")
  config = _config(**{"eval.num_questions": 40, "eval.viewer_questions": 0})
  stage.run_evaluation(config, parse_mode("mgrpo"), paths, "step_5", {}, greedy_only=True, step=5)
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == ("eval step_5: evaluating the checkpoints of RL step 5 on up to 40 test "
                      "questions (greedy only)")
  assert lines[1] == "evaluating"
  assert lines[2].startswith("eval step_5: accuracy 0.750 +- 0.125 on 40 test questions (")
  assert lines[2].endswith(" s)") and len(lines) == 3
  assert stage._start_line(config, "final", 80, greedy_only=False).endswith(
      "on up to 40 test questions (2 samples each and greedy)")
  config.eval.samples = 1
  assert stage._start_line(config, "warm_start", None, greedy_only=False) == (
      "eval warm_start: evaluating the warm start on up to 40 test questions "
      "(1 sample each and greedy)")
  config.eval.samples = 2  # the first evaluation's settings
  stage.run_evaluation(config, parse_mode("mgrpo"), paths, "step_5", {}, greedy_only=True,
                       step=5)  # done: quiet
  assert capsys.readouterr().out == ""
  config.eval.split = "validation"  # both lines name the split evaluated
  stage.run_evaluation(config, parse_mode("mgrpo"), _paths(tmp_path, "val-s0"), "step_5", {},
                       greedy_only=True, step=5)
  lines = capsys.readouterr().out.splitlines()
  assert "on up to 40 validation questions" in lines[0]
  assert " on 40 validation questions (" in lines[2]
  config.eval.top_p = 0.9  # other settings: evaluated again
  stage.run_evaluation(config, parse_mode("mgrpo"), paths, "step_5", {}, greedy_only=True,
                       step=5)
  assert capsys.readouterr().out.splitlines()[0].startswith("eval step_5: evaluating")
