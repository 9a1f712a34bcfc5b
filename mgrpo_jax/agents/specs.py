"""The three agents of the system: their tools, prompts and agent-level action checks.

- MAIN (M, the planner; paper section 3.1): `delegate(subtask, context?)` hands a
  sub-task to S, `reason(problem)` runs the bounded evaluator; `<result>` is the answer.
- SUB (S, the executor): `search(query)`, `visit(page)`; `<result>` is its report.
- SINGLE (the single-agent baseline): `search`, `visit`, `reason`; `<result>` answers.

A tool call is well formed for an agent when the tool is one of the agent's, its
arguments fit the tool's JSON schema (required fields, JSON types, no unknown fields,
checked with `tools.validate_args`), and no string argument is longer than
`max_argument_chars`. Wrong values (a page that does not exist) are not format errors:
the tool answers with an error observation.

Prompts follow the released code: the question goes in the first user message of M
("The Question is: ..."), the sub-task in S's ("Task: ...\\n\\ncontext: ...\\n\\nNow
begin your research!"); the system prompt states the protocol and lists the tools as
JSON inside `<tools>...</tools>`.
"""

from __future__ import annotations

import dataclasses
import json

from mgrpo_jax.agents import protocol
from mgrpo_jax.tools import Tool, ToolResult, validate_args

DELEGATE = "delegate"
DEFAULT_MAX_ARGUMENT_CHARS = 1024


def _declared(name: str, description: str, properties: dict, required: tuple[str, ...]) -> Tool:
  """A tool declaration: its schema is checked here, it is executed elsewhere."""

  def not_here(**_) -> ToolResult:
    return ToolResult(ok=False, text=f"error: {name} is executed by the controller")

  return Tool(name, description, {"type": "object", "properties": properties,
                                  "required": list(required)}, not_here)


DELEGATE_TOOL = _declared(
  DELEGATE, "Give one sub-task to the research sub-agent (it can search and read pages); "
  "returns its report.",
  {"subtask": {"type": "string"}, "context": {"type": "string"}}, ("subtask",))
REASON_TOOL = _declared(
  "reason", "Evaluate arithmetic, comparisons and date differences, e.g. 1901 - 1854.",
  {"problem": {"type": "string"}}, ("problem",))
SEARCH_TOOL = _declared(
  "search", "Search the encyclopedia; returns titles, page ids and snippets.",
  {"query": {"type": "string"}}, ("query",))
VISIT_TOOL = _declared(
  "visit", "Open a page by id or exact title; returns its text.",
  {"page": {"type": ["string", "integer"]}}, ("page",))

_SYSTEM = (
  "You are {who}. Work in turns. Each turn is <thinking>your reasoning</thinking> "
  "followed by exactly one action: either <tool_call>{{\"name\": tool, \"arguments\": "
  "{{...}}}}</tool_call> to call one tool, or <result>{result}</result> to finish. "
  "Tool outputs come back as <tool_response>...</tool_response>.\n"
  "<tools>{tools}</tools>")


@dataclasses.dataclass(frozen=True)
class AgentSpec:
  """One agent's tools and prompts.

  Attributes:
    role: "main", "sub" or "single" (also the key of its records).
    tools: the tools it may call (declarations; execution is the controller's).
    who: how the system prompt introduces the agent.
    result: what its `<result>` holds ("the final answer" / "your report").
    user_template: its first user message; fields `{task}` and `{context}`.
    system: a system prompt to use verbatim instead of the generated one (e.g. a short
      one for small models and tests).
  """
  role: str
  tools: tuple[Tool, ...]
  who: str
  result: str
  user_template: str
  system: str | None = None

  @property
  def tool_names(self) -> tuple[str, ...]:
    return tuple(t.name for t in self.tools)

  def system_prompt(self) -> str:
    if self.system is not None:
      return self.system
    tools = json.dumps([{"name": t.name, "description": t.description,
                         "parameters": dict(t.parameters)} for t in self.tools],
                       ensure_ascii=False)
    return _SYSTEM.format(who=self.who, result=self.result, tools=tools)

  def first_user_message(self, task: str, context: str = "") -> str:
    return self.user_template.format(task=task, context=context)


