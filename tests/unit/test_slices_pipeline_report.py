"""The demo pipeline's pieces: short prompts, the held-out summary, the report, param checkpoints."""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import numpy as np
import pytest

from mgrpo_jax.agents import specs
from mgrpo_jax.agents.records import MainRecord, SubRecord, ToolCall, Trajectory
from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.evaluation.held_out import (
  Source,
  held_out_expert_judge,
  sub_expert_scores,
  summarize,
)
from mgrpo_jax.evaluation.stage import evaluated, evaluation_key
from mgrpo_jax.metrics import MetricsWriter
from mgrpo_jax.metrics.report import greedy_curve, summary_table, write_report
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.slices import pipeline
from mgrpo_jax.slices.pipeline import curve_steps
from mgrpo_jax.tasks import statements
from mgrpo_jax.tasks.questions import Question
from mgrpo_jax.tasks.renderings import NATURAL, SYMBOLIC
from mgrpo_jax.tasks.world_setup import WorldSetup
from mgrpo_jax.training import (
  MeshConfig,
  OptimizerConfig,
  create_mesh,
  create_train_state,
  make_optimizer,
)
from mgrpo_jax.training.checkpoint import restore_params, save_params
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.warm_start.stage import with_init_checkpoints


def _trajectory(final, format_ok=True, tools=()):
  return Trajectory(ids=np.zeros(3, np.int32), loss_mask=np.zeros(3, bool),
                    logprobs=np.zeros(3, np.float32), roles=np.zeros(3, np.int32),
                    messages=(), policy_version=0, format_ok=format_ok, error="", end="result",
                    num_turns=1, tool_calls=tuple(ToolCall(0, t, "{}", True, 0.0) for t in tools),
                    final=final, wall_s=0.0)


def _question(qid, qtype):
  return Question(id=qid, text=f"question {qid}", answer="a", path=(), type=qtype, hops=1,
                  meta={})


def test_short_system_prompts_name_every_tool_and_the_protocol():
  for role in ("main", "sub", "single"):
    full, short = specs.spec_for(role, "full"), specs.spec_for(role, "short")
    text = short.system_prompt()
    assert len(text) < len(full.system_prompt()) / 2
    for tool in full.tool_names:
      assert f"{tool}(" in text
    for tag in ("<thinking>", "<tool_call>", "<result>"):
      assert tag in text
    assert short.tools == full.tools and short.user_template == full.user_template
  with pytest.raises(ValueError, match="prompts.system"):
    specs.spec_for("main", "tiny")
  with pytest.raises(ValueError, match="unknown agent role"):
    specs.spec_for("critic")


def test_summary_accuracy_is_the_mean_over_questions_with_a_normal_interval():
  questions = {"q1": _question("q1", "lookup"), "q2": _question("q2", "puzzle"),
               "q3": _question("q3", "lookup")}
  correct = {("q1", 0): 1.0, ("q1", 1): 0.0, ("q2", 0): 1.0, ("q2", 1): 1.0,
             ("q3", 0): 0.0, ("q3", 1): 0.0}
  main = [MainRecord(q, k, "main", _trajectory("a", format_ok=(q != "q3"),
                                               tools=("delegate",) * (k + 1)),
                     num_sub_calls=k + 1, correct=c) for (q, k), c in correct.items()]
  sub = [SubRecord("q1", 0, 0, "t", "", "r", _trajectory("r", tools=("search", "visit")))]
  out = summarize(main, sub, questions)
  per_question = np.array([0.5, 1.0, 0.0])
  assert out["accuracy"] == pytest.approx(per_question.mean())
  assert out["accuracy_ci95"] == pytest.approx(1.96 * per_question.std(ddof=1) / math.sqrt(3))
  assert out["accuracy_by_type"] == {"lookup": 0.25, "puzzle": 1.0}
  assert out["format_rate"] == pytest.approx(4 / 6)
  assert out["sub_calls_mean"] == pytest.approx(1.5)
  assert out["tool_calls_mean"] == {"delegate": pytest.approx(9 / 6),
                                    "sub/search": pytest.approx(1 / 6),
                                    "sub/visit": pytest.approx(1 / 6)}
  assert out["num_questions"] == 3 and out["num_rollouts"] == 6


