"""The numbers of a step both slices read (`slices/runtime.py`, `StepSettings`)."""

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.core.rewards import RewardWeights
from mgrpo_jax.slices.runtime import StepSettings
from mgrpo_jax.training.agent_config import train_lengths


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
  assert settings.credit.advantage.std == "unbiased" and settings.credit.weights.a1 == 0.2


def test_reward_weights_are_the_configs():
  config = base_config()
  assert StepSettings.from_config(config).credit.weights == RewardWeights(
      a1=0.1, a2=0.9, b1=0.1, b2=0.4, b3=0.5, sub_reward="paper")
  apply_overrides(config, {"rewards.b1": 0.2, "rewards.b2": 0.3, "rewards.b3": 0.25})
  weights = StepSettings.from_config(config).credit.weights
  assert (weights.b1, weights.b2, weights.b3) == (0.2, 0.3, 0.25)


def test_train_lengths_pad_to_the_context_unless_a_shortest_length_is_set():
  config = base_config()
  apply_overrides(config, {"main.limits.max_context": 1024, "sub.limits.max_context": 160,
                           "sub.limits.shortest_train_length": 64})
  assert train_lengths(config.main.limits) == (1024,)
  assert train_lengths(config.sub.limits) == (64, 128, 160)
  apply_overrides(config, {"main.limits.shortest_train_length": 128})
  assert train_lengths(config.main.limits) == (128, 256, 512, 1024)
