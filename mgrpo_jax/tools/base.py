"""Tool interface: results, JSON-argument schemas and a registry for dispatch by name.

Every tool call returns a `ToolResult`; a tool never raises into its caller. Bad
arguments (unknown tool, unparsable JSON, missing or wrongly typed fields, unknown
fields) and any exception inside a tool become `ToolResult(ok=False, text="error: ...")`.
Each result carries the call's wall-clock latency (`latency_s`) for trajectory logs.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

_JSON_TYPES: dict[str, tuple[type, ...]] = {
  "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
}


@dataclasses.dataclass(frozen=True)
class ToolResult:
  """One observation. `data` holds structured output (e.g. search hits) when ok."""
  ok: bool
  text: str
  latency_s: float = 0.0
  data: Any = None


def error(message: str) -> ToolResult:
  return ToolResult(ok=False, text=f"error: {message}")


@dataclasses.dataclass(frozen=True)
class Tool:
  """A named callable with a JSON-schema object describing its keyword arguments.

  Attributes:
    name: the name the controller dispatches on.
    description: one line shown to the model.
    parameters: {"type": "object", "properties": {...}, "required": [...]}; property
      types are JSON types ("string", "integer", "number", "boolean"), a list of them
      allowed (["string", "integer"]).
    fn: called with the validated keyword arguments; returns a ToolResult or a str.
  """
  name: str
  description: str
  parameters: Mapping[str, Any]
  fn: Callable[..., ToolResult | str]


def _type_ok(value: Any, json_type: str | list[str]) -> bool:
  names = [json_type] if isinstance(json_type, str) else list(json_type)
  for name in names:
    if name in ("integer", "number") and isinstance(value, bool):
      continue
    if isinstance(value, _JSON_TYPES[name]):
      return True
  return False


def validate_args(tool: Tool, args: Any) -> str | None:
  """None if `args` fits `tool.parameters`, else a message naming the field."""
  if not isinstance(args, Mapping):
    return f"{tool.name}: arguments must be a JSON object, got {type(args).__name__}"
  properties = tool.parameters.get("properties", {})
  for field in tool.parameters.get("required", ()):
    if field not in args:
      return f"{tool.name}: missing argument {field!r}"
  for field, value in args.items():
    if field not in properties:
      return f"{tool.name}: unknown argument {field!r} (expected {sorted(properties)})"
    expected = properties[field].get("type", "string")
    if not _type_ok(value, expected):
      return f"{tool.name}: argument {field!r} must be {expected}, got {type(value).__name__}"
  return None


def check_tool(tool: Tool) -> str | None:
  """None if `tool` is one `validate_args` and the prompts can use, else what is wrong.

  Its name is a non-empty string, its description a string, `fn` callable, and
  `parameters` a {"type": "object", "properties": {...}, "required": [...]} schema whose
  property types are JSON types `validate_args` checks and whose required fields exist.
  """
  if not isinstance(tool.name, str) or not tool.name:
    return f"tool name must be a non-empty string, got {tool.name!r}"
  if not isinstance(tool.description, str) or not callable(tool.fn):
    return f"{tool.name}: description must be a string and fn callable"
  params = tool.parameters
  if (not isinstance(params, Mapping) or params.get("type") != "object"
      or not isinstance(params.get("properties"), Mapping)):
    return f'{tool.name}: parameters must be {{"type": "object", "properties": {{...}}}}'
  for field, schema in params["properties"].items():
    json_type = schema.get("type", "string") if isinstance(schema, Mapping) else None
    names = [json_type] if isinstance(json_type, str) else json_type
    if (not isinstance(names, (list, tuple)) or not names
        or any(not isinstance(n, str) or n not in _JSON_TYPES for n in names)):
      return (f"{tool.name}: argument {field!r} has type {json_type!r}; expected one of "
              f"{sorted(_JSON_TYPES)} or a list of them")
  missing = [f for f in params.get("required", ()) if f not in params["properties"]]
  if missing:
    return f"{tool.name}: required arguments {missing} are not among its properties"
  return None


class ToolRegistry:
  """Tools by name; `call` validates arguments, times the call and catches errors."""

  def __init__(self, tools: list[Tool] | tuple[Tool, ...] = ()):
    self._tools: dict[str, Tool] = {}
    for tool in tools:
      self.register(tool)

  def register(self, tool: Tool) -> None:
    if not tool.name or tool.name in self._tools:
      raise ValueError(f"tool name {tool.name!r} is empty or already registered")
    self._tools[tool.name] = tool

  def register_function(self, name: str, fn: Callable[..., ToolResult | str], *,
                        description: str, parameters: Mapping[str, Any]) -> Tool:
    """Registers a user function as a tool and returns it."""
    tool = Tool(name, description, parameters, fn)
    self.register(tool)
    return tool

  @property
  def names(self) -> list[str]:
    return list(self._tools)

  def schemas(self) -> list[dict[str, Any]]:
    """JSON-serializable tool descriptions (for prompts)."""
    return [{"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in self._tools.values()]

  def for_task(self, task_id: str) -> ToolRegistry:
    """The registry that runs task `task_id`'s calls: this one (`TaskRoutedRegistry`
    routes each task to its own world's)."""
    del task_id
    return self

  def call(self, name: Any, args: Any) -> ToolResult:
    """Runs tool `name` with `args` (a dict or a JSON object string); never raises."""
    start = time.perf_counter()
    result = self._call(name, args)
    return dataclasses.replace(result, latency_s=time.perf_counter() - start)

  def call_json(self, payload: str) -> ToolResult:
    """Runs a call written as JSON: {"name": ..., "arguments": {...}}; never raises."""
    start = time.perf_counter()
    try:
      call = json.loads(payload)
    except (ValueError, TypeError, RecursionError) as exc:
      result = error(f"tool call is not valid JSON: {exc}")
    else:
      if not isinstance(call, dict) or "name" not in call:
        result = error('tool call must be a JSON object with "name" and "arguments"')
      else:
        result = self._call(call["name"], call.get("arguments", {}))
    return dataclasses.replace(result, latency_s=time.perf_counter() - start)

  def _call(self, name: Any, args: Any) -> ToolResult:
    if not isinstance(name, str) or name not in self._tools:
      return error(f"unknown tool {name!r}; available: {', '.join(self._tools)}")
    tool = self._tools[name]
    if isinstance(args, str):
      try:
        args = json.loads(args)
      except (ValueError, RecursionError) as exc:
        return error(f"{name}: arguments are not valid JSON: {exc}")
    problem = validate_args(tool, args)
    if problem:
      return error(problem)
    try:
      out = tool.fn(**args)
    except Exception as exc:  # noqa: BLE001 - a tool must never raise into the controller
      return error(f"{name} failed: {type(exc).__name__}: {exc}")
    if isinstance(out, ToolResult):
      return out
    if isinstance(out, str):
      return ToolResult(ok=True, text=out)
    return error(f"{name} returned {type(out).__name__}, expected ToolResult or str")


