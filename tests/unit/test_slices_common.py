"""What both slices share (`slices/common.py`): which steps' metrics are written."""

from mgrpo_jax.config import apply_overrides, base_config
from mgrpo_jax.slices.common import metrics_due


def _due(every: int, num_steps: int) -> list[int]:
  config = base_config()
  apply_overrides(config, {"logging.every": every, "experiment.num_steps": num_steps})
  return [step for step in range(num_steps) if metrics_due(config, step)]


def test_every_step_by_default():
  assert _due(1, 5) == [0, 1, 2, 3, 4]


def test_every_nth_step_and_the_last():
  assert _due(3, 10) == [2, 5, 8, 9]
  assert _due(5, 10) == [4, 9]
  assert _due(20, 10) == [9]