MAIN = AgentSpec(
  "main", (DELEGATE_TOOL, REASON_TOOL),
  "the main agent: plan, delegate look-ups to the sub-agent, compute, then answer",
  "the final answer", "The Question is: {task}")
SUB = AgentSpec(
  "sub", (SEARCH_TOOL, VISIT_TOOL),
  "a research sub-agent: carry out the task with search and visit, then report",
  "your report", "Task: {task}\n\ncontext: {context}\n\nNow begin your research!")
SINGLE = AgentSpec(
  "single", (SEARCH_TOOL, VISIT_TOOL, REASON_TOOL),
  "a research agent: answer the question with search, visit and reason",
  "the final answer", "The Question is: {task}")
SPECS = {spec.role: spec for spec in (MAIN, SUB, SINGLE)}
SYSTEM_STYLES = ("full", "short")
_SHORT = ("{who}. Tools: {tools}. Each turn: <thinking>...</thinking> then one "
          "<tool_call>{{\"name\": tool, \"arguments\": {{...}}}}</tool_call> or "
          "<result>{result}</result>.")


def short_system_prompt(spec: AgentSpec) -> str:
  """The protocol and tool names in one line: prompts of a few dozen tokens."""
  tools = ", ".join(f"{t.name}({', '.join(t.parameters['properties'])})" for t in spec.tools)
  return _SHORT.format(who=spec.who.split(":")[0].capitalize(), tools=tools, result=spec.result)


def spec_for(role: str, system: str = "full", extra_tools: tuple[Tool, ...] = ()
             ) -> AgentSpec:
  """The spec of `role` with the "full" (released code) or "short" system prompt.

  `extra_tools` (a user's, `plugins.user_tools`) follow the built-in tools: the system
  prompt lists them and `check_action` accepts calls to them.
  """
  if role not in SPECS:
    raise ValueError(f"unknown agent role {role!r}; expected one of {sorted(SPECS)}")
  if system not in SYSTEM_STYLES:
    raise ValueError(f"prompts.system must be one of {SYSTEM_STYLES}, got {system!r}")
  spec = SPECS[role]
  if extra_tools:
    spec = dataclasses.replace(spec, tools=spec.tools + tuple(extra_tools))
  if system == "short":
    return dataclasses.replace(spec, system=short_system_prompt(spec))
  return spec


def _longest_string(value) -> int:
  if isinstance(value, str):
    return len(value)
  if isinstance(value, dict):
    return max((_longest_string(v) for v in value.values()), default=0)
  if isinstance(value, list):
    return max((_longest_string(v) for v in value), default=0)
  return 0


def check_action(spec: AgentSpec, action: protocol.ParsedAction, *,
                 max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS
                 ) -> protocol.ParsedAction | protocol.ParseError:
  """`action` if the agent may take it as written, else a ParseError; never raises."""
  if action.kind != protocol.TOOL_CALL:
    return action
  tool = next((t for t in spec.tools if t.name == action.name), None)
  if tool is None:
    return protocol.ParseError(protocol.UNKNOWN_TOOL, f"{spec.role} has no tool "
                               f"{action.name[:40]!r}; tools: {', '.join(spec.tool_names)}")
  problem = validate_args(tool, action.arguments)
  if problem:
    return protocol.ParseError(protocol.BAD_ARGUMENTS, problem)
  longest = _longest_string(action.arguments)
  if longest > max_argument_chars:
    return protocol.ParseError(protocol.ARGUMENT_TOO_LONG, f"{action.name}: an argument has "
                               f"{longest} characters (limit {max_argument_chars})")
  return action


def parse_action(spec: AgentSpec, text: str, *,
                 max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS
                 ) -> protocol.ParsedAction | protocol.ParseError:
  """`protocol.parse_turn` followed by `check_action`; never raises."""
  parsed = protocol.parse_turn(text)
  if isinstance(parsed, protocol.ParseError):
    return parsed
  return check_action(spec, parsed, max_argument_chars=max_argument_chars)
