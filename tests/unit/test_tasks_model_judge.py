"""Model judges (`tasks/model_judge.py`) without running a model: prompt files, cache keys,
and items served from the cache, failures counted and scored by the configured policy.

The judge model is the real `SamplerJudgeModel` of a pretrained preset; it loads its
weights at its first uncached item, so these tests show that cached items never reach it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types

import pytest

from mgrpo_jax.config import base_config
from mgrpo_jax.tasks.judge_cache import JudgeCache
from mgrpo_jax.tasks.judges import AnswerItem, ReportItem
from mgrpo_jax.tasks.model_judge import (
  ANSWER_FIELDS,
  ANSWER_VERDICTS,
  EVIDENCE_CUT,
  EVIDENCE_OFF,
  EXPERT_FIELDS,
  EXPERT_VERDICTS,
  NO_EVIDENCE,
  PROMPTS,
  REPLY_MARKER,
  JudgePrompt,
  ModelAnswerJudge,
  ModelExpertJudge,
  ModelJudge,
  default_prompt,
  verdicts,
)
from mgrpo_jax.training.judge_model import JudgeSettings, SamplerJudgeModel

SETTINGS = JudgeSettings.from_config(base_config().rewards)  # smollm2_135m
TASK = types.SimpleNamespace(id="q0", text="Who founded Velora Trust?", answer="Amon Kesh")


def _judge(tmp_path, settings=SETTINGS, kind="answer", failure_score=0.0,
           verdict_format="final_line") -> ModelJudge:
  fields = ANSWER_FIELDS if kind == "answer" else EXPERT_FIELDS
  return ModelJudge(SamplerJudgeModel(settings),
                    JudgePrompt.load(default_prompt(kind, verdict_format), fields),
                    JudgeCache(tmp_path), verdicts(kind, verdict_format),
                    verdict_format=verdict_format, failure_score=failure_score)


@pytest.mark.parametrize("kind,fields", [("answer", ANSWER_FIELDS),
                                         ("expert", EXPERT_FIELDS)])
@pytest.mark.parametrize("verdict_format", ["final_line", "first_word"])
def test_the_packaged_prompts_have_their_placeholders_and_name_their_labels(
    kind, fields, verdict_format):
  prompt = JudgePrompt.load(default_prompt(kind, verdict_format), fields)
  filled = prompt.fill({f: f"<{f}>" for f in fields})
  assert all(f"<{f}>" in filled for f in fields) and "{" not in filled
  assert all(label in filled for label in verdicts(kind, verdict_format))


def test_each_grammar_has_its_prompts_and_labels():
  assert default_prompt("answer", "final_line") == PROMPTS / "answer.txt"
  assert default_prompt("expert", "first_word") == PROMPTS / "expert_first_word.txt"
  assert verdicts("answer", "first_word") == ANSWER_VERDICTS
  assert verdicts("expert", "final_line") == EXPERT_VERDICTS
  assert verdicts("expert", "first_word") == {"yes": 1.0, "partly": 0.5, "no": 0.0}


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


def test_a_prompt_file_may_end_with_the_start_of_the_judges_reply(tmp_path):
  path = tmp_path / "primed.txt"
  path.write_text("Q: {question} G: {gold_answer} C: {candidate} {{x}}\n"
                  f"{REPLY_MARKER}\nVerdict {{{{x}}}}:\n")
  prompt = JudgePrompt.load(path, ANSWER_FIELDS)
  values = {"question": "q", "gold_answer": "g", "candidate": "c"}
  assert prompt.fill(values) == "Q: q G: g C: c {x}\n"
  assert prompt.reply_prefix == "Verdict {x}:"
  assert prompt.transcript(values) == f"Q: q G: g C: c {{x}}\n{REPLY_MARKER}\nVerdict {{x}}:"
  assert JudgePrompt.load(PROMPTS / "answer.txt", ANSWER_FIELDS).reply_prefix == ""
  for kind, fields in (("answer", ANSWER_FIELDS), ("expert", EXPERT_FIELDS)):
    primed = JudgePrompt.load(default_prompt(kind, "first_word"), fields)
    assert primed.reply_prefix and REPLY_MARKER not in primed.fill(
        {f: f"<{f}>" for f in fields})


@pytest.mark.parametrize("text,problem", [
    (f"{{question}} {{gold_answer}}\n{REPLY_MARKER}\n{{candidate}}",
     rf"the reply's start after line 2 \({re.escape(REPLY_MARKER)}\) may not hold a "
     r"placeholder, found candidate"),
    (f"{{question}} {{gold_answer}} {{candidate}}\n{REPLY_MARKER}\nA\n {REPLY_MARKER}\n",
     rf"lines 2, 4 are {re.escape(REPLY_MARKER)}, expected at most one"),
])
def test_a_bad_reply_start_is_an_error_naming_the_file_and_line(tmp_path, text, problem):
  path = tmp_path / "mine.txt"
  path.write_text(text)
  with pytest.raises(ValueError, match=problem) as error:
    JudgePrompt.load(path, ANSWER_FIELDS)
  assert str(path) in str(error.value)


class _Echo:
  """A judge model that records what it is asked, and calls a candidate Amon Kesh
  correct (without a label otherwise)."""

  identity = {"name": "echo"}
  settings = {}
  batch_size = 2

  def __init__(self):
    self.asked = []

  def complete(self, prompts, reply_prefix=""):
    self.asked.append((list(prompts), reply_prefix))
    return ["Correct, it matches." if "Candidate answer: Amon" in p else "The end."
            for p in prompts]


def test_a_judge_sends_the_message_and_the_reply_start_and_caches_the_transcript(tmp_path):
  prompt = JudgePrompt.load(default_prompt("answer", "first_word"), ANSWER_FIELDS)
  model = _Echo()
  judge = ModelJudge(model, prompt, JudgeCache(tmp_path), ANSWER_VERDICTS,
                     verdict_format="first_word", failure_score=0.0)
  items = [{"question": TASK.text, "gold_answer": TASK.answer, "candidate": c}
           for c in ("Amon Kesh", "Velora", "Amon Kesh")]
  outcomes = judge.judge_fields(items)
  assert [(j.verdict, j.score) for j in outcomes] == [("correct", 1.0), (None, 0.0),
                                                      ("correct", 1.0)]
  assert model.asked == [([prompt.fill(items[1]), prompt.fill(items[0])],
                          prompt.reply_prefix)]  # shortest first, duplicates asked once
  key = judge.key(items[0])
  entry = json.loads(judge.cache.path(key).read_text())
  assert entry["prompt"] == prompt.transcript(items[0]) == (
      f"{prompt.fill(items[0])}{REPLY_MARKER}\n{prompt.reply_prefix}")
  assert entry["output"] == "Correct, it matches." and judge.counters.generated == 2


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
                      ANSWER_VERDICTS, verdict_format="final_line",
                      failure_score=0.0).key(fields))
  keys.add(ModelJudge(base.model, base.prompt, base.cache, ANSWER_VERDICTS,
                      verdict_format="first_word", failure_score=0.0).key(fields))
  for name in fields:
    keys.add(base.key({**fields, name: fields[name] + "!"}))
  assert len(keys) == 1 + 7 + 2 + len(fields)
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


def test_the_first_word_judge_reads_the_label_its_reply_starts_with(tmp_path):
  judge = ModelExpertJudge(_judge(tmp_path, kind="expert", verdict_format="first_word",
                                  failure_score=0.25), evidence_chars=100)
  core = judge.judge
  replies = {"a": "Yes, the report is supported.", "b": "**Partly**", "c": "no",
             "d": "1. Velora Trust (page 3)", "e": "VERDICT: 1"}
  items = []
  for report, reply in replies.items():
    fields = {"question": TASK.text, "subtask": "founder", "report": report,
              "evidence": NO_EVIDENCE}
    core.cache.put(core.key(fields), core.prompt.fill(fields), reply)
    items.append(ReportItem(TASK, "founder", report))
  outcomes = judge.judgements(items)
  assert [j.verdict for j in outcomes] == ["yes", "partly", "no", None, None]
  assert [j.score for j in outcomes] == [1.0, 0.5, 0.0, 0.25, 0.25]
  assert outcomes[3].problem == "first word '1.' is not one of no, partly, yes"
  assert judge.counters.failures == 2 and judge.counters.generated == 0


@pytest.mark.parametrize("limit,evidence,shown", [
    (5, "Velora Trust was founded by Amon Kesh.", "Velor" + EVIDENCE_CUT),
    (100, "Velora Trust was founded by Amon Kesh.", "Velora Trust was founded by Amon Kesh."),
    (5, "Velor", "Velor"),
    (5, "", NO_EVIDENCE),
    (0, "Velora Trust was founded by Amon Kesh.", EVIDENCE_OFF),
    (0, "", EVIDENCE_OFF),
])
def test_the_expert_judge_shows_the_evidence_cut_to_its_limit_or_none(tmp_path, limit,
                                                                      evidence, shown):
  judge = ModelExpertJudge(_judge(tmp_path, kind="expert"), evidence_chars=limit)
  assert judge.evidence(evidence) == shown


def test_the_expert_judge_reads_the_evidence_cut_to_its_limit(tmp_path):
  judge = ModelExpertJudge(_judge(tmp_path, kind="expert"), evidence_chars=5)
  core = judge.judge
  seen = []
  for evidence, shown in (("Velora Trust was founded by Amon Kesh.", "Velor" + EVIDENCE_CUT),
                          ("", NO_EVIDENCE)):
    fields = {"question": TASK.text, "subtask": "founder of Velora Trust",
              "report": "Amon Kesh", "evidence": shown}
    core.cache.put(core.key(fields), core.prompt.fill(fields), "VERDICT: 0.5")
    seen.append(ReportItem(TASK, "founder of Velora Trust", "Amon Kesh", evidence))
  assert judge.batch(seen) == [0.5, 0.5]
  assert judge(TASK, "founder of Velora Trust", "Amon Kesh") == 0.5  # no evidence
  assert judge.counters.generated == 0


def test_a_failure_score_outside_the_unit_interval_or_an_unknown_grammar_is_refused(
    tmp_path):
  with pytest.raises(ValueError, match="failure_score"):
    _judge(tmp_path, failure_score=1.5)
  with pytest.raises(ValueError, match="verdict_format must be one of final_line, "
                     "first_word, got 'last_word'"):
    ModelJudge(SamplerJudgeModel(SETTINGS), JudgePrompt.load(PROMPTS / "answer.txt",
                                                              ANSWER_FIELDS),
               JudgeCache(tmp_path), ANSWER_VERDICTS, verdict_format="last_word",
               failure_score=0.0)
