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
  like `mgrpo_jax.core.rewards.sub_reward` (e.g. [Q, K, D]).
"""

from __future__ import annotations

from collections.abc import Callable

import gin


@gin.configurable(module="mgrpo_jax.plugins")
def main_reward_fn(fn: Callable | None = None) -> Callable:
  """Returns the main agent's reward function: the gin-bound `fn`, else the paper's R_M."""
  if fn is not None:
    return fn
  from mgrpo_jax.core import rewards

  return rewards.main_reward


@gin.configurable(module="mgrpo_jax.plugins")
def sub_reward_fn(fn: Callable | None = None) -> Callable:
  """Returns the sub-agent's reward function: the gin-bound `fn`, else the paper's R_S."""
  if fn is not None:
    return fn
  from mgrpo_jax.core import rewards

  return rewards.sub_reward


def parse_gin(files: list[str], bindings: list[str]) -> None:
  """Loads gin files, then bindings (later ones win); errors name the file or binding."""
  gin.parse_config_files_and_bindings(files, bindings, finalize_config=False)
