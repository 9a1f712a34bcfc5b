"""The reason tool: golden results, and fuzzing that it never raises, stays within its
work bound and evaluates only whitelisted node types."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from mgrpo_jax.tools import reason
from mgrpo_jax.tools.reason import ALLOWED_NODES, DEFAULT_LIMITS, evaluate

GOLDEN = [
  ("1901 - 1854", "47"),
  ("17*23 - 4", "387"),
  ("7 / 2", "3.5"),
  ("7 // 2", "3"),
  ("-7 % 3", "2"),
  ("2^10", "1024"),
  ("2 ** -2", "0.25"),
  ("412 > 389", "True"),
  ("3 <= 3 < 2", "False"),
  ("(1850 < 1900) + (1920 < 1900) + (1899 < 1900)", "2"),
  ("max(3**7, 2**11)", "2187"),
  ("min([4, 9, -1])", "-1"),
  ("sum(1, 2, 3.5)", "6.5"),
  ("abs(1854 - 1901)", "47"),
  ("round(2/3, 3)", "0.667"),
  ("sqrt(144)", "12"),
  ("days_between('2020-02-10', '2020-03-05')", "24"),
  ("days_between('2021-03-01', '2020-03-01')", "-365"),
  ("years_between('1927-12-18', '1935-10-03')", "7"),
  ("years_between('2000-02-29', '2001-02-28')", "0"),
  ("not 0 or 1 and 0", "True"),
  ("10 × 3 ÷ 4", "7.5"),
]

ESCAPES = [
  "().__class__", "().__class__.__bases__[0].__subclasses__()", "__import__('os')",
  "import os", "open('/etc/passwd')", "eval('1')", "exec('x=1')", "lambda: 1",
  "[x for x in range(10)]", "{x: 1 for x in 'ab'}", "(x := 1)", "9**9**9", "10**100",
  "2**65", "'a' * 10**9", "'" + "a" * 100 + "'", "(" * 200 + "1" + ")" * 200,
  "-" * 250 + "1", "+".join(["1"] * 140), "f'{1}'", "x", "print(1)", "abs.__call__(1)",
  "max(key=abs)", "1 if 1 else 2", "[1, 2]", "{1: 2}", "{1}", "b'x'", "1j", "...",
  "None", "globals()", "getattr(1, 'real')", "days_between('2020-13-01', '2020-01-01')",
  "1/0", "1 % 0", "0 ** -1", "(-8) ** 0.5", "1e308 * 10", "sqrt(-1)", "\x00",
  "1; 2", "yield 1", "await x", "*a", "a[0]", "'a' + 'b'", "'a' < 'b'",
  "round(1.5, 99)", "min()", "abs(1, 2)", "abs([-1, 5])", "abs((3,))", "9" * 400, "",
]


@pytest.mark.parametrize("problem,expected", GOLDEN)
def test_golden(problem, expected):
  result = reason.reason(problem)
  assert result.ok, result.text
  assert result.text == expected


@pytest.mark.parametrize("problem", ESCAPES)
def test_escape_payloads_are_error_observations(problem):
  result = evaluate(problem)
  assert result.error is not None, (problem, result.value)
  assert result.work <= DEFAULT_LIMITS.max_work
  assert result.visited <= ALLOWED_NODES
  tool_result = reason.reason(problem)
  assert not tool_result.ok and tool_result.text.startswith("error: reason: ")


def test_wrong_types_are_errors():
  for bad in (None, 3, b"1+1", ["1"], {"p": 1}):
    assert evaluate(bad).error is not None


_ATOMS = st.sampled_from(["1", "2", "0", "-3", "9", "99", "1e9", "0.5", "'2020-01-01'",
                          "'x'", "True", "().__class__", "__import__", "x", "[1, 2]",
                          "lambda: 0", "os.system", "max", "days_between", "'a'*9"])
_OPS = st.sampled_from([" + ", " - ", " * ", " / ", " // ", " % ", " ** ", "^", " < ",
                        " == ", " and ", " or ", ".", ", ", "(", ")", "[", "]", " if ",
                        " else ", ": ", " for x in "])


@st.composite
def _expressions(draw):
  parts = [draw(_ATOMS)]
  for _ in range(draw(st.integers(0, 12))):
    parts += [draw(_OPS), draw(_ATOMS)]
  text = "".join(parts)
  if draw(st.booleans()):
    fn = draw(st.sampled_from(["max", "min", "abs", "sum", "round", "sqrt",
                               "days_between", "years_between", "exec", "eval"]))
    text = f"{fn}({text})"
  return text


def _check(problem) -> None:
  result = evaluate(problem)  # must not raise
  assert result.work <= DEFAULT_LIMITS.max_work
  assert result.visited <= ALLOWED_NODES
  if result.error is None:
    value = result.value
    assert isinstance(value, (bool, int, float))
    if not isinstance(value, bool):
      assert abs(value) <= DEFAULT_LIMITS.max_abs


@settings(max_examples=2500)
@given(_expressions())
def test_fuzz_structured_expressions(problem):
  _check(problem)


@settings(max_examples=1500)
@given(st.text(max_size=400))
def test_fuzz_arbitrary_text(problem):
  _check(problem)


@settings(max_examples=300)
@given(st.integers(1, 60), st.integers(0, 5))
def test_fuzz_deep_nesting_and_towers(depth, kind):
  problem = [
    "(" * depth + "2" + ")" * depth,
    "-" * depth + "2",
    "**".join(["9"] * depth),
    "max(" * depth + "1" + ")" * depth,
    "+".join(["1"] * (depth * 3)),
    "not " * depth + "1",
  ][kind]
  _check(problem)


def test_work_is_linear_in_size():
  small = evaluate("+".join(["1"] * 10))
  large = evaluate("+".join(["1"] * 40))
  assert small.value == 10 and large.value == 40
  assert large.work > small.work and large.work <= DEFAULT_LIMITS.max_work
