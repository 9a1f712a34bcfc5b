"""`warm_start.mistake_rates` reaches the agent whose mistake it names, or fails naming
the key."""

from __future__ import annotations

import pytest

from mgrpo_jax.config import apply_overrides, base_config, validate
from mgrpo_jax.tasks.world_setup import NoiseSettings, WorldSetup, noisy_oracles


def _config(render: str, mistake_rates: str):
  config = base_config()
  apply_overrides(config, {"world.render": render, "world.size": "tiny",
                           "warm_start.main_noise_rate": 0.7,
                           "warm_start.sub_noise_rate": 0.4,
                           "warm_start.mistake_rates": mistake_rates})
  validate(config)
  return config


def _noisy_oracles(config, seed: int):
  return noisy_oracles(WorldSetup.from_config(config), NoiseSettings.from_config(config), seed)


@pytest.mark.parametrize("render, main_name, sub_name", [
    ("symbolic", "wrong_relation", "neighbour_value"),
    ("natural", "vague", "wrong_page"),
])
def test_each_override_goes_to_its_own_agent(render, main_name, sub_name):
  main, sub = _noisy_oracles(_config(render, f"{sub_name}=0.1, {main_name}=0.25"), seed=3)
  assert (main.noise.rate, main.noise.seed, main.noise.rates) == (0.7, 3,
                                                                  ((main_name, 0.25),))
  assert (sub.noise.rate, sub.noise.seed, sub.noise.rates) == (0.4, 3, ((sub_name, 0.1),))


def test_a_mistake_of_the_other_world_is_refused():
  with pytest.raises(ValueError, match=r"warm_start\.mistake_rates: unknown mistake 'vague';"
                     r" this world's mistakes are \['neighbour_value', 'wrong_relation', "
                     r"'wrong_tool'\]"):
    _noisy_oracles(_config("symbolic", "vague=0.5"), seed=0)