class TaskRoutedRegistry:
  """The tools of several worlds: each task's calls run in its own world's registry.

  RL on many training worlds (`world.train_worlds`) asks about entities whose pages
  exist in one world only, so a call is routed by the id of the task it serves (M's
  question; S's calls carry their query's id). A world's registry is opened on its
  first call, once even when several threads (the sub-agent service's) ask at once,
  and kept among the `max_open` most recently used: a run over thousands of worlds
  keeps that many index connections, not one per world it has touched. A registry
  that falls out is dropped, not closed, so a call still running in it finishes (its
  connection closes with its last user).

  Args:
    world_of: task id -> the key of its world.
    open_world: world key -> that world's registry (the same tools in every world).
    max_open: how many worlds' registries are kept open.
  """

  def __init__(self, world_of: Mapping[str, Any], open_world: Callable[[Any], ToolRegistry],
               *, max_open: int = 64):
    if max_open < 1:
      raise ValueError(f"max_open must be >= 1, got {max_open}")
    self._world_of = dict(world_of)
    self._open_world = open_world
    self._max_open = max_open
    self._opened: collections.OrderedDict[Any, ToolRegistry] = collections.OrderedDict()
    self._lock = threading.Lock()
    self._opening: dict[Any, concurrent.futures.Future] = {}  # worlds being opened

  def for_task(self, task_id: str) -> ToolRegistry:
    """Task `task_id`'s world's registry; a KeyError naming the id for an unknown task.

    The lock guards only the bookkeeping: a world is opened outside it, by the first
    thread that asks, while the threads asking for the same world wait for that open
    (and get its error, if it fails) and threads asking for other worlds go on.
    """
    if task_id not in self._world_of:
      raise KeyError(f"no training world holds task {task_id!r}")
    world = self._world_of[task_id]
    with self._lock:
      registry = self._opened.pop(world, None)
      if registry is not None:
        self._keep(world, registry)
        return registry
      opening = self._opening.get(world)
      first = opening is None
      if first:
        opening = self._opening[world] = concurrent.futures.Future()
    if not first:
      return opening.result()
    try:
      registry = self._open_world(world)
    except BaseException as exc:
      with self._lock:
        del self._opening[world]
      opening.set_exception(exc)
      raise
    with self._lock:
      del self._opening[world]
      self._keep(world, registry)
    opening.set_result(registry)
    return registry

  def _keep(self, world: Any, registry: ToolRegistry) -> None:
    """Marks `world` the most recently used; drops the least recently used past
    `max_open`. Called with the lock held."""
    self._opened[world] = registry
    while len(self._opened) > self._max_open:
      self._opened.popitem(last=False)
