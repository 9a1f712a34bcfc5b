"""A user's own questions file (`world.source`) reaches the trainer's question list;
bad files and settings give errors naming the file and line, or the key."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from mgrpo_jax import plugins
from mgrpo_jax.config import ConfigError, apply_overrides, base_config, validate
from mgrpo_jax.tasks.loaders import BenchmarkFileError
from mgrpo_jax.tasks.world_data import load_questions
from mgrpo_jax.tasks.world_setup import WorldSetup

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs" / "examples" / "my_questions.jsonl"
EXAMPLE_FIELDS = "id=qid,question=prompt,answer=gold,level=level"


def _world(**overrides):
  """The world settings of `overrides`; a user's questions have no gold path, so R_S
  drops the gold-path expert term (the rule of test_user_questions_need_another_expert_judge)."""
  config = base_config()
  apply_overrides(config, {"rewards.b3": 0.0, **{f"world.{k}": v for k, v in overrides.items()}})
  validate(config)
  return WorldSetup.from_config(config)


def test_jsonl_questions_reach_the_trainer(tmp_path):
  """`load_questions` (what the main trainer and the evaluation call) returns the file's
  questions in order, for the training and the held-out split, without building the
  generated world's datasets (the world path is not read)."""
  world = _world(source="jsonl", source_path=str(EXAMPLE), source_fields=EXAMPLE_FIELDS)
  for split in ("train", "test"):
    questions = load_questions(tmp_path / "unbuilt", world, "stage2", split=split)
    assert [q.id for q in questions] == ["q1", "q2", "q3"]
  first = questions[0]
  assert first.answer == "Marrow" and first.text.startswith("Which city")
  assert (first.path, first.type, first.hops) == ((), "user", 0)
  assert first.meta == {"level": "2", "file_name": ""}
  assert questions[2].meta["level"] == ""


def test_held_out_file_and_default_fields(tmp_path):
  train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
  train.write_text(json.dumps({"id": "a", "question": "Q?", "answer": "1"}) + "\n\n")
  test.write_text(json.dumps({"id": "b", "question": "R?", "answer": "2", "source": "x"}))
  world = _world(source="jsonl", source_path=str(train), test_source_path=str(test))
  assert [q.id for q in load_questions(tmp_path, world, "stage2")] == ["a"]
  (held_out,) = load_questions(tmp_path, world, "stage2", split="test")
  assert (held_out.id, held_out.meta["source"]) == ("b", "x")


def test_csv_questions(tmp_path):
  path = tmp_path / "q.csv"
  path.write_text("qid,prompt,gold\nc1,\"Who, exactly?\",Ada\n")
  world = _world(source="csv", source_path=str(path), source_fields="id=qid,question=prompt,"
                 "answer=gold")
  (question,) = load_questions(tmp_path, world, "stage2")
  assert (question.id, question.text, question.answer) == ("c1", "Who, exactly?", "Ada")


def test_malformed_line_names_the_file_and_line(tmp_path):
  path = tmp_path / "q.jsonl"
  path.write_text('{"id": "a", "question": "Q?", "answer": "1"}\n'
                  '{"id": "b", "question": "R?", "answer": \n')
  world = _world(source="jsonl", source_path=str(path))
  with pytest.raises(BenchmarkFileError, match=rf"{path}:2: malformed JSON"):
    load_questions(tmp_path, world, "stage2")
  path.write_text('{"id": "a", "question": "Q?", "answer": "1"}\n'
                  '{"id": "b", "question": "R?"}\n')
  with pytest.raises(BenchmarkFileError, match=rf"{path}:2: missing field 'answer'"):
    load_questions(tmp_path, world, "stage2")


