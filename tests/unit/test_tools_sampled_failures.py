"""tools/sampled_failures.py: the first departure of hand-made rollouts from the symbolic
world's clean oracles, its category and the departing token's probability."""

from __future__ import annotations

import importlib.util
import math
import os
import pathlib
import sys

import numpy as np
import pytest

from mgrpo_jax.agents import protocol, records
from mgrpo_jax.agents.oracle_policy import render_oracle_action
from mgrpo_jax.tasks.oracle import Action, Step
from mgrpo_jax.tasks.questions import Question
from mgrpo_jax.tasks.symbolic.oracle import SymbolicMainOracle, SymbolicSubOracle

_PATH = pathlib.Path(__file__).resolve().parents[2] / "tools" / "sampled_failures.py"
_SPEC = importlib.util.spec_from_file_location("sampled_failures", _PATH)
sf = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = sf  # dataclasses look their module up
_SPEC.loader.exec_module(sf)

ORACLES = (SymbolicMainOracle(), SymbolicSubOracle())
PAGE_A = "E017\nowner E004\nboss E044\nyear 1950\nE090 boss\nsee E018"
PAGE_B = "E044\nhome E120\nyear 1931\nboss E017\nsee E002"
# The probability the hand-made policy gives the token where a turn departs.
LOW = 0.01


class CharTokenizer:
  """One id per character: the sampled ids of a turn are its characters."""

  vocab_size = 0x110000

  @staticmethod
  def token_to_id(token):
    raise KeyError(token)  # no Qwen3 thinking tokens: the protocol's own dialect

  @staticmethod
  def decode(ids):
    return "".join(chr(i) for i in ids)


TOKENIZERS = (CharTokenizer(), CharTokenizer())


def _turn(action: Action) -> str:
  return render_oracle_action(action)


def _trajectory(messages, *, end=records.END_RESULT, expected=()):
  """A trajectory of `messages` ((role, text) after the system prompt and task), each
  character one id; an assistant turn's characters have probability 0.99 up to where it
  leaves `expected` (the clean turns' texts, in order), that one LOW."""
  ids, mask, logprobs = [], [], []
  expected = list(expected)
  for role, text in (("system", "sys"), ("user", "task"), *messages):
    chars = [ord(c) for c in text]
    probs = np.full(len(chars), 0.99)
    if role == "assistant" and expected:
      want = expected.pop(0)
      if text != want:
        probs[min(len(os.path.commonprefix([text, want])), len(text) - 1)] = LOW
    ids += chars
    mask += [role == "assistant"] * len(chars)
    logprobs += list(np.log(probs) * (role == "assistant"))
  all_messages = (("system", "sys"), ("user", "task"), *messages)
  return records.Trajectory(
      ids=np.asarray(ids, np.int32), loss_mask=np.asarray(mask, bool),
      logprobs=np.asarray(logprobs, np.float32), roles=np.zeros(len(ids), np.int32),
      messages=tuple(all_messages), policy_version=0,
      format_ok=end == records.END_RESULT, error="" if end == records.END_RESULT else "x",
      end=end, num_turns=sum(r == "assistant" for r, _ in messages), tool_calls=(),
      final=None, wall_s=0.0)


def _observation(text):
  return ("user", protocol.render_observation(text))


def _sub(call_index, subtask, page, report, *, visit=None):
  """S's call: visit (the sub-task's entity unless `visit`), then `report`; the clean
  turns are the visit of the entity and the clean report."""
  entity = subtask.split()[0]
  clean = SymbolicSubOracle().next_action(subtask, [Step(Action.tool("visit", page=entity),
                                                         page)])
  messages = (("assistant", _turn(Action.tool("visit", page=visit or entity))),
              _observation(page), ("assistant", _turn(Action.report(report))))
  trajectory = _trajectory(messages, expected=(_turn(Action.tool("visit", page=entity)),
                                               _turn(clean)))
  return records.SubRecord("q", 0, call_index, subtask, "", report, trajectory)


def _question(text, qtype):
  return Question(id="q", text=text, answer="", path=(), type=qtype, hops=0, meta={})


def _main(messages, expected, end=records.END_RESULT):
  return records.MainRecord("q", 0, "main", _trajectory(messages, end=end, expected=expected),
                            num_sub_calls=0, correct=0.0)


def _two_hop(first_report, second_subtask, second_report):
  """M's rollout on "E017 boss year" with the given report, sub-task and answer."""
  return (("assistant", _turn(Action.delegate("E017 boss"))), _observation(first_report),
          ("assistant", _turn(Action.delegate(second_subtask))), _observation(second_report),
          ("assistant", _turn(Action.answer(second_report.split()[-1]))))


CLEAN_MAIN = (_turn(Action.delegate("E017 boss")), _turn(Action.delegate("E044 year")),
              _turn(Action.answer("1931")))


