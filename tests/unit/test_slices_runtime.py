"""The numbers of a step both slices read (`slices/runtime.py`, `StepSettings`)."""

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.slices.runtime import StepSettings


def test_step_settings_read_the_config():
  config = base_config()
  apply_overrides(config, {"experiment.seed": 7, "experiment.run_id": "r1",
                           "experiment.num_steps": 4, "mgrpo.queries_per_step": 3,
                           "mgrpo.rollouts_per_query": 5, "mgrpo.aligned_sub_calls": 2,
                           "mgrpo.staleness": 1, "store.wait_timeout_s": 9.5,
                           "mgrpo.advantage_std": "unbiased", "rewards.a1": 0.2})
  settings = StepSettings.from_config(config)
  assert (settings.seed, settings.run_id, settings.num_steps) == (7, "r1", 4)
  assert (settings.num_queries, settings.num_rollouts, settings.num_slots) == (3, 5, 2)
  assert (settings.staleness, settings.wait_timeout_s) == (1, 9.5)
  assert settings.advantage.std == "unbiased" and settings.weights.a1 == 0.2
