"""Rewards of the main agent R_M and of the sub-agent R_S (paper section 3.2).

  R_M = 0 if M's format is invalid, else a1 * r_format + a2 * r_correct     (a1, a2 = 0.1, 0.9)
  R_S = 0 if S's format is invalid, else b1 * r_format + b2 * r_correct^main + b3 * r_expert
                                                                   (b1, b2, b3 = 0.1, 0.4, 0.5)

r_format is 1 whenever the format is valid, so R = format_ok * (weights . terms).
r_correct^main is M's binary correctness replicated to every sub-agent call of the
rollout (the notes' best reading of open question 3); R_S is gated only by S's own format.

R_S presets, registered by name in `SUB_REWARDS` (`rewards.sub_reward` selects one; new
ones: `SUB_REWARDS.register(name)`), each `fn(format_ok, main_correct, expert, *, b1, b2,
b3)`, the signature a gin-bound user R_S has too (`plugins.sub_reward_fn`):
  "paper"     the formula above (`sub_reward`);
  "released"  the released code's, without the expert term: format_ok * (b1 + b2 *
              main_correct), its weights b1, b2 = 0.1, 0.9 and b3 = 0 (`sub_reward_released`).

`RewardWeights` holds a run's `rewards.*` keys: a1, a2, b1..b3 and the R_S preset. Every
reward of a run, in training, evaluation and pages, is computed from them by
`plugins.main_rewards` and `plugins.sub_rewards`.

Inputs broadcast elementwise: to give every slot of `[Q, K, D]` its rollout's
correctness, pass `main_correct[..., None]`. Concrete inputs are range-checked;
outputs are float32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from mgrpo_jax.core import _checks
from mgrpo_jax.core._registry import Registry

SUB_REWARDS = Registry("sub reward")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RewardWeights:
  """alpha_1, alpha_2 of R_M, beta_1..3 of R_S and the R_S preset (keys `rewards.*`).

  The defaults are the paper's, as are the config's.
  """

  a1: float = 0.1
  a2: float = 0.9
  b1: float = 0.1
  b2: float = 0.4
  b3: float = 0.5
  sub_reward: str = "paper"

  @classmethod
  def from_config(cls, rewards: Mapping[str, Any]) -> RewardWeights:
    """The config's `rewards.*` keys, each used as set."""
    weights = {name: float(rewards[name]) for name in ("a1", "a2", "b1", "b2", "b3")}
    return cls(**weights, sub_reward=str(rewards["sub_reward"]))


@jax.jit
def _gated_sum(format_ok: jax.Array, bias: jax.Array, weights: tuple[jax.Array, ...],
               terms: tuple[jax.Array, ...]) -> jax.Array:
  total = jnp.asarray(bias, jnp.float32)
  for weight, term in zip(weights, terms, strict=True):
    total = total + weight * jnp.asarray(term, jnp.float32)
  return jnp.where(jnp.asarray(format_ok).astype(bool), total, 0.0)


def main_reward(format_ok: Any, correct: Any, *, a1: float = 0.1, a2: float = 0.9
                ) -> jax.Array:
  """R_M (paper section 3.2): 0 when M's format is invalid, else a1 + a2 * correct.

  Args:
    format_ok: bool (or 0/1) [...], M's final output has a valid format.
    correct: r_correct in [0, 1] (binary in the paper), broadcastable with format_ok.
    a1: alpha_1, weight of the format term.
    a2: alpha_2, weight of the correctness term.

  Returns:
    float32 array of the broadcast shape.
  """
  format_ok, correct = _checks.as_array(format_ok), _checks.as_array(correct)
  _checks.check_binary(format_ok, "format_ok")
  _checks.check_in_unit_interval(correct, "correct")
  return _gated_sum(format_ok, a1, (a2,), (correct,))


@SUB_REWARDS.register("paper")
def sub_reward(format_ok: Any, main_correct: Any, expert: Any, *, b1: float = 0.1,
               b2: float = 0.4, b3: float = 0.5) -> jax.Array:
  """R_S of one sub-agent call (paper section 3.2).

  Args:
    format_ok: bool (or 0/1) [...], S's trajectory has a valid format.
    main_correct: r_correct^main in [0, 1], M's correctness for the rollout that made
      the call (replicated to each call), broadcastable with format_ok.
    expert: r_expert in [0, 1], a judge's score of S's execution.
    b1: beta_1 (format), b2: beta_2 (M's correctness), b3: beta_3 (expert).

  Returns:
    float32: 0 where the format is invalid, else b1 + b2 * main_correct + b3 * expert.
  """
  format_ok, main_correct, expert = (
      _checks.as_array(x) for x in (format_ok, main_correct, expert))
  _checks.check_binary(format_ok, "format_ok")
  _checks.check_in_unit_interval(main_correct, "main_correct")
  _checks.check_in_unit_interval(expert, "expert")
  return _gated_sum(format_ok, b1, (b2, b3), (main_correct, expert))


@SUB_REWARDS.register("released")
def sub_reward_released(format_ok: Any, main_correct: Any, expert: Any = None, *,
                        b1: float = 0.1, b2: float = 0.9, b3: float = 0.0) -> jax.Array:
  """R_S as the released code computes it: format_ok * (b1 + b2 * main_correct).

  The released code maps M's total reward {0, 0.1, 1.0} to correctness and has no expert
  term: `expert` is accepted (and ignored) so that the presets share one signature, and
  b3 must be 0.

  Returns:
    float32: 0 where the format is invalid, else b1 (M wrong) or b1 + b2 (M right):
    0.1 or 1.0 with the released code's weights.

  Raises:
    ValueError: b3 is not 0.
  """
  del expert
  if b3 != 0:
    raise ValueError(f"the released R_S has no expert term: b3 must be 0, got {b3}")
  format_ok, main_correct = _checks.as_array(format_ok), _checks.as_array(main_correct)
  _checks.check_binary(format_ok, "format_ok")
  _checks.check_in_unit_interval(main_correct, "main_correct")
  return _gated_sum(format_ok, b1, (b2,), (main_correct,))


__all__ = [
    "SUB_REWARDS",
    "RewardWeights",
    "main_reward",
    "sub_reward",
    "sub_reward_released",
]