def test_s_misreport_on_the_first_hop_is_the_failure_not_the_later_hop():
  messages = _two_hop("boss E004", "E004 year", "year 1975")
  subs = [_sub(0, "E017 boss", PAGE_A, "boss E004"),
          _sub(1, "E004 year", "E004\nyear 1975", "year 1975")]
  expected = (CLEAN_MAIN[0], _turn(Action.delegate("E004 year")), _turn(Action.answer("1975")))
  failure = sf.classify(_main(messages, expected), subs, _question("E017 boss year", "two_hop"),
                        ORACLES, TOKENIZERS)
  assert (failure.category, failure.detail) == (sf.S_MISREPORT, "boss")
  assert failure.off_context is False  # E004 is on the page: a copy of another line
  assert failure.before_last_hop and failure.question_type == "two_hop"
  assert failure.probability == pytest.approx(LOW, rel=1e-4)


def test_s_misreport_of_a_value_off_the_page_on_the_last_hop():
  messages = _two_hop("boss E044", "E044 year", "year 1913")
  subs = [_sub(0, "E017 boss", PAGE_A, "boss E044"),
          _sub(1, "E044 year", PAGE_B, "year 1913")]
  failure = sf.classify(_main(messages, CLEAN_MAIN), subs,
                        _question("E017 boss year", "two_hop"), ORACLES, TOKENIZERS)
  assert (failure.category, failure.detail, failure.off_context) == (sf.S_MISREPORT, "year",
                                                                     True)
  assert not failure.before_last_hop


def test_m_miscopy_of_the_reported_entity():
  messages = _two_hop("boss E044", "E144 year", "year 1931")
  subs = [_sub(0, "E017 boss", PAGE_A, "boss E044"),
          _sub(1, "E144 year", "E144\nyear 1931", "year 1931")]
  failure = sf.classify(_main(messages, CLEAN_MAIN), subs,
                        _question("E017 boss year", "two_hop"), ORACLES, TOKENIZERS)
  assert (failure.category, failure.detail) == (sf.M_MISCOPY, "sub-task entity")
  assert failure.off_context  # E144: M read it nowhere
  assert failure.probability == pytest.approx(LOW, rel=1e-4)
  messages = _two_hop("boss E044", "E017 year", "year 1950")  # the question's entity
  subs = [subs[0], _sub(1, "E017 year", PAGE_A, "year 1950")]
  failure = sf.classify(_main(messages, CLEAN_MAIN), subs,
                        _question("E017 boss year", "two_hop"), ORACLES, TOKENIZERS)
  assert (failure.category, failure.detail, failure.off_context) == (
      sf.M_MISCOPY, "sub-task entity", False)


def test_s_wrong_page():
  messages = _two_hop("boss E090", "E090 year", "year 1931")
  subs = [_sub(0, "E017 boss", PAGE_A, "boss E090", visit="E018")]
  failure = sf.classify(_main(messages, CLEAN_MAIN), subs,
                        _question("E017 boss year", "two_hop"), ORACLES, TOKENIZERS)
  assert (failure.category, failure.detail) == (sf.S_WRONG_PAGE, "boss")


def test_m_tool_choice_and_malformed_turn():
  puzzle = _question("21 - 3", "puzzle")
  clean = (_turn(Action.tool("reason", problem="21 - 3")), _turn(Action.answer("18")))
  delegated = (("assistant", _turn(Action.delegate("21 - 3"))), _observation("none"),
               ("assistant", _turn(Action.answer("none"))))
  failure = sf.classify(_main(delegated, clean), [], puzzle, ORACLES, TOKENIZERS)
  assert (failure.category, failure.detail) == (sf.M_TOOL_CHOICE, "delegate for reason")
  assert failure.probability == pytest.approx(LOW, rel=1e-4)
  malformed = (("assistant", "<thinking>I will call reason.</thinking><tool_call>{\"na"),)
  failure = sf.classify(_main(malformed, clean, end=records.END_FORMAT), [], puzzle,
                        ORACLES, TOKENIZERS)
  assert (failure.category, failure.detail) == (sf.M_MALFORMED, "at reason")


def test_a_clean_rollout_has_no_departure():
  messages = _two_hop("boss E044", "E044 year", "year 1931")
  subs = [_sub(0, "E017 boss", PAGE_A, "boss E044"), _sub(1, "E044 year", PAGE_B, "year 1931")]
  failure = sf.classify(_main(messages, CLEAN_MAIN), subs,
                        _question("E017 boss year", "two_hop"), ORACLES, TOKENIZERS)
  assert failure.category == sf.NO_DEPARTURE and failure.probability is None


def test_failure_table_counts_shares_and_types():
  failures = [sf.Failure(sf.S_MISREPORT, "boss", 0.1, True, "two_hop", True),
              sf.Failure(sf.S_MISREPORT, "boss", 0.3, False, "three_hop", False),
              sf.Failure(sf.M_MISCOPY, "answer", None, False, "puzzle")]
  lines = sf.failure_table(failures, ["puzzle", "three_hop", "two_hop"])
  rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in lines[2:]}
  assert rows["M miscopy"][1:4] == ["1", "0.33", "1"]
  assert rows["S misreport"][1:8] == ["2", "0.67", "0", "1", "1", "1", "1"]
  assert rows["S misreport"][8] == "0.200 / 0.200 / 1.0e-01"
  assert rows["M miscopy"][7:9] == ["", ""]
  assert math.isclose(sum(float(r[2]) for r in rows.values()), 1.0)
