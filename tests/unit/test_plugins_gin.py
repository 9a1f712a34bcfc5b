"""gin injects a user-supplied reward function without editing the package; every reward
goes through `plugins.main_rewards` / `plugins.sub_rewards` with the config's weights."""

import sys
import textwrap

import numpy as np
import pytest

from mgrpo_jax import plugins
from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.core.rewards import RewardWeights

pytestmark = pytest.mark.usefixtures("clean_gin")


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
  """A user's own module, outside the package, registering a reward with gin.

  Module-scoped: gin refuses to register the same configurable twice in a process.
  """
  tmp_path = tmp_path_factory.mktemp("user")
  (tmp_path / "user_rewards.py").write_text(textwrap.dedent("""
      import gin
      import numpy as np

      @gin.configurable
      def all_or_nothing(format_ok, correct, *, a1, a2):
        del a1, a2
        return np.where(np.asarray(format_ok) & np.asarray(correct), 2.0, -1.0)

      @gin.configurable
      def expert_only(format_ok, main_correct, expert, *, b1, b2, b3):
        del format_ok, main_correct, b1, b2
        return b3 * np.asarray(expert)
      """))
  sys.path.insert(0, str(tmp_path))
  yield tmp_path
  sys.path.remove(str(tmp_path))


def test_default_rewards_are_the_papers_and_the_presets():
  from mgrpo_jax.core import rewards

  assert plugins.main_reward_fn() is rewards.main_reward
  assert plugins.sub_reward_fn() is rewards.sub_reward
  assert plugins.sub_reward_fn("released") is rewards.sub_reward_released
  assert plugins.bound_rewards() == {}


def test_the_one_path_computes_the_papers_rewards():
  r_main = plugins.main_rewards(np.array([[True, True, False]]), np.array([[1.0, 0.0, 1.0]]),
                                RewardWeights())
  assert r_main.dtype == np.float32 and r_main.shape == (1, 3)
  np.testing.assert_array_equal(r_main, np.float32([[1.0, 0.1, 0.0]]))
  fmt, correct, expert = np.array([1, 1, 1, 0]), np.array([1, 1, 0, 1]), np.array(
      [1.0, 0.5, 0.0, 1.0])
  np.testing.assert_allclose(plugins.sub_rewards(fmt, correct, expert, RewardWeights()),
                             [1.0, 0.75, 0.1, 0.0], rtol=1e-6)
  released = RewardWeights(b1=0.1, b2=0.9, b3=0.0, sub_reward="released")
  np.testing.assert_allclose(plugins.sub_rewards(fmt, correct, expert, released),
                             [1.0, 1.0, 0.1, 0.0], rtol=1e-6)


def test_the_configs_reward_keys_reach_the_rewards():
  config = base_config()
  apply_overrides(config, {"rewards.a1": 0.3, "rewards.a2": 0.6, "rewards.b1": 0.2,
                           "rewards.b2": 0.3, "rewards.b3": 0.4})
  weights = RewardWeights.from_config(config.rewards)
  np.testing.assert_allclose(plugins.main_rewards(np.array([1, 1, 0]),
                                                  np.array([0.0, 1.0, 1.0]), weights),
                             [0.3, 0.9, 0.0], rtol=1e-6)
  np.testing.assert_allclose(
      plugins.sub_rewards(np.array([1, 1]), np.array([1, 0]), np.array([0.5, 1.0]), weights),
      [0.2 + 0.3 + 0.4 * 0.5, 0.2 + 0.4], rtol=1e-6)
  apply_overrides(config, {"rewards.sub_reward": "released", "rewards.b3": 0.0})
  released = RewardWeights.from_config(config.rewards)
  np.testing.assert_allclose(
      plugins.sub_rewards(np.array([1, 1]), np.array([1, 0]), np.array([0.5, 1.0]), released),
      [0.5, 0.2], rtol=1e-6)


def test_a_bound_sub_reward_replaces_the_preset(user_module):
  plugins.parse_gin([], ["import user_rewards",
                         "mgrpo_jax.plugins.sub_reward_fn.fn = @user_rewards.expert_only"])
  expert = np.array([0.5, 1.0])
  for preset in ("paper", "released"):
    weights = RewardWeights(b3=0.4, sub_reward=preset)
    np.testing.assert_allclose(plugins.sub_rewards(np.array([1, 0]), np.array([1, 1]),
                                                   expert, weights), [0.2, 0.4], rtol=1e-6)
  assert plugins.bound_rewards() == {
      "mgrpo_jax.plugins.sub_reward_fn.fn": "user_rewards.expert_only"}


def test_the_preset_is_the_configs_not_a_gin_binding():
  with pytest.raises(ValueError, match="preset"):
    plugins.parse_gin([], ["mgrpo_jax.plugins.sub_reward_fn.preset = 'released'"])


def test_gin_file_binding_replaces_the_main_reward(user_module):
  gin_file = user_module / "rewards.gin"
  gin_file.write_text("import user_rewards\n"
                      "mgrpo_jax.plugins.main_reward_fn.fn = @user_rewards.all_or_nothing\n")
  plugins.parse_gin([str(gin_file)], [])
  fn = plugins.main_reward_fn()
  got = fn(np.array([True, True, False]), np.array([True, False, True]), a1=0.1, a2=0.9)
  np.testing.assert_array_equal(got, [2.0, -1.0, -1.0])
  got = plugins.main_rewards(np.array([True, True, False]), np.array([True, False, True]),
                             RewardWeights())
  assert got.dtype == np.float32
  np.testing.assert_array_equal(got, [2.0, -1.0, -1.0])
  assert plugins.bound_rewards() == {
      "mgrpo_jax.plugins.main_reward_fn.fn": "user_rewards.all_or_nothing"}


def test_binding_string_wins_over_file(user_module):
  gin_file = user_module / "rewards.gin"
  gin_file.write_text("import user_rewards\n"
                      "mgrpo_jax.plugins.main_reward_fn.fn = @user_rewards.all_or_nothing\n")
  plugins.parse_gin([str(gin_file)], ["mgrpo_jax.plugins.main_reward_fn.fn = None"])
  from mgrpo_jax.core import rewards

  assert plugins.main_reward_fn() is rewards.main_reward


def test_unknown_configurable_is_an_error_naming_it():
  with pytest.raises(ValueError, match="no_such_component"):
    plugins.parse_gin([], ["no_such_component.fn = 1"])
