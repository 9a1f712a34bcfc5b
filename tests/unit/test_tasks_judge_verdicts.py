"""The strict verdict grammar of model judges (`tasks/verdicts.py`): a reply parses iff it
holds exactly one line mentioning VERDICT, its last non-blank line, `VERDICT: <label>`."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mgrpo_jax.tasks.verdicts import VerdictError, format_verdict, parse_verdict

LABELS = ("correct", "incorrect")
EXPERT_LABELS = ("1", "0.5", "0")
WELL_FORMED = re.compile(r"VERDICT:[ \t]*(\S+)")

# Text built from pieces a judge's reply is made of, verdict-like ones included.
_PIECES = st.sampled_from([
    "VERDICT: correct", "VERDICT: incorrect", "VERDICT:correct", "verdict: correct",
    "VERDICT: Correct", "**VERDICT: correct**", "VERDICT: maybe", "VERDICT:", "Verdict",
    "The answer matches.", "correct", "incorrect", " ", "\t", "\n", "\n\n", "0.5",
    "VERDICT: 0.5", "no verdict here", "x"])
_TEXTS = st.lists(_PIECES, max_size=8).map("".join) | st.text(max_size=60)


def _well_formed_lines(text: str, labels) -> list[str]:
  return [m[1] for line in text.splitlines()
          if (m := WELL_FORMED.fullmatch(line.strip())) and m[1] in labels]


@given(_TEXTS)
def test_a_reply_without_exactly_one_well_formed_verdict_is_a_failure(text):
  if len(_well_formed_lines(text, LABELS)) != 1:
    with pytest.raises(VerdictError):
      parse_verdict(text, LABELS)


@given(_TEXTS)
@example("VERDICT: correct\nmore")
@example("VERDICT: incorrect\n\n")
def test_a_parsed_label_is_the_one_well_formed_final_verdict(text):
  try:
    label = parse_verdict(text, LABELS)
  except VerdictError:
    return
  assert _well_formed_lines(text, LABELS) == [label]
  assert text.rstrip().splitlines()[-1].strip() == format_verdict(label)
  assert sum("VERDICT" in line.upper() for line in text.splitlines()) == 1


@given(st.text(max_size=200).filter(lambda t: "VERDICT" not in t.upper()),
       st.sampled_from(EXPERT_LABELS), st.sampled_from(["", "\n", "  \n\t"]))
def test_well_formed_verdicts_round_trip(reasoning, label, trailing):
  reply = f"{reasoning}\n{format_verdict(label)}{trailing}"
  assert parse_verdict(reply, EXPERT_LABELS) == label


@pytest.mark.parametrize("reply,reason", [
    ("The answer is right.", "no VERDICT line"),
    ("VERDICT: correct\nVERDICT: correct", "2 lines mention VERDICT"),
    ("My verdict: yes\nVERDICT: correct", "2 lines mention VERDICT"),
    ("VERDICT: correct\nbecause it matches", "followed by more text"),
    ("**VERDICT: correct**", "malformed VERDICT line"),
    ("VERDICT: Correct", "label 'Correct' is not one of correct, incorrect"),
    ("VERDICT: correct.", "label 'correct.' is not one of"),
])
def test_a_failure_says_why(reply, reason):
  with pytest.raises(VerdictError, match=re.escape(reason)):
    parse_verdict(reply, LABELS)