def test_repeated_id_and_bad_settings_are_named(tmp_path):
  path = tmp_path / "q.jsonl"
  path.write_text('{"id": "a", "question": "Q?", "answer": "1"}\n' * 2)
  with pytest.raises(BenchmarkFileError, match="question 2 repeats the id 'a'"):
    load_questions(tmp_path, _world(source="jsonl", source_path=str(path)), "stage2")
  with pytest.raises(ValueError, match="world.source_path"):
    load_questions(tmp_path, _world(source="jsonl"), "stage2")
  with pytest.raises(ValueError, match="world.source_fields: 'question' is not of the form"):
    load_questions(tmp_path, _world(source="jsonl", source_path=str(path),
                                    source_fields="id=a,question"), "stage2")
  with pytest.raises(ValueError, match="world.source_fields: .*missing \\['answer'\\]"):
    load_questions(tmp_path, _world(source="jsonl", source_path=str(path),
                                    source_fields="id=a,question=b"), "stage2")


@pytest.mark.usefixtures("clean_gin")
def test_example_gin_file_binds_the_users_reward(monkeypatch):
  """The documented example: configs/examples/my_questions.gin replaces R_M."""
  monkeypatch.syspath_prepend(str(ROOT))
  plugins.parse_gin([str(ROOT / "configs" / "examples" / "my_questions.gin")], [])
  reward = plugins.main_reward_fn()(np.array([True, True, False]),
                                    np.array([True, False, False]), a1=0.1, a2=0.9)
  np.testing.assert_allclose(reward, [1.2, 0.2, 0.0])


def test_gaia_questions_with_files_are_left_out_and_counted(tmp_path, caplog):
  path = tmp_path / "metadata.jsonl"
  rows = [{"task_id": f"g{i}", "Question": f"Q{i}?", "Final answer": str(i), "Level": 1,
           "file_name": "sheet.xlsx" if i % 2 else ""} for i in range(4)]
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  world = _world(source="gaia", source_path=str(tmp_path))
  with caplog.at_level("WARNING"):
    questions = load_questions(tmp_path, world, "stage2")
  assert [q.id for q in questions] == ["g0", "g2"]
  assert f"{tmp_path}: 2 of 4 GAIA questions skipped: they need an attached file (g1, g3)" in (
    caplog.text)
  path.write_text("".join(json.dumps(r) + "\n" for r in rows[1::2]))
  with pytest.raises(BenchmarkFileError, match=r"no questions without an attached file "
                     r"\(2 have one\)"):
    load_questions(tmp_path, world, "stage2")


def test_webwalker_questions_carry_their_root_url(tmp_path):
  path = tmp_path / "webwalker.json"
  path.write_text(json.dumps([{"Question": "Who chairs it?", "Answer": "Ada",
                               "Root_Url": "https://c.example/", "Info": {"Hop": "single"}}]))
  (question,) = load_questions(tmp_path, _world(source="webwalker", source_path=str(path)),
                               "stage2")
  assert (question.id, question.answer, question.path) == ("webwalker-1", "Ada", ())
  assert question.text.endswith("Start from the website https://c.example/")
  assert question.meta["root_url"] == "https://c.example/"


@pytest.mark.parametrize("source", ["jsonl", "csv", "gaia", "webwalker"])
def test_user_questions_need_another_expert_judge(source):
  """No gold path: the gold-path expert judge with b3 > 0 is refused naming both keys;
  the model judge, b3 = 0 or the single agent (no reports) are accepted."""
  config = base_config()
  apply_overrides(config, {"world.source": source, "world.source_path": "q.jsonl"})
  with pytest.raises(ConfigError, match=r"'rewards.expert_judge': world.source="
                     rf"'{source}' questions have no gold path"):
    validate(config)
  for fix in ({"rewards.expert_judge": "model"}, {"rewards.b3": 0.0},
              {"experiment.mode": "single_agent"}):
    fixed = base_config()
    apply_overrides(fixed, {"world.source": source, "world.source_path": "q.jsonl", **fix})
    validate(fixed)
  apply_overrides(config, {"world.source": "generated"})
  validate(config)