def test_copy_rates_compare_first_calls_with_the_clean_oracle():
  def record(qid, k, name, arguments):
    call = ToolCall(0, name, arguments, True, 0.0)
    return MainRecord(qid, k, "main", dataclasses.replace(_trajectory("a"), tool_calls=(call,)),
                      num_sub_calls=0, correct=0.0)

  questions = {"p": dataclasses.replace(_question("p", "puzzle"),
                                        text="What is 56 multiplied by 40, minus 17?"),
               "l": dataclasses.replace(_question("l", "lookup"),
                                        text="What is the medium of Kurrarzul Tide?")}
  main = [record("p", 0, "reason", '{"problem": "56 * 40 - 17"}'),
          record("p", 1, "reason", '{"problem": "56 * 40"}'),
          record("l", 0, "delegate", '{"subtask": "Find the medium of Kurrarzul Tide."}'),
          record("l", 1, "delegate", '{"subtask": "Find the medium of Kurrarzul"')]
  subtask = "Find the medium of Kurrarzul Tide."
  sub = [SubRecord("l", 0, 0, subtask, "", "r", dataclasses.replace(
             _trajectory("r"), tool_calls=(ToolCall(0, "search", json.dumps({"query": q}),
                                                    True, 0.0),)))
         for q in (subtask, "Kurrarzul Tide", subtask[:-1])]
  out = summarize(main, sub, questions)
  assert out["first_action_oracle_rate"] == pytest.approx(2 / 4)
  assert out["sub_query_copy_rate"] == pytest.approx(1 / 3)
  single = [dataclasses.replace(r, role="single") for r in main]
  assert "first_action_oracle_rate" not in summarize(single, [], questions)


def test_sub_expert_scores_are_means_over_s_calls_per_asked_property():
  def call(subtask, expert):
    return dataclasses.replace(SubRecord("q", 0, 0, subtask, "", "r", _trajectory("r")),
                               expert=expert)

  sub = [call("E001 boss", 1.0), call("E002 boss", 0.0), call("E002 maker", 0.5),
         call("E003 year", 1.0), call("E003", 0.0)]
  assert sub_expert_scores(sub, SYMBOLIC) == {
      "sub_expert_mean": pytest.approx(2.5 / 5),
      "sub_expert_by_property": {"boss": 0.5, "maker": 0.5, "other": 0.0, "year": 1.0}}
  natural = [call(statements.subtask_text("founded_by", "Xarolo Bent"), 1.0),
             call("Who founded Xarolo Bent?", 0.0)]
  assert sub_expert_scores(natural, NATURAL)["sub_expert_by_property"] == {
      "founded_by": 1.0, "other": 0.0}
  assert sub_expert_scores([], SYMBOLIC) == {}


def test_s_reports_are_judged_against_the_test_world():
  config = base_config()
  apply_overrides(config, {"world.render": "symbolic", "world.size": "tiny"})
  train_world, test_world = SYMBOLIC.split_worlds("tiny", int(config.world.seed),
                                                   int(config.world.test_seed))
  facts = [f for e in range(len(test_world)) for f in test_world.facts_of(e)
           if f.relation == "boss" and not train_world.holds(f)]
  fact = facts[0]  # true in the test world only
  task = _question("q", "lookup")
  judge = held_out_expert_judge(WorldSetup.from_config(config), str(config.eval.split))
  subtask, report = f"{fact.subject} boss", f"boss {fact.object}"
  assert judge(dataclasses.replace(task, path=(fact,)), subtask, report) == 1.0
  assert judge(task, subtask, report) == 0.5  # true, off the question's path
  assert SYMBOLIC.expert_judge(train_world)(task, subtask, report) == 0.0
  apply_overrides(config, {"world.source": "jsonl"})
  assert held_out_expert_judge(WorldSetup.from_config(config), str(config.eval.split)) is None


