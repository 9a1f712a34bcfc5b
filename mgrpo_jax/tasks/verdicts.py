"""The strict verdict grammars of model judges (`rewards.judge.verdict_format`).

`final_line`: a judge's reply ends with `VERDICT: <label>`. A reply parses to a label iff
  - exactly one of its lines mentions the word VERDICT (any case, anywhere in the line),
  - that line is its last non-blank line,
  - and that line, stripped of surrounding whitespace, is `VERDICT:`, optional spaces or
    tabs, and one of the judge's labels, exactly (e.g. `VERDICT: correct`, `VERDICT: 0.5`).
Anything else (no verdict, two verdicts, a verdict followed by more text, an unknown or
decorated label such as `**VERDICT: correct**` or `VERDICT: Correct.`) is a judge
failure (`VerdictError`, with the reason): the caller counts it and scores it with its
configured failure score, never a guess.

`first_word`, for small models that answer first and explain after (or never end with a
verdict line): the reply's first word, after leading whitespace, up to the next
whitespace, with the punctuation around it stripped and lower-cased, must be one of the
judge's labels (`Correct.`, `**correct**` and `"Correct"\n\nThe answer is...` give
`correct`; `0.5,` gives `0.5`). What follows it is not read. Anything else (an empty
reply, another first word such as `The` or `Correct/incorrect`) is a judge failure.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Collection

KEYWORD = "VERDICT"
_LINE = re.compile(KEYWORD + r":[ \t]*(\S+)")
FINAL_LINE, FIRST_WORD = "final_line", "first_word"


class VerdictError(ValueError):
  """A judge's reply holds no single well-formed final verdict line (the message says why)."""


def format_verdict(label: str) -> str:
  """The verdict line of `label`: `VERDICT: <label>`."""
  return f"{KEYWORD}: {label}"


def parse_verdict(text: str, labels: Collection[str]) -> str:
  """The label of `text`'s final verdict line (module docstring).

  Raises:
    VerdictError: naming what is wrong with `text`.
  """
  lines = text.splitlines()
  mentions = [i for i, line in enumerate(lines) if KEYWORD in line.upper()]
  if not mentions:
    raise VerdictError(f"no {KEYWORD} line")
  if len(mentions) > 1:
    raise VerdictError(f"{len(mentions)} lines mention {KEYWORD}, expected exactly one")
  last = max(i for i, line in enumerate(lines) if line.strip())
  if mentions[0] != last:
    raise VerdictError(f"the {KEYWORD} line is followed by more text")
  match = _LINE.fullmatch(lines[last].strip())
  if match is None:
    raise VerdictError(f"malformed {KEYWORD} line {lines[last].strip()[:80]!r}, expected "
                       f"'{KEYWORD}: <label>'")
  if match[1] not in labels:
    raise VerdictError(f"label {match[1][:40]!r} is not one of {', '.join(sorted(labels))}")
  return match[1]


def parse_first_word(text: str, labels: Collection[str]) -> str:
  """The label that `text`'s first word is (module docstring, `first_word`).

  Raises:
    VerdictError: naming the first word, or saying the reply is empty.
  """
  words = text.split(maxsplit=1)
  if not words:
    raise VerdictError("empty reply, expected a label as its first word")
  word = words[0].strip(string.punctuation).lower()
  if word not in labels:
    raise VerdictError(f"first word {words[0][:40]!r} is not one of "
                       f"{', '.join(sorted(labels))}")
  return word


# The grammar of each `rewards.judge.verdict_format`: (reply, labels) -> label.
PARSERS: dict[str, Callable[[str, Collection[str]], str]] = {
    FINAL_LINE: parse_verdict, FIRST_WORD: parse_first_word}
