"""gin injects a user-supplied reward function without editing the package."""

import sys
import textwrap

import numpy as np
import pytest

from mgrpo_jax import plugins

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
      """))
  sys.path.insert(0, str(tmp_path))
  yield tmp_path
  sys.path.remove(str(tmp_path))


def test_default_main_reward_is_the_papers():
  from mgrpo_jax.core import rewards

  assert plugins.main_reward_fn() is rewards.main_reward
  assert plugins.sub_reward_fn() is rewards.sub_reward


def test_gin_file_binding_replaces_the_main_reward(user_module):
  gin_file = user_module / "rewards.gin"
  gin_file.write_text("import user_rewards\n"
                      "mgrpo_jax.plugins.main_reward_fn.fn = @user_rewards.all_or_nothing\n")
  plugins.parse_gin([str(gin_file)], [])
  fn = plugins.main_reward_fn()
  got = fn(np.array([True, True, False]), np.array([True, False, True]), a1=0.1, a2=0.9)
  np.testing.assert_array_equal(got, [2.0, -1.0, -1.0])


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
