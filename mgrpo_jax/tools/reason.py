"""M's `reason(problem)` tool: a bounded evaluator for arithmetic, comparisons and dates.

The problem is a Python-syntax expression, e.g. `1901 - 1854`, `412 > 389`,
`days_between('2020-02-10', '2020-03-05')`, `max(3**7, 2**11)`. It is parsed with
`ast.parse(mode="eval")` and evaluated by walking the tree here; nothing is ever
compiled or executed. Before evaluation every node is checked against a whitelist
(`ALLOWED_NODES`), names may only appear as the callee of a whitelisted function, and
the size is bounded (characters, nodes, depth, string length). During evaluation every
intermediate number is bounded in magnitude, powers are checked before they are
computed, and a work counter (one unit per node evaluated plus one per function
argument) is returned with the result; `work <= Limits.max_work` always holds.

Accepted sugar: `^` means power, `×` and `÷` mean `*` and `/`, `−` is a minus sign.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import math
import operator
import re
import warnings
from collections.abc import Callable
from typing import Any

from mgrpo_jax.tools.base import Tool, ToolResult

ALLOWED_NODES: frozenset[str] = frozenset({
  "Expression", "BinOp", "UnaryOp", "Compare", "BoolOp", "Constant", "Call", "Name",
  "List", "Tuple", "Load",
  "Add", "Sub", "Mult", "Div", "FloorDiv", "Mod", "Pow", "USub", "UAdd", "Not",
  "Lt", "LtE", "Gt", "GtE", "Eq", "NotEq", "And", "Or",
})
_BIN_OPS: dict[type, Callable[[Any, Any], Any]] = {
  ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
  ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_COMPARE_OPS: dict[type, Callable[[Any, Any], bool]] = {
  ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
  ast.Eq: operator.eq, ast.NotEq: operator.ne,
}
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SUGAR = (("^", "**"), ("×", "*"), ("÷", "/"), ("−", "-"))


@dataclasses.dataclass(frozen=True)
class Limits:
  """Bounds on one evaluation. `max_work` >= 2 * `max_nodes` keeps the bound sound."""
  max_chars: int = 300
  max_nodes: int = 150
  max_depth: int = 64
  max_abs: float = 1e18
  max_exponent: int = 64
  max_str: int = 32
  max_args: int = 32
  max_work: int = 400


DEFAULT_LIMITS = Limits()


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """Outcome: `value` when `error` is None; `work` units spent; node types evaluated."""
  value: Any
  error: str | None
  work: int
  visited: frozenset[str]


class ReasonError(Exception):
  """A rejected expression (message shown to the agent)."""


def _date(value: Any) -> datetime.date:
  if not isinstance(value, str) or not _DATE.fullmatch(value):
    raise ReasonError(f"expected a date 'YYYY-MM-DD', got {value!r}")
  try:
    return datetime.date.fromisoformat(value)
  except ValueError as exc:
    raise ReasonError(f"invalid date {value!r}: {exc}") from None


def _days_between(a: Any, b: Any) -> int:
  return (_date(b) - _date(a)).days


def _years_between(a: Any, b: Any) -> int:
  """Whole years from date a to date b (negative if b is earlier)."""
  d1, d2 = _date(a), _date(b)
  sign = 1
  if d2 < d1:
    d1, d2, sign = d2, d1, -1
  years = d2.year - d1.year - ((d2.month, d2.day) < (d1.month, d1.day))
  return sign * years


def _numbers(args: tuple[Any, ...], name: str) -> list[Any]:
  values = list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)
  if not values:
    raise ReasonError(f"{name}() needs at least one number")
  for v in values:
    if not _is_number(v):
      raise ReasonError(f"{name}() takes numbers, got {type(v).__name__}")
  return values


def _number(x: Any, name: str) -> Any:
  """`x` itself if it is one number (never a list): functions of exactly one number."""
  if not _is_number(x):
    raise ReasonError(f"{name}() takes one number, got {type(x).__name__}")
  return x


def _round(x: Any, ndigits: Any = 0) -> Any:
  if not _is_number(x) or not isinstance(ndigits, int) or not 0 <= ndigits <= 12:
    raise ReasonError("round(x, ndigits) needs a number and 0 <= ndigits <= 12")
  out = round(x, ndigits)
  return int(out) if ndigits == 0 else out


def _sqrt(x: Any) -> float:
  if not _is_number(x) or x < 0:
    raise ReasonError("sqrt() needs a non-negative number")
  return math.sqrt(x)


FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int]] = {  # name: (fn, min, max args)
  "abs": (lambda x: abs(_number(x, "abs")), 1, 1),
  "min": (lambda *a: min(_numbers(a, "min")), 1, 32),
  "max": (lambda *a: max(_numbers(a, "max")), 1, 32),
  "sum": (lambda *a: sum(_numbers(a, "sum")), 1, 32),
  "round": (_round, 1, 2),
  "sqrt": (_sqrt, 1, 1),
  "days_between": (_days_between, 2, 2),
  "years_between": (_years_between, 2, 2),
}


def _is_number(v: Any) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, str)


def _check_tree(tree: ast.AST, limits: Limits) -> None:
  """Whitelist, size and depth checks without recursion (raises ReasonError)."""
  stack: list[tuple[ast.AST, int, ast.AST | None]] = [(tree, 1, None)]
  nodes = 0
  while stack:
    node, depth, parent = stack.pop()
    nodes += 1
    kind = type(node).__name__
    if nodes > limits.max_nodes:
      raise ReasonError(f"expression has more than {limits.max_nodes} nodes")
    if depth > limits.max_depth:
      raise ReasonError(f"expression is nested deeper than {limits.max_depth}")
    if kind not in ALLOWED_NODES:
      raise ReasonError(f"{kind} is not allowed")
    if isinstance(node, ast.Name):
      if not (isinstance(parent, ast.Call) and parent.func is node) or node.id not in FUNCTIONS:
        raise ReasonError(f"unknown name {node.id!r}; functions: {', '.join(FUNCTIONS)}")
    elif isinstance(node, ast.Call):
      if node.keywords:
        raise ReasonError("keyword arguments are not allowed")
      if not isinstance(node.func, ast.Name):
        raise ReasonError("only the listed functions can be called")
    elif isinstance(node, (ast.List, ast.Tuple)):
      if not isinstance(parent, ast.Call) or len(node.elts) > limits.max_args:
        raise ReasonError("lists are only allowed as function arguments (at most "
                          f"{limits.max_args} items)")
    elif isinstance(node, ast.Constant):
      value = node.value
      if isinstance(value, str):
        if len(value) > limits.max_str:
          raise ReasonError(f"string longer than {limits.max_str} characters")
      elif not _is_number(value) or isinstance(value, complex):
        raise ReasonError(f"constant {type(value).__name__} is not allowed")
      elif abs(value) > limits.max_abs:
        raise ReasonError(f"number larger than {limits.max_abs:g}")
    for child in ast.iter_child_nodes(node):
      stack.append((child, depth + 1, node))


class _Evaluator:
  """Walks a checked tree; counts work and visited node types."""

  def __init__(self, limits: Limits):
    self.limits = limits
    self.work = 0
    self.visited: set[str] = set()

  def _bounded(self, value: Any) -> Any:
    if isinstance(value, bool) or not _is_number(value):
      return value
    if isinstance(value, float) and not math.isfinite(value):
      raise ReasonError("result is not a finite number")
    if abs(value) > self.limits.max_abs:
      raise ReasonError(f"intermediate result larger than {self.limits.max_abs:g}")
    return value

  def _operand(self, value: Any) -> Any:
    if not _is_number(value):
      raise ReasonError(f"arithmetic needs numbers, got {type(value).__name__}")
    return value

  def _power(self, base: Any, exponent: Any) -> Any:
    if abs(exponent) > self.limits.max_exponent:
      raise ReasonError(f"exponent larger than {self.limits.max_exponent}")
    if base == 0 and exponent < 0:
      raise ReasonError("zero to a negative power")
    if base < 0 and not float(exponent).is_integer():
      raise ReasonError("negative base with a fractional exponent")
    if abs(base) > 1 and exponent * math.log10(abs(base)) > math.log10(self.limits.max_abs):
      raise ReasonError(f"power larger than {self.limits.max_abs:g}")
    return base ** exponent

  def eval(self, node: ast.AST) -> Any:
    self.work += 1
    if self.work > self.limits.max_work:
      raise ReasonError("work limit exceeded")
    self.visited.add(type(node).__name__)
    if isinstance(node, ast.Expression):
      return self.eval(node.body)
    if isinstance(node, ast.Constant):
      return node.value
    if isinstance(node, ast.UnaryOp):
      value = self.eval(node.operand)
      self.visited.add(type(node.op).__name__)
      if isinstance(node.op, ast.Not):
        return not value
      value = self._operand(value)
      return self._bounded(-value if isinstance(node.op, ast.USub) else +value)
    if isinstance(node, ast.BinOp):
      left = self._operand(self.eval(node.left))
      right = self._operand(self.eval(node.right))
      self.visited.add(type(node.op).__name__)
      if isinstance(node.op, ast.Pow):
        return self._bounded(self._power(left, right))
      if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
        raise ReasonError("division by zero")
      return self._bounded(_BIN_OPS[type(node.op)](left, right))
    if isinstance(node, ast.Compare):
      values = [self.eval(node.left)] + [self.eval(c) for c in node.comparators]
      for v in values:
        self._operand(v)
      result = True
      for op, a, b in zip(node.ops, values, values[1:], strict=False):
        self.visited.add(type(op).__name__)
        result = result and _COMPARE_OPS[type(op)](a, b)
      return result
    if isinstance(node, ast.BoolOp):
      self.visited.add(type(node.op).__name__)
      values = [bool(self.eval(v)) for v in node.values]
      return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, (ast.List, ast.Tuple)):
      return [self.eval(e) for e in node.elts]
    if isinstance(node, ast.Call):
      return self._call(node)
    raise ReasonError(f"{type(node).__name__} is not allowed")  # unreachable after checks

  def _call(self, node: ast.Call) -> Any:
    name = node.func.id
    self.visited.add("Name")
    fn, low, high = FUNCTIONS[name]
    if not low <= len(node.args) <= high:
      raise ReasonError(f"{name}() takes {low}..{high} arguments, got {len(node.args)}")
    args = tuple(self.eval(a) for a in node.args)
    self.work += sum(len(a) if isinstance(a, list) else 1 for a in args)
    if self.work > self.limits.max_work:
      raise ReasonError("work limit exceeded")
    return self._bounded(fn(*args))


def evaluate(problem: Any, limits: Limits = DEFAULT_LIMITS) -> Evaluation:
  """Evaluates `problem`; never raises. See the module docstring for the language."""
  evaluator = _Evaluator(limits)
  try:
    if not isinstance(problem, str):
      raise ReasonError(f"problem must be a string, got {type(problem).__name__}")
    source = problem.strip()
    if not source:
      raise ReasonError("empty problem")
    if len(source) > limits.max_chars:
      raise ReasonError(f"problem has {len(source)} characters (limit {limits.max_chars})")
    for old, new in _SUGAR:
      source = source.replace(old, new)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      try:
        tree = ast.parse(source, mode="eval")
      except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise ReasonError(f"malformed expression: {type(exc).__name__}") from None
    _check_tree(tree, limits)
    value = evaluator.eval(tree)
    if not _is_number(value):
      raise ReasonError(f"the result must be a number or a truth value, not "
                        f"{type(value).__name__}")
    return Evaluation(value, None, evaluator.work, frozenset(evaluator.visited))
  except ReasonError as exc:
    return Evaluation(None, str(exc), evaluator.work, frozenset(evaluator.visited))
  except (ArithmeticError, ValueError, TypeError, RecursionError, MemoryError) as exc:
    return Evaluation(None, f"{type(exc).__name__}: {exc}", evaluator.work,
                      frozenset(evaluator.visited))


def format_value(value: Any) -> str:
  """"True"/"False", integers as digits, floats with up to 10 significant digits."""
  if isinstance(value, bool):
    return str(value)
  if isinstance(value, float):
    if value.is_integer() and abs(value) < 1e15:
      return str(int(value))
    return f"{value:.10g}"
  return str(value)


def reason(problem: Any, limits: Limits = DEFAULT_LIMITS) -> ToolResult:
  """The tool function: the formatted value, or an error observation."""
  result = evaluate(problem, limits)
  if result.error is not None:
    return ToolResult(ok=False, text=f"error: reason: {result.error}",
                      data={"work": result.work})
  return ToolResult(ok=True, text=format_value(result.value), data={"work": result.work})


def make_reason_tool(limits: Limits = DEFAULT_LIMITS) -> Tool:
  return Tool("reason", "Evaluate arithmetic, comparisons and date differences, e.g. "
              "1901 - 1854, 412 > 389, days_between('2020-02-10', '2020-03-05').",
              {"type": "object", "properties": {"problem": {"type": "string"}},
               "required": ["problem"]}, lambda problem: reason(problem, limits))