def test_report_writes_pngs_and_a_table_with_the_change(tmp_path):
  writer = MetricsWriter(tmp_path / "logs" / "main", tensorboard=False)
  for step, reward in enumerate((0.2, 0.5)):
    writer.write(step, {"main/reward_mean": reward, "main/correct_mean": reward})
  writer.close()
  before = {"accuracy": 0.25, "accuracy_ci95": 0.1, "format_rate": 0.5, "sub_calls_mean": 1.0,
            "tool_calls_mean": {"delegate": 1.0}, "accuracy_by_type": {"lookup": 0.25},
            "num_questions": 4, "num_rollouts": 8}
  after = dict(before, accuracy=0.75, tool_calls_mean={"delegate": 1.5, "reason": 0.5})
  report = write_report(tmp_path, tmp_path / "logs" / "main" / "metrics.jsonl",
                        tmp_path / "logs" / "sub" / "metrics.jsonl", before, after, title="t")
  lines = {line[:32].strip(): line[32:].split() for line in report.table.splitlines()}
  assert not report.table.splitlines()[-1].startswith("computed on")  # no records
  where = "computed on: cpu: Intel(R) Xeon(R) Processor x86_64 (avx2), 2 cores; jax 0.10.2"
  with_machine = write_report(tmp_path / "m", tmp_path / "logs" / "main" / "metrics.jsonl",
                              tmp_path / "logs" / "sub" / "metrics.jsonl", before, after,
                              title="t", machines=where)
  assert with_machine.table.splitlines()[-1] == where
  assert (tmp_path / "m" / "report" / "summary.txt").read_text().splitlines()[-1] == where
  assert lines["held-out accuracy"] == ["0.250", "0.750", "+0.500"]
  assert lines["reason calls per rollout"] == ["0.000", "0.500", "+0.500"]
  assert lines["95% half-width"] == ["0.100", "0.100"]
  assert "M first action = oracle's" not in lines  # summaries without copy diagnostics
  copying = {"first_action_oracle_rate": 0.25, "sub_query_copy_rate": 0.5}
  table = summary_table(dict(before, **copying), dict(after, **copying), "t")
  rows = {line[:32].strip(): line[32:].split() for line in table.splitlines()}
  assert rows["M first action = oracle's"] == ["0.250", "0.250", "+0.000"]
  assert rows["S query = its sub-task"] == ["0.500", "0.500", "+0.000"]
  assert "greedy accuracy" not in rows  # summaries without a greedy pass
  table = summary_table(dict(before, greedy={"accuracy": 0.5, "accuracy_ci95": 0.2,
                                             "accuracy_by_type": {"lookup": 0.5}}),
                        dict(after, greedy={"accuracy": 1.0, "accuracy_ci95": 0.0,
                                            "accuracy_by_type": {"lookup": 1.0}}), "t")
  rows = {line[:32].strip(): line[32:].split() for line in table.splitlines()}
  assert rows["greedy accuracy"] == ["0.500", "1.000", "+0.500"]
  assert rows["95% half-width (greedy)"] == ["0.200", "0.000"]
  assert rows["greedy accuracy: lookup"] == ["0.500", "1.000", "+0.500"]
  turns = {"turn_accuracy": {"main": {"all": 0.25}, "sub": {"all": 0.5, "report": 0.1}}}
  trained = {"turn_accuracy": {"main": {"all": 0.5}, "sub": {"all": 0.75, "report": 0.2}}}
  table = summary_table(dict(before, **turns), dict(after, **trained), "t")
  rows = {line[:32].strip(): line[32:].split() for line in table.splitlines()}
  assert rows["M turns right (forced)"] == ["0.250", "0.500", "+0.250"]
  assert rows["S turns right (forced)"] == ["0.500", "0.750", "+0.250"]
  assert "M demonstrated turns (forced)" not in rows  # summaries without the measurement
  imitated = {"demonstrated_turn_accuracy": {"main": {"all": 0.9}, "sub": {"all": 0.95}}}
  table = summary_table(dict(before, **turns, **imitated),
                        dict(after, **trained, **imitated, split="validation"), "t")
  rows = {line[:32].strip(): line[32:].split() for line in table.splitlines()}
  assert rows["S demonstrated turns (forced)"] == ["0.950", "0.950", "+0.000"]
  assert "S demonstrated turns (ceiling)" not in rows  # summaries without the ceiling
  bounded = {"demonstrated_turn_accuracy": {"main": {"all": 0.9, "ceiling": 0.96}}}
  rows = {line[:32].strip(): line[32:].split()
          for line in summary_table(dict(before, **turns, **bounded),
                                    dict(after, **trained, **bounded), "t").splitlines()}
  assert rows["M demonstrated turns (ceiling)"] == ["0.960", "0.960", "+0.000"]
  assert "validation questions of the training world" in table.splitlines()[-1]
  assert "unseen test world" in summary_table(before, after).splitlines()[-1]
  assert "nucleus" not in summary_table(before, dict(after, top_p=1.0))
  assert summary_table(before, dict(after, top_p=0.9)).splitlines()[-1].endswith(
      "each, sampled from the nucleus top_p 1 / 0.9)")
  assert summary_table(dict(before, temperature=1.5), dict(after, temperature=1.0, top_p=0.9)
                       ).splitlines()[-1].endswith(
      "each, sampled at temperature 1.5 / 1, sampled from the nucleus top_p 1 / 0.9)")
  assert "S report r_expert" not in rows  # summaries without S's scores
  scored = [dict(before, sub_expert_mean=0.5, greedy={"accuracy": 0.5, "sub_expert_mean": 0.6,
                                                      "sub_expert_by_property": {"boss": 0.4}}),
            dict(after, sub_expert_mean=0.75, greedy={"accuracy": 1.0, "sub_expert_mean": 0.9,
                                                      "sub_expert_by_property": {"boss": 0.8,
                                                                                 "year": 1.0}})]
  rows = {line[:32].strip(): line[32:].split() for line in summary_table(*scored).splitlines()}
  assert rows["S report r_expert"] == ["0.500", "0.750", "+0.250"]
  assert rows["S report r_expert (greedy)"] == ["0.600", "0.900", "+0.300"]
  assert rows["greedy S r_expert: boss"] == ["0.400", "0.800", "+0.400"]
  assert rows["greedy S r_expert: year"] == ["0.000", "1.000", "+1.000"]
  for path in report.files[:2]:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert report.files[2].read_text().strip() == report.table
  assert summary_table(None, None, "x") == "x: no evaluation"


