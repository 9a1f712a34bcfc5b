"""The strict verdict grammars of model judges (`tasks/verdicts.py`): `final_line`, a reply
parses iff it holds exactly one line mentioning VERDICT, its last non-blank line,
`VERDICT: <label>`; `first_word`, iff its first word, punctuation around it stripped and
lower-cased, is a label."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mgrpo_jax.tasks.verdicts import (
  PARSERS,
  VerdictError,
  format_verdict,
  parse_first_word,
  parse_verdict,
)

LABELS = ("correct", "incorrect")
EXPERT_LABELS = ("1", "0.5", "0")
WORD_LABELS = ("yes", "partly", "no")
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


# Replies of small models: a label in any case and dress, then anything; or other words.
_DRESS = st.sampled_from(["", "**", "\"", "'", "(", "*", "-"])
_ENDS = st.sampled_from(["", ".", ",", ":", "!", "**", "\"", ")", ".**"])
_LABEL_CASES = st.sampled_from(WORD_LABELS + LABELS).flatmap(
    lambda w: st.sampled_from([w, w.upper(), w.capitalize()]))
_WORDS = st.sampled_from(["The", "1.", "Correct/incorrect", "VERDICT:", "yes-no", "Yesterday",
                          "partial", "nope", "0.5", "", " ", "\n", "\t"])
_SMALL_REPLIES = (st.tuples(_DRESS, _LABEL_CASES | _WORDS, _ENDS,
                            st.sampled_from(["", " ", "\n\n", "\t"]),
                            st.text(max_size=40)).map("".join)
                  | st.text(max_size=40))


def _first_word(text: str) -> str | None:
  words = text.split()
  return words[0].strip(string.punctuation).lower() if words else None


@given(_SMALL_REPLIES, st.sampled_from([WORD_LABELS, LABELS, EXPERT_LABELS]))
@example("Correct\n\nThe correct answer is: 460", LABELS)
@example("1. Nibruthteth Portrait (page 347)", EXPERT_LABELS)
def test_a_first_word_label_is_the_replys_normalised_first_word_or_a_failure(text, labels):
  expected = _first_word(text)
  if expected in labels:
    assert parse_first_word(text, labels) == expected
  else:
    with pytest.raises(VerdictError):
      parse_first_word(text, labels)


@given(st.sampled_from(WORD_LABELS), _DRESS, _ENDS, st.sampled_from(["", " ", "\n", "\n \n"]),
       st.text(max_size=80))
def test_a_dressed_label_first_parses_whatever_follows(label, dress, end, gap, rest):
  for cased in (label, label.upper(), label.capitalize()):
    reply = f"{gap}{dress}{cased}{end} {rest}"
    assert parse_first_word(reply, WORD_LABELS) == label


@pytest.mark.parametrize("reply,labels,reason", [
    ("", LABELS, "empty reply"),
    (" \n\t", LABELS, "empty reply"),
    ("The answer is correct.", LABELS, "first word 'The' is not one of correct, incorrect"),
    ("Correct/incorrect", LABELS, "first word 'Correct/incorrect' is not one of"),
    ("VERDICT: correct", LABELS, "first word 'VERDICT:' is not one of"),
    ("1. Nibruthteth Portrait", WORD_LABELS, "first word '1.' is not one of no, partly, yes"),
])
def test_a_first_word_failure_says_why(reply, labels, reason):
  with pytest.raises(VerdictError, match=re.escape(reason)):
    parse_first_word(reply, labels)


def test_each_verdict_format_has_its_parser():
  assert PARSERS["final_line"]("ok\nVERDICT: 0.5", EXPERT_LABELS) == "0.5"
  assert PARSERS["first_word"]("Partly. It gives the year.", WORD_LABELS) == "partly"
  with pytest.raises(VerdictError):
    PARSERS["first_word"]("ok\nVERDICT: 0.5", EXPERT_LABELS)
