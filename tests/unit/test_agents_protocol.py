"""The turn grammar, the agent-level checks and the format state machine: garbage never
raises and scores format 0; well-formed transcripts score 1."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgrpo_jax.agents import config, protocol, specs
from mgrpo_jax.agents.validator import FormatValidator, State, validate_turns

AGENTS = (specs.MAIN, specs.SUB, specs.SINGLE)
GOOD_CALLS = {"main": ("delegate", {"subtask": "Find the founder of X.", "context": "c"}),
              "sub": ("visit", {"page": 12}), "single": ("search", {"query": "Velora Trust"})}
OBSERVATION = protocol.render_observation("1. X (page 3): X is a city.")
TAGS = ["<thinking>", "</thinking>", "<tool_call>", "</tool_call>", "<result>", "</result>",
        "<tool_response>", "</tool_response>", "<|im_end|>", "<|im_start|>"]


def _good_turns(spec):
  name, args = GOOD_CALLS[spec.role]
  return [("assistant", protocol.render_tool_call(name, args, "step one")),
          ("user", OBSERVATION),
          ("assistant", protocol.render_result("The answer.", "done"))]


@pytest.mark.parametrize("spec", AGENTS, ids=lambda s: s.role)
def test_well_formed_transcripts_score_one(spec):
  assert validate_turns(spec, _good_turns(spec))
  assert validate_turns(spec, [("assistant", "  <thinking>x</thinking>\n<result>y</result>"
                                " <|im_end|>")])
  notice = config.ANSWER_NOW
  turns = _good_turns(spec)[:1] + [("user", notice), ("assistant", "<thinking></thinking>"
                                                       "<result></result>")]
  assert validate_turns(spec, turns, notice=notice)


@pytest.mark.parametrize("text, code", [
  ("", protocol.EMPTY),
  ("   <|im_end|>", protocol.EMPTY),
  ("hello <thinking>x</thinking><result>y</result>", protocol.TEXT_OUTSIDE_TAGS),
  ("<thinking>x</thinking><result>y</result> trailing", protocol.TEXT_OUTSIDE_TAGS),
  ("<result>y</result>", protocol.MISSING_THINKING),
  ("<thinking>x</thinking>", protocol.MISSING_ACTION),
  ("<thinking>x</thinking><result>y", protocol.UNTERMINATED_TAG),
  ("<thinking>x<result>y</result></thinking>", protocol.UNEXPECTED_TAG),
  ("<thinking>x</thinking></result>", protocol.UNEXPECTED_TAG),
  ("<thinking>x</thinking><tool_response>y</tool_response>", protocol.UNEXPECTED_TAG),
  ("<thinking>x</thinking><result>a</result><result>b</result>", protocol.EXTRA_ACTION),
  ("<thinking>x</thinking><tool_call>{\"name\": </tool_call>", protocol.BAD_JSON),
  ("<thinking>x</thinking><tool_call>[1, 2]</tool_call>", protocol.BAD_CALL_SHAPE),
  ("<thinking>x</thinking><tool_call>{\"name\": \"reason\"}</tool_call>",
   protocol.BAD_CALL_SHAPE),
  ("<thinking>x<|im_start|></thinking><result>y</result>", protocol.SPECIAL_TOKEN),
  ("<thinking>x</thinking><tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"a\"}}"
   "</tool_call>", protocol.UNKNOWN_TOOL),  # M has no search tool
  ("<thinking>x</thinking><tool_call>{\"name\": \"delegate\", \"arguments\": {}}</tool_call>",
   protocol.BAD_ARGUMENTS),
  ("<thinking>x</thinking><tool_call>{\"name\": \"delegate\", \"arguments\": {\"subtask\": 3}}"
   "</tool_call>", protocol.BAD_ARGUMENTS),
  ("<thinking>x</thinking><tool_call>" + json.dumps(
    {"name": "reason", "arguments": {"problem": "1+" * 600}}) + "</tool_call>",
   protocol.ARGUMENT_TOO_LONG),
  ("<thinking>x</thinking><tool_call>" + "[" * 5000 + "</tool_call>", protocol.BAD_JSON),
  ("<think>x</thinking><result>y</result>", protocol.UNEXPECTED_TAG),
  ("<think>x<thinking>y</thinking></think><result>y</result>", protocol.UNEXPECTED_TAG),
  ("<think>x</think><thinking>y</thinking><result>y</result>", protocol.EXTRA_ACTION),
])
def test_malformed_turns_give_typed_errors(text, code):
  parsed = specs.parse_action(specs.MAIN, text)
  assert isinstance(parsed, protocol.ParseError) and parsed.code == code, parsed
  validator = FormatValidator(specs.MAIN)
  validator.assistant(text)
  assert validator.state is State.FAILED and validator.error.code == code
  assert not validator.format_ok


def test_rendered_actions_parse_back():
  for spec in AGENTS:
    name, args = GOOD_CALLS[spec.role]
    parsed = specs.parse_action(spec, protocol.render_tool_call(name, args, "why"))
    assert parsed == protocol.ParsedAction(protocol.TOOL_CALL, "why", name=name, arguments=args)
  parsed = protocol.parse_turn(protocol.render_result(" 42 ", "t") + "<|im_end|>")
  assert parsed == protocol.ParsedAction(protocol.RESULT, "t", text="42")


def test_qwen3_turns_parse_and_its_vocabulary_selects_its_dialect():
  """Qwen3's own turn (`<think>` block, a tool call with the JSON on its own line) is
  a protocol turn; the scripted agents write it so for a vocabulary with `<think>`."""
  for spec in AGENTS:
    name, args = GOOD_CALLS[spec.role]
    text = protocol.render_tool_call(name, args, "why", protocol.QWEN3)
    assert text.startswith("<think>\nwhy\n</think>\n\n<tool_call>\n{")
    assert specs.parse_action(spec, text) == protocol.ParsedAction(
        protocol.TOOL_CALL, "\nwhy\n", name=name, arguments=args)
  parsed = protocol.parse_turn(protocol.render_result("42", "t", protocol.QWEN3) + "<|im_end|>")
  assert parsed == protocol.ParsedAction(protocol.RESULT, "\nt\n", text="42")

  class Vocabulary:
    def __init__(self, tokens):
      self.tokens = tokens

    def token_to_id(self, token):
      if token not in self.tokens:
        raise KeyError(token)
      return self.tokens.index(token)

  assert protocol.dialect_for(Vocabulary(["<think>", "</think>"])) is protocol.QWEN3
  assert protocol.dialect_for(Vocabulary(["<think>"])) is protocol.PROTOCOL
  assert protocol.dialect_for(Vocabulary(["<thinking>", "</thinking>"])) is protocol.PROTOCOL


def test_state_machine_transitions():
  validator = FormatValidator(specs.SUB)
  name, args = GOOD_CALLS["sub"]
  call = protocol.render_tool_call(name, args, "x")
  assert validator.assistant(call).kind == protocol.TOOL_CALL
  assert validator.state is State.OBSERVATION and not validator.format_ok
  validator.notice()
  assert validator.state is State.FINAL
  error = validator.assistant(call)  # only a result may follow the notice
  assert error.code == protocol.ACTION_NOT_ALLOWED and not validator.format_ok
  validator = FormatValidator(specs.SUB)
  validator.assistant(protocol.render_result("r", "x"))
  assert validator.format_ok
  assert validator.assistant(call).code == protocol.TURN_AFTER_END
  assert not validator.format_ok
  validator = FormatValidator(specs.SUB)
  assert validator.assistant(call, finish_reason="length").code == protocol.LENGTH_LIMIT
  # A transcript that stops after a tool call (turn or context limit) scores 0.
  assert not validate_turns(specs.SUB, _good_turns(specs.SUB)[:2])
  # Two assistant turns in a row, or a user turn that is not a tool response, score 0.
  turns = _good_turns(specs.SUB)
  assert not validate_turns(specs.SUB, [turns[0], turns[2]])
  assert not validate_turns(specs.SUB, [turns[0], ("user", "plain text"), turns[2]])


_fragments = st.one_of(
  st.sampled_from(TAGS),
  st.text(max_size=30),
  st.sampled_from(['{"name": "search", "arguments": {"query": "x"}}', '{"name": "delegate"',
                   '{"name": "nope", "arguments": {}}', '{"name": 3, "arguments": []}', "{}",
                   '{"name": "reason", "arguments": {"problem": "' + "9" * 3000 + '"}}']),
)
_garbage = st.one_of(
  st.lists(_fragments, max_size=12).map("".join),
  st.text(max_size=200),
  st.binary(max_size=100).map(lambda b: b.decode("utf-8", "replace")),
)


def _is_well_formed(spec, text: str) -> bool:
  return isinstance(specs.parse_action(spec, text), protocol.ParsedAction)


@settings(max_examples=300)
@given(texts=st.lists(_garbage, min_size=1, max_size=3), agent=st.sampled_from(AGENTS))
def test_garbage_never_raises_and_scores_zero(texts, agent):
  """Unless hypothesis happens to write a well-formed trajectory, format_ok is 0."""
  turns = []
  for text in texts:
    turns += [("assistant", text), ("user", OBSERVATION)]
  turns = turns[:-1]
  ok = validate_turns(agent, turns)
  parsed = [specs.parse_action(agent, t) for t in texts]
  expected = (all(isinstance(p, protocol.ParsedAction) for p in parsed)
              and all(p.kind == protocol.TOOL_CALL for p in parsed[:-1])
              and parsed[-1].kind == protocol.RESULT)
  assert ok == expected


@settings(max_examples=200)
@given(agent=st.sampled_from(AGENTS), prefix=_garbage, suffix=_garbage,
       thinking=st.text(max_size=40).filter(lambda t: "<" not in t))
def test_garbage_around_a_good_turn_scores_zero(agent, prefix, suffix, thinking):
  name, args = GOOD_CALLS[agent.role]
  good = protocol.render_tool_call(name, args, thinking)
  assert _is_well_formed(agent, good)
  # Anything but whitespace (and one final end-of-turn token) around a complete turn is
  # text outside tags, a second action or a broken block: never well formed.
  extra = prefix.strip() or suffix.strip().removesuffix("<|im_end|>").strip()
  assert _is_well_formed(agent, prefix + good + suffix) == (not extra)
  assert validate_turns(agent, [("assistant", good), ("user", OBSERVATION),
                                ("assistant", protocol.render_result("r", thinking))])


@settings(max_examples=100)
@given(agent=st.sampled_from(AGENTS), arguments=st.dictionaries(
  st.text(max_size=8), st.one_of(st.text(max_size=2000), st.integers(), st.none(),
                                 st.lists(st.integers(), max_size=3)), max_size=3),
  name=st.one_of(st.sampled_from(["delegate", "reason", "search", "visit"]), st.text(max_size=9)))
def test_agent_level_checks(agent, arguments, name):
  """A call is well formed iff the tool is the agent's and the arguments fit its schema."""
  text = protocol.render_tool_call(name, arguments, "t")
  parsed = specs.parse_action(agent, text)
  tool = {t.name: t for t in agent.tools}.get(name)
  if tool is None:
    assert parsed.code == protocol.UNKNOWN_TOOL
    return
  props = tool.parameters["properties"]
  fits = (set(tool.parameters["required"]) <= set(arguments) <= set(props)
          and all(isinstance(v, str) or (isinstance(v, int) and "integer" in props[k]["type"])
                  for k, v in arguments.items())
          and all(len(v) <= specs.DEFAULT_MAX_ARGUMENT_CHARS for v in arguments.values()
                  if isinstance(v, str)))
  assert isinstance(parsed, protocol.ParsedAction) == fits, parsed
