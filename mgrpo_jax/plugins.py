"""Components a user can replace with gin, without editing the package.

A user writes their function in their own module, registers it with
`@gin.configurable`, and binds it in a gin file passed with `--gin_file`:

    # my_rewards.gin
    import my_project.rewards
    mgrpo_jax.plugins.main_reward_fn.fn = @my_project.rewards.strict_reward

Replaceable components and the signature each must have:
- `main_reward_fn`: R_M as `fn(format_ok, correct, *, a1, a2) -> array`, like
  `mgrpo_jax.core.rewards.main_reward` (arrays of any shape, e.g. [Q, K]).
- `sub_reward_fn`: R_S as `fn(format_ok, main_correct, expert, *, b1, b2, b3) -> array`,
  like the presets of `mgrpo_jax.core.rewards.SUB_REWARDS` (e.g. [Q, K, D]); a bound one
  replaces the preset `rewards.sub_reward` names.
- `answer_judge`: r_correct of M's answers, a `mgrpo_jax.tasks.judges.AnswerJudge`:
  `judge(task, prediction) -> 0/1` (`task.text`, `task.answer`), optionally with
  `judge.batch(items) -> [score]` over `AnswerItem`s (asked once per batch of records);
  a bound one replaces the judge `rewards.answer_judge` names.
- `expert_judge`: r_expert of S's reports, a `mgrpo_jax.tasks.judges.ExpertJudge`:
  `judge(task, subtask, report) -> [0, 1]`, optionally with `judge.batch(items)` over
  `ReportItem`s (which carry the evidence S read); it replaces `rewards.expert_judge`'s.
  Bind a function (`@my_project.judges.lenient`) or an instance (`@my_project.MyJudge()`):

    mgrpo_jax.plugins.answer_judge.fn = @my_project.judges.lenient
- `user_tools`: extra tools of M (`main`), S (`sub`) or the single agent (`single`),
  each a factory `() -> mgrpo_jax.tools.Tool` (name, description, JSON schema of
  its keyword arguments, function returning a str or a `ToolResult`):

    mgrpo_jax.plugins.user_tools.main = [@my_project.tools.word_count_tool]

Every reward of a run, in training, evaluation and the trajectory pages, goes through
`main_rewards` and `sub_rewards`, which call the reward functions with the config's
weights (`core.rewards.RewardWeights`): a bound function is used everywhere, and so is
a bound judge (`training.judge_setup`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gin
import numpy as np

from mgrpo_jax.tools import Tool, check_tool

if TYPE_CHECKING:
  from mgrpo_jax.core.rewards import RewardWeights

# The tools the agents have without gin (agents/specs.py); a user tool may not take a name.
BUILT_IN_TOOLS = ("delegate", "reason", "search", "visit")
TOOL_ROLES = ("main", "sub", "single")
ToolFactory = Callable[[], Tool]


@gin.configurable(module="mgrpo_jax.plugins")
def main_reward_fn(fn: Callable | None = None) -> Callable:
  """Returns the main agent's reward function: the gin-bound `fn`, else the paper's R_M."""
  if fn is not None:
    return fn
  from mgrpo_jax.core import rewards

  return rewards.main_reward


@gin.configurable(module="mgrpo_jax.plugins", denylist=["preset"])
def sub_reward_fn(preset: str = "paper", fn: Callable | None = None) -> Callable:
  """Returns the sub-agent's reward function: the gin-bound `fn`, else the R_S preset
  named `preset` (`core.rewards.SUB_REWARDS`; the config's `rewards.sub_reward`, not gin,
  chooses it)."""
  if fn is not None:
    return fn
  from mgrpo_jax.core import rewards

  return rewards.SUB_REWARDS.get(preset)


@gin.configurable(module="mgrpo_jax.plugins")
def answer_judge(fn: Callable | None = None) -> Callable | None:
  """The gin-bound answer judge, else None (the config's `rewards.answer_judge` decides)."""
  return fn


@gin.configurable(module="mgrpo_jax.plugins")
def expert_judge(fn: Callable | None = None) -> Callable | None:
  """The gin-bound expert judge, else None (the config's `rewards.expert_judge` decides)."""
  return fn


def bound_rewards() -> dict[str, str]:
  """{binding: module.name} of each reward function and judge bound with gin, e.g.
  {"mgrpo_jax.plugins.main_reward_fn.fn": "my_project.rewards.strict_reward"} ({} when
  none is): what a run's rewards depend on besides its config."""
  from mgrpo_jax.core import rewards

  built_in = {rewards.main_reward,
              *(rewards.SUB_REWARDS.get(name) for name in rewards.SUB_REWARDS.names())}
  fns = {"main_reward_fn": main_reward_fn(), "sub_reward_fn": sub_reward_fn(),
         "answer_judge": answer_judge(), "expert_judge": expert_judge()}
  return {f"mgrpo_jax.plugins.{name}.fn": _qualified_name(fn)
          for name, fn in fns.items()
          if fn is not None and all(fn is not b for b in built_in)}


def _qualified_name(obj: Any) -> str:
  """module.name of a function or class, or of an instance's class."""
  named = obj if hasattr(obj, "__qualname__") else type(obj)
  return f"{named.__module__}.{named.__qualname__}"


def main_rewards(format_ok: Any, correct: Any, weights: RewardWeights) -> np.ndarray:
  """R_M float32 [...] of M's rollouts through `main_reward_fn`: the one path of R_M.

  Args:
    format_ok: bool [...], M's trajectory has a valid format (e.g. [Q, K]).
    correct: r_correct float [...], the same shape.
    weights: the run's `rewards.*`; a1, a2 (alpha_1, alpha_2) are passed on.
  """
  fn = main_reward_fn()
  return np.asarray(fn(format_ok, correct, a1=weights.a1, a2=weights.a2), np.float32)


def sub_rewards(format_ok: Any, main_correct: Any, expert: Any, weights: RewardWeights
                ) -> np.ndarray:
  """R_S float32 [...] of S's calls through `sub_reward_fn`: the one path of R_S.

  Args:
    format_ok: bool [...], S's trajectory has a valid format (e.g. [N] calls).
    main_correct: r_correct^main float [...], the correctness of the rollout that made
      each call.
    expert: r_expert float [...], the judge's score of each call.
    weights: the run's `rewards.*`; the preset `sub_reward` is used unless a function is
      bound, and b1, b2, b3 (beta_1..3) are passed on.
  """
  fn = sub_reward_fn(weights.sub_reward)
  return np.asarray(fn(format_ok, main_correct, expert, b1=weights.b1, b2=weights.b2,
                       b3=weights.b3), np.float32)


@gin.configurable(module="mgrpo_jax.plugins")
def user_tools(main: Sequence[ToolFactory] = (), sub: Sequence[ToolFactory] = (),
               single: Sequence[ToolFactory] = ()) -> dict[str, tuple[Tool, ...]]:
  """Each agent role's user tools, in the order bound; a factory bound to several roles
  is called once and gives them the same tool.

  Raises:
    ValueError naming the binding (e.g. `mgrpo_jax.plugins.user_tools.main[0]`) when a
    factory is not callable, raises, or returns no valid `Tool`, or when its tool's name
    is a built-in tool's or another factory's, or is bound twice to one role.
  """
  made: dict[str, tuple[ToolFactory, Tool, str]] = {}  # tool name -> (factory, tool, binding)
  out = {}
  for role, factories in zip(TOOL_ROLES, (main, sub, single), strict=True):
    tools: list[Tool] = []
    for index, factory in enumerate(factories):
      binding = f"mgrpo_jax.plugins.user_tools.{role}[{index}]"
      tool = _made_by(factory, made) or _make_tool(factory, binding, made)
      if tool.name in (t.name for t in tools):
        raise ValueError(f"{binding}: tool {tool.name!r} is bound to {role} twice")
      tools.append(tool)
    out[role] = tuple(tools)
  return out


def _made_by(factory: ToolFactory, made: dict[str, tuple[ToolFactory, Tool, str]]
             ) -> Tool | None:
  """The tool `factory` already made for another role, else None."""
  return next((tool for maker, tool, _ in made.values() if maker is factory), None)


def _make_tool(factory: ToolFactory, binding: str,
               made: dict[str, tuple[ToolFactory, Tool, str]]) -> Tool:
  """`factory()`, checked (`user_tools`) and recorded in `made` under its name."""
  if not callable(factory):
    raise ValueError(f"{binding}: got a {type(factory).__name__}, not a factory; bind the "
                     "function returning a Tool (@f), not its result (@f())")
  name = getattr(factory, "__name__", repr(factory))
  try:
    tool = factory()
  except Exception as e:  # noqa: BLE001 - any error of user code is reported as one line
    raise ValueError(f"{binding}: {name}() raised {type(e).__name__}: {e}") from e
  if not isinstance(tool, Tool):
    raise ValueError(f"{binding}: {name}() returned {type(tool).__name__}, not a "
                     "mgrpo_jax.tools.Tool")
  problem = check_tool(tool)
  if problem:
    raise ValueError(f"{binding}: {name}(): {problem}")
  if tool.name in BUILT_IN_TOOLS:
    raise ValueError(f"{binding}: tool {tool.name!r} collides with a built-in tool "
                     f"({', '.join(BUILT_IN_TOOLS)})")
  if tool.name in made:
    raise ValueError(f"{binding}: tool {tool.name!r} collides with the tool of "
                     f"{made[tool.name][2]}")
  made[tool.name] = (factory, tool, binding)
  return tool


def all_user_tools() -> tuple[Tool, ...]:
  """Every role's user tools, each once: what the registries executing calls add."""
  return tuple({tool.name: tool for tools in user_tools().values() for tool in tools}.values())


def parse_gin(files: list[str], bindings: list[str]) -> None:
  """Loads gin files, then bindings (later ones win); errors name the file or binding.

  The user tools are made once here, so a bad one stops a run before it starts, with
  its error's first line (gin adds the configurable's name on a second one).
  """
  gin.parse_config_files_and_bindings(files, bindings, finalize_config=False)
  try:
    user_tools()
  except ValueError as e:
    raise ValueError(str(e).splitlines()[0]) from None
