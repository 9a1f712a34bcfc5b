"""Property: every config `validate` accepts builds both agents' plans, as `--dry_run` does.

Hypothesis draws overrides of the keys that shape the agents (presets, meshes, batch
sizes, contexts, schedules, losses) over values that break things (a micro-batch that
does not divide the batch, a turn longer than the context, a cosine schedule that never
decays, NaN); a config `validate` accepts must then plan every agent through
`planner.plan_from_config`, the function `launch/tpu_run.py --dry_run` calls, and one
it refuses must say which key.
"""

from __future__ import annotations

import jax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgrpo_jax.config import ConfigError, apply_overrides, base_config, validate
from mgrpo_jax.scale.planner import plan_from_config

jax.config.update("jax_platforms", "cpu")  # abstract shapes only, as the dry run


def _agent(role: str) -> dict[str, st.SearchStrategy]:
  return {
      f"{role}.model.preset": st.sampled_from(["tiny", "small"]),
      f"{role}.model.smeared_keys": st.booleans(),
      f"{role}.model.scan_layers": st.booleans(),
      f"{role}.model.dtype": st.sampled_from(["float32", "bfloat16"]),
      f"{role}.limits.max_context": st.sampled_from([24, 64, 256]),
      f"{role}.sampling.max_new_tokens": st.sampled_from([1, 8, 16]),
      f"{role}.optim.micro_batch_size": st.sampled_from([0, 1, 2, 4, 3]),
      f"{role}.optim.schedule": st.sampled_from(["constant", "cosine"]),
      f"{role}.optim.warmup_steps": st.sampled_from([0, 2]),
      f"{role}.loss.clip_ratio_c": st.sampled_from([0.0, 3.0]),
      f"{role}.mesh.data": st.integers(1, 4),
      f"{role}.mesh.fsdp": st.integers(1, 3),
      f"{role}.mesh.tensor": st.sampled_from([1, 2, 3, 8]),
  }


# At most one value that breaks a rule, on top of the drawn config (None: keep it).
_BREAKERS = st.one_of(st.none(), st.sampled_from([
    ("main.optim.learning_rate", float("nan")), ("sub.loss.clip_high", float("inf")),
    ("main.sampling.max_new_tokens", 300), ("sub.sampling.max_new_tokens", 256),
    ("main.optim.b2", 1.0), ("sub.loss.clip_ratio_c", 1.0), ("main.optim.micro_batch_size", 7),
    ("sub.optim.warmup_steps", 40), ("mgrpo.max_sub_calls", 1), ("experiment.run_id", "a/b"),
]))

_OVERRIDES = st.fixed_dictionaries({
    "experiment.mode": st.sampled_from(["mgrpo", "frozen_sub", "single_agent",
                                        "shared_policy", "no_alignment"]),
    "experiment.num_steps": st.sampled_from([3, 40]),
    "mgrpo.queries_per_step": st.integers(1, 3),
    "mgrpo.rollouts_per_query": st.integers(2, 4),
    "mgrpo.aligned_sub_calls": st.integers(1, 3),
    "mgrpo.max_sub_calls": st.integers(3, 4),
    **_agent("main"), **_agent("sub"),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides=_OVERRIDES, breaker=_BREAKERS)
def test_a_config_that_validates_plans_every_agent(overrides, breaker):
  if breaker is not None:
    overrides = {**overrides, breaker[0]: breaker[1]}
  config = base_config()
  apply_overrides(config, overrides)
  try:
    validate(config)
  except ConfigError as e:
    assert any(f"'{key}'" in str(e) for key in overrides), str(e)
    return
  plans = plan_from_config(config, ("main", "sub"))
  assert [plan.role for plan in plans] == ["main", "sub"]
  for plan in plans:
    assert plan.parameters > 0 and plan.workload.seq_len == config[plan.role].limits.max_context


@pytest.mark.parametrize("overrides", [
    {"main.sampling.max_new_tokens": 64, "main.limits.max_context": 24},
    {"sub.optim.micro_batch_size": 3},
    {"main.optim.schedule": "cosine", "main.optim.warmup_steps": 50},
])
def test_the_property_sees_configs_that_validate_refuses(overrides):
  """The strategy reaches the refused region (else the property would be vacuous)."""
  config = base_config()
  apply_overrides(config, overrides)
  with pytest.raises(ConfigError):
    validate(config)
