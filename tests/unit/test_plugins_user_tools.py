"""A user's tool registered through gin: in the agent's spec, its prompt, its action checks,
every registry built for a run, and a rollout of the real controller; errors name the
binding."""

import collections
import pathlib

import gin
import pytest

from mgrpo_jax import plugins
from mgrpo_jax.agents import (
  Agent,
  AgentLimits,
  OraclePolicy,
  RolloutConfig,
  make_controller,
  protocol,
  specs,
)
from mgrpo_jax.config import base_config
from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.slices.run import write_launch_files
from mgrpo_jax.tasks import pages, world
from mgrpo_jax.tasks.oracle import Action, OracleSubAgent
from mgrpo_jax.text import SentencePieceTokenizer
from mgrpo_jax.tools import Tool, build_index
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.paths import RunPaths

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "configs" / "examples" / "my_tools.gin")
CONVERT = {"value": 3, "from_unit": "mi", "to_unit": "km"}
CONVERTED = "3 mi = 4.82803 km"
LIMITS = AgentLimits(max_turns=4, context_tokens=4096, max_new_tokens=256)
MGRPO = parse_mode("mgrpo")  # base_config's mode
Task = collections.namedtuple("Task", "id text")

pytestmark = pytest.mark.usefixtures("clean_gin")


def _schema(**properties) -> dict:
  """The JSON schema of a tool whose `properties` are all required."""
  return {"type": "object", "properties": properties, "required": list(properties)}


@gin.configurable(module="user_tools_test")
def broken_tool() -> Tool:
  """A tool whose function raises on every call."""

  def fail(text: str) -> str:
    raise RuntimeError(f"cannot count {text!r}")

  return Tool("broken", "Always fails.", _schema(text={"type": "string"}), fail)


@gin.configurable(module="user_tools_test")
def fake_search_tool() -> Tool:
  """A tool named like a built-in one."""
  return Tool("search", "A second search.", _schema(query={"type": "string"}), str)


@gin.configurable(module="user_tools_test")
def other_unit_convert_tool() -> Tool:
  """A tool named like the example's, from another factory."""
  return Tool("unit_convert", "Another converter.", _schema(value={"type": "number"}), str)


@gin.configurable(module="user_tools_test")
def not_a_tool() -> str:
  """A factory returning a tool's name instead of a tool."""
  return "unit_convert"


@gin.configurable(module="user_tools_test")
def list_argument_tool() -> Tool:
  """A tool whose argument has a JSON type the checks do not know."""
  return Tool("sum_all", "Adds numbers.", _schema(values={"type": "array"}), str)


@pytest.fixture(scope="module")
def config():
  return base_config()


@pytest.fixture(scope="module")
def index_path(tmp_path_factory) -> pathlib.Path:
  path = tmp_path_factory.mktemp("index") / "world.sqlite"
  build_index(pages.render_pages(world.generate_world("tiny", 3)), path)
  return path


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  texts = [spec.system_prompt() for spec in specs.SPECS.values()]
  texts += [protocol.render_tool_call("unit_convert", CONVERT, "I will call unit_convert."),
            protocol.render_result(CONVERTED, "I have what I need to answer."), CONVERTED]
  return SentencePieceTokenizer.train(texts * 4, tmp_path_factory.mktemp("spm"), 400)


def _call_text(arguments: dict) -> str:
  """An agent's turn calling unit_convert with `arguments`."""
  return protocol.render_tool_call("unit_convert", arguments, "I will convert.")


class CallThenAnswer:
  """M's scripted policy: call `tool` once, then answer with its observation."""

  def __init__(self, tool: str, args: dict):
    self.tool, self.args = tool, args

  def next_action(self, task, history):
    del task
    if not history:
      return Action.tool(self.tool, **self.args)
    return Action.answer(history[-1].observation)


def _rollout(config, index_path, tokenizer, tool: str, args: dict):
  """One M rollout of the real controller over the run's specs and registry."""
  main_spec, sub_spec = agent_setup.agent_specs(config, MGRPO)
  registry = agent_setup.index_tool_registry(index_path, config)
  controller = make_controller(
      "mgrpo", Agent(OraclePolicy(CallThenAnswer(tool, args), tokenizer), tokenizer),
      registry, RolloutConfig(main=LIMITS, sub=LIMITS),
      sub=Agent(OraclePolicy(OracleSubAgent(), tokenizer), tokenizer),
      main_spec=main_spec, sub_spec=sub_spec)
  task = Task("q0", "How many km are 3 mi?")
  return controller.run([task], 1, 0).main[0].trajectory


@pytest.mark.parametrize("style, listed", [
    ("full", '{"name": "unit_convert", "description": "Convert a length, mass or time'),
    ("short", "reason(problem), unit_convert(value, from_unit, to_unit)."),
])
def test_the_example_gives_the_main_agent_the_tool_and_its_prompt_lists_it(style, listed):
  plugins.parse_gin([EXAMPLE], [])
  config = base_config()
  config.prompts.system = style
  main_spec, sub_spec = agent_setup.agent_specs(config, MGRPO)
  assert main_spec.tool_names == ("delegate", "reason", "unit_convert")
  assert sub_spec.tool_names == ("search", "visit")
  assert listed in main_spec.system_prompt()
  assert "unit_convert" not in sub_spec.system_prompt()