def test_curve_steps_stop_before_the_last_step_and_are_none_without_eval_every():
  assert list(curve_steps(10, 40)) == [10, 20, 30]
  assert list(curve_steps(15, 60)) == [15, 30, 45]
  assert list(curve_steps(0, 40)) == []
  assert list(curve_steps(50, 40)) == []


def test_the_greedy_curve_runs_from_the_warm_start_through_the_checkpoints_to_the_end():
  def greedy(accuracy):
    return {"accuracy": 0.5, "greedy": {"accuracy": accuracy, "accuracy_ci95": accuracy / 10}}
  steps, values, half = greedy_curve(greedy(0.5), greedy(0.9), [(10, greedy(0.6)),
                                                                 (20, greedy(0.8))], 30)
  assert (steps, values) == ([0, 10, 20, 30], [0.5, 0.6, 0.8, 0.9])
  assert half == pytest.approx([0.05, 0.06, 0.08, 0.09])
  assert greedy_curve({"accuracy": 0.5}, None, (), 30) == ([], [], [])  # no greedy pass


def test_parameter_checkpoints_restore_bitwise_and_name_a_missing_folder(tmp_path):
  model = init_model(get_config("tiny", vocab_size=64, max_seq_len=32), seed=0)
  state, layout = create_train_state(model, make_optimizer(OptimizerConfig()),
                                     create_mesh(MeshConfig()), seed=0)
  save_params(tmp_path / "p", state.params, metadata={"note": 1})
  params, meta = restore_params(tmp_path / "p", layout.abstract.params)
  assert meta == {"note": 1}
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(state.params), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  with pytest.raises(FileNotFoundError, match="holds no parameter checkpoint"):
    restore_params(tmp_path / "empty", layout.abstract.params)


