"""Model judges (`tasks/model_judge.py`) without running a model: prompt files, cache keys,
and items served from the cache, failures counted and scored by the configured policy.

The judge model is the real `SamplerJudgeModel` of a pretrained preset; it loads its
weights at its first uncached item, so these tests show that cached items never reach it.
"""

from __future__ import annotations

import dataclasses
import types

import pytest

from mgrpo_jax.config import base_config
from mgrpo_jax.tasks.judge_cache import JudgeCache
from mgrpo_jax.tasks.judges import AnswerItem, ReportItem
from mgrpo_jax.tasks.model_judge import (
  ANSWER_FIELDS,
  ANSWER_VERDICTS,
  EXPERT_FIELDS,
  EXPERT_VERDICTS,
  NO_EVIDENCE,
  PROMPTS,
  JudgePrompt,
  ModelAnswerJudge,
  ModelExpertJudge,
  ModelJudge,
)
from mgrpo_jax.training.judge_model import JudgeSettings, SamplerJudgeModel

SETTINGS = JudgeSettings.from_config(base_config().rewards)  # smollm2_135m
TASK = types.SimpleNamespace(id="q0", text="Who founded Velora Trust?", answer="Amon Kesh")


def _judge(tmp_path, settings=SETTINGS, prompt="answer", failure_score=0.0) -> ModelJudge:
  fields, verdicts = ((ANSWER_FIELDS, ANSWER_VERDICTS) if prompt == "answer"
                      else (EXPERT_FIELDS, EXPERT_VERDICTS))
  return ModelJudge(SamplerJudgeModel(settings), JudgePrompt.load(PROMPTS / f"{prompt}.txt",
                                                                   fields),
                    JudgeCache(tmp_path), verdicts, failure_score=failure_score)


@pytest.mark.parametrize("name,fields", [("answer", ANSWER_FIELDS),
                                         ("expert", EXPERT_FIELDS)])
def test_the_packaged_prompts_have_their_placeholders(name, fields):
  prompt = JudgePrompt.load(PROMPTS / f"{name}.txt", fields)
  filled = prompt.fill({f: f"<{f}>" for f in fields})
  assert all(f"<{f}>" in filled for f in fields) and "{" not in filled


@pytest.mark.parametrize("text,problem", [
    ("{question} {gold_answer}", "missing: candidate"),
    ("{question} {gold_answer} {candidate} {answer}", "unknown: answer"),
    ("{question} {gold_answer} {candidate} {", "a literal brace"),
])
def test_a_prompt_file_with_other_placeholders_is_an_error_naming_it(tmp_path, text, problem):
  path = tmp_path / "mine.txt"
  path.write_text(text)
  with pytest.raises(ValueError, match=problem) as error:
    JudgePrompt.load(path, ANSWER_FIELDS)
  assert str(path) in str(error.value)
  with pytest.raises(ValueError, match="no_such.txt"):
    JudgePrompt.load(tmp_path / "no_such.txt", ANSWER_FIELDS)


def test_the_key_changes_with_the_model_the_settings_the_prompt_and_every_field(tmp_path):
  fields = {"question": "q", "gold_answer": "g", "candidate": "c"}
  base = _judge(tmp_path)
  keys = {base.key(fields)}
  for settings in (dataclasses.replace(SETTINGS, preset="tiny", checkpoint="ckpt"),
                   dataclasses.replace(SETTINGS, chat_template="chatml"),
                   dataclasses.replace(SETTINGS, dtype="bfloat16"),
                   dataclasses.replace(SETTINGS, temperature=0.7),
                   dataclasses.replace(SETTINGS, top_p=0.9),
                   dataclasses.replace(SETTINGS, top_k=5),
                   dataclasses.replace(SETTINGS, max_new_tokens=65)):
    keys.add(_judge(tmp_path, settings).key(fields))
  other_prompt = tmp_path / "answer.txt"
  other_prompt.write_text((PROMPTS / "answer.txt").read_text() + "\nBe strict.\n")
  keys.add(ModelJudge(base.model, JudgePrompt.load(other_prompt, ANSWER_FIELDS), base.cache,
                      ANSWER_VERDICTS, failure_score=0.0).key(fields))
  for name in fields:
    keys.add(base.key({**fields, name: fields[name] + "!"}))
  assert len(keys) == 1 + 7 + 1 + len(fields)
  # what does not change the replies does not change the key
  for settings in (dataclasses.replace(SETTINGS, batch_size=3),
                   dataclasses.replace(SETTINGS, cache_dir="elsewhere"),
                   dataclasses.replace(SETTINGS, failure_score=0.5)):
    assert _judge(tmp_path, settings).key(fields) == base.key(fields)


def test_cached_items_are_served_without_the_model_and_failures_are_counted(tmp_path):
  judge = ModelAnswerJudge(_judge(tmp_path, failure_score=0.25))
  items = [AnswerItem(TASK, "Amon Kesh"), AnswerItem(TASK, "Velora"),
           AnswerItem(TASK, "Amon Kesh"), AnswerItem(TASK, "nobody")]
  replies = {"Amon Kesh": "Same person.\nVERDICT: correct", "Velora": "VERDICT: incorrect",
             "nobody": "I cannot tell."}
  core = judge.judge
  for candidate, reply in replies.items():
    fields = {"question": TASK.text, "gold_answer": TASK.answer, "candidate": candidate}
    core.cache.put(core.key(fields), core.prompt.fill(fields), reply)
  outcomes = judge.judgements(items)
  assert [j.verdict for j in outcomes] == ["correct", "incorrect", "correct", None]
  assert [j.score for j in outcomes] == [1.0, 0.0, 1.0, 0.25]
  assert outcomes[3].problem == "no VERDICT line" and all(j.cached for j in outcomes)
  assert judge.batch(items) == [1.0, 0.0, 1.0, 0.25] and judge(TASK, "Velora") == 0.0
  assert dataclasses.asdict(judge.counters) == {
      "items": 9, "cached": 9, "generated": 0, "verdicts": 7, "failures": 2}
  assert judge.counters.scalars("judge/answer")["judge/answer/failure_rate"] == 2 / 9
  assert core.model.completions == 0 and not core.model.loaded


def test_the_expert_judge_reads_the_evidence_cut_to_its_limit(tmp_path):
  judge = ModelExpertJudge(_judge(tmp_path, prompt="expert"), evidence_chars=5)
  core = judge.judge
  seen = []
  for evidence, shown in (("Velora Trust was founded by Amon Kesh.", "Velor"),
                          ("", NO_EVIDENCE)):
    fields = {"question": TASK.text, "subtask": "founder of Velora Trust",
              "report": "Amon Kesh", "evidence": shown}
    core.cache.put(core.key(fields), core.prompt.fill(fields), "VERDICT: 0.5")
    seen.append(ReportItem(TASK, "founder of Velora Trust", "Amon Kesh", evidence))
  assert judge.batch(seen) == [0.5, 0.5]
  assert judge(TASK, "founder of Velora Trust", "Amon Kesh") == 0.5  # no evidence
  assert judge.counters.generated == 0


def test_a_failure_score_outside_the_unit_interval_is_refused(tmp_path):
  with pytest.raises(ValueError, match="failure_score"):
    _judge(tmp_path, failure_score=1.5)