@pytest.mark.parametrize("arguments, error", [
    (CONVERT, None),
    ({"value": 3, "from_unit": "mi"}, "missing argument 'to_unit'"),
    ({**CONVERT, "value": "three"}, "argument 'value' must be number"),
    ({**CONVERT, "precision": 2}, "unknown argument 'precision'"),
])
def test_check_action_accepts_a_valid_call_and_refuses_bad_arguments(config, arguments,
                                                                       error):
  plugins.parse_gin([EXAMPLE], [])
  main_spec, _ = agent_setup.agent_specs(config, MGRPO)
  checked = specs.parse_action(main_spec, _call_text(arguments))
  if error is None:
    assert (checked.kind, checked.name, checked.arguments) == (protocol.TOOL_CALL,
                                                               "unit_convert", CONVERT)
  else:
    assert checked.code == protocol.BAD_ARGUMENTS and error in checked.message


def test_an_agent_without_the_tool_refuses_it(config):
  plugins.parse_gin([EXAMPLE], [])
  _, sub_spec = agent_setup.agent_specs(config, MGRPO)
  assert specs.parse_action(sub_spec, _call_text(CONVERT)).code == protocol.UNKNOWN_TOOL


def test_the_registry_runs_the_tool_next_to_the_built_in_ones(config, index_path):
  plugins.parse_gin([EXAMPLE], [])
  registry = agent_setup.index_tool_registry(index_path, config)
  assert registry.names == ["search", "visit", "reason", "unit_convert"]
  assert registry.call("unit_convert", CONVERT).text == CONVERTED
  unknown = registry.call("unit_convert", {**CONVERT, "to_unit": "parsec"})
  assert not unknown.ok and "unknown unit 'parsec'" in unknown.text
  assert registry.call("search", {"query": "city"}).ok


def test_a_rollout_gets_the_tools_observation(config, index_path, tokenizer):
  plugins.parse_gin([EXAMPLE], [])
  trajectory = _rollout(config, index_path, tokenizer, "unit_convert", CONVERT)
  assert [(c.name, c.ok) for c in trajectory.tool_calls] == [("unit_convert", True)]
  assert any(CONVERTED in text for role, text in trajectory.messages if role == "user")
  assert trajectory.format_ok and trajectory.final == CONVERTED


def test_a_tool_that_raises_gives_an_error_observation_not_a_crash(config, index_path,
                                                                   tokenizer):
  plugins.parse_gin([], ["mgrpo_jax.plugins.user_tools.main = [@user_tools_test.broken_tool]"])
  trajectory = _rollout(config, index_path, tokenizer, "broken", {"text": "a b"})
  assert [(c.name, c.ok) for c in trajectory.tool_calls] == [("broken", False)]
  assert trajectory.final.startswith("error: broken failed: RuntimeError: cannot count")


def test_one_factory_bound_to_two_agents_is_one_tool(config, index_path):
  factory = "@configs.examples.my_tools.unit_convert_tool"
  plugins.parse_gin([EXAMPLE], [f"mgrpo_jax.plugins.user_tools.sub = [{factory}]"])
  main_spec, sub_spec = agent_setup.agent_specs(config, MGRPO)
  assert main_spec.tools[-1] is sub_spec.tools[-1]
  assert agent_setup.index_tool_registry(index_path, config).names[-1] == "unit_convert"


@pytest.mark.parametrize("bindings, message", [
    (["user_tools.main = [@user_tools_test.fake_search_tool]"],
     r"user_tools\.main\[0\]: tool 'search' collides with a built-in tool"),
    (["user_tools.sub = [@user_tools_test.other_unit_convert_tool]"],
     r"user_tools\.sub\[0\]: tool 'unit_convert' collides with the tool of "
     r"mgrpo_jax\.plugins\.user_tools\.main\[0\]"),
    (["user_tools.main = [@configs.examples.my_tools.unit_convert_tool, "
      "@configs.examples.my_tools.unit_convert_tool]"],
     r"user_tools\.main\[1\]: tool 'unit_convert' is bound to main twice"),
    (["user_tools.single = [@user_tools_test.not_a_tool]"],
     r"user_tools\.single\[0\]: not_a_tool\(\) returned str, not a "
     r"mgrpo_jax\.tools\.Tool"),
    (["user_tools.main = [@user_tools_test.broken_tool()]"],
     r"user_tools\.main\[0\]: got a Tool, not a factory"),
    (["user_tools.main = [@user_tools_test.list_argument_tool]"],
     r"user_tools\.main\[0\]: list_argument_tool\(\): sum_all: argument 'values' has type "
     r"'array'"),
])
def test_a_bad_user_tool_stops_parsing_with_an_error_naming_it(bindings, message):
  with pytest.raises(ValueError, match=message):
    plugins.parse_gin([EXAMPLE], bindings)


def test_built_in_tool_names_are_the_specs():
  assert set(plugins.BUILT_IN_TOOLS) == {t.name for s in specs.SPECS.values() for t in s.tools}


def test_the_bindings_written_for_the_slices_give_the_same_tool(config, tmp_path):
  plugins.parse_gin([EXAMPLE], [])
  before = plugins.user_tools()["main"]
  _, gin_path = write_launch_files(config, RunPaths.from_config(config, str(tmp_path)))
  gin.clear_config()
  plugins.parse_gin([str(gin_path)], [])
  assert plugins.user_tools()["main"] == before
  assert before[0].fn(**CONVERT).text == CONVERTED