def test_init_checkpoints_follow_the_mode_and_keep_explicit_ones():
  assert parse_mode("mgrpo").agents == ("main", "sub")
  assert parse_mode("single_agent").agents == ("main",)
  config = base_config()
  config.sub.model.init_checkpoint = "mine"
  out = with_init_checkpoints(config, parse_mode("mgrpo"), {"main": "ws/main", "sub": "ws/sub"})
  assert (out.main.model.init_checkpoint, out.sub.model.init_checkpoint) == ("ws/main", "mine")
  assert config.main.model.init_checkpoint == ""  # the input is not changed
  shared = base_config()
  shared.experiment.mode = "shared_policy"
  out = with_init_checkpoints(shared, parse_mode("shared_policy"), {"main": "ws/main"})
  assert out.sub.model.init_checkpoint == "ws/main"
  with pytest.raises(ValueError, match="kind"):
    Source("d", "weights")
  assert dataclasses.astuple(Source("d", "params")) == ("d", "params", None)


def test_an_extended_run_evaluates_its_final_checkpoints_again(tmp_path):
  """The "final" summary holds its RL step: extending the run (num_steps 4 -> 6) makes
  it stale, so the evaluation child runs again; the curve's labels stay evaluated. A
  summary also holds its evaluation key: other evaluation settings evaluate again."""
  config = base_config()
  config.experiment.num_steps, config.eval.every = 4, 2
  mode = parse_mode("mgrpo")
  paths = RunPaths.from_config(config, str(tmp_path))
  spawned = []

  def spawn(config, workdir, slices, stage):  # the evaluation child's writes, by label
    spawned.append((slices, stage))
    (paths.local / "eval").mkdir(parents=True, exist_ok=True)
    key = evaluation_key(config, mode)
    for label, (step, _) in pipeline._evaluation_sources(config, mode, paths).items():
      if evaluated(paths, label, key, step) is None:
        (paths.local / "eval" / f"{label}.json").write_text(json.dumps(
            {"label": label, "step": step, "accuracy": step / 10, "evaluation_key": key}))

  def evaluate(labels):  # the parent's side, under the config's current key
    return pipeline._evaluate(config, evaluation_key(config, mode), str(tmp_path), spawn,
                              "eval_after", labels)

  labels = {"final": 4, "step_2": 2}
  first = evaluate(labels)
  assert spawned == [(("all",), "eval_after")] and first["final"]["accuracy"] == 0.4
  evaluate(labels)
  assert len(spawned) == 1  # everything evaluated: no child
  config.experiment.num_steps = 6
  extended = evaluate({"final": 6, "step_2": 2, "step_4": 4})
  assert len(spawned) == 2
  assert (extended["final"]["step"], extended["final"]["accuracy"]) == (6, 0.6)
  assert extended["step_4"]["step"] == 4
  key = evaluation_key(config, mode)
  assert evaluated(paths, "final", key, 4) is None and evaluated(paths, "final", key) is not None
  config.eval.top_p = 0.9  # another evaluation: every label evaluated again
  assert evaluated(paths, "final", evaluation_key(config, mode)) is None
  evaluate({"final": 6})
  assert len(spawned) == 3
  assert evaluated(paths, "final", evaluation_key(config, mode), 6)["accuracy"] == 0.6
  assert evaluated(paths, "final", key) is None  # replaced
  assert evaluated(paths, "warm_start", key) is None  # never written
