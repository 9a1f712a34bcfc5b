"""configs/pretrained_demo.py: every preset validates and holds the demo's recipe; the
LoRA presets' agents train adapters only, which the planner sizes."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from mgrpo_jax.config import validate
from mgrpo_jax.scale.planner import plan_from_config

CONFIG_FILE = pathlib.Path(__file__).resolve().parents[2] / "configs" / "pretrained_demo.py"
AGENTS = ("main", "sub")


@pytest.fixture(scope="module")
def module():
  spec = importlib.util.spec_from_file_location("pretrained_demo", CONFIG_FILE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize("preset", ["accelerator", "accelerator_lora", "cpu", "cpu_lora",
                                    "smoke"])
def test_presets_validate_and_hold_the_recipe(module, preset):
  config = module.get_config(preset)
  validate(config)
  assert config.world.render == "natural" and config.warm_start.enabled
  assert config.warm_start.schedule == "cosine"  # the warm start's rate decays to 0
  assert (config.warm_start.main_noise_rate, config.warm_start.sub_noise_rate) == (0.7, 0.5)
  assert config.mgrpo.staleness == 1
  for agent in AGENTS:
    section = config[agent]
    assert section.model.preset == "smollm2_135m"
    assert section.optim.schedule == "cosine"
    assert section.optim.warmup_steps == (1 if preset == "smoke" else 3)
    assert section.limits.shortest_train_length == 256
    assert (section.lora.rank > 0) == preset.endswith("lora") or preset == "smoke"
  assert config.sub.optim.learning_rate == pytest.approx(3 * config.main.optim.learning_rate)
  if preset.startswith("cpu") or preset == "smoke":
    # XLA attention on a CPU: every block recomputed, RL 4 rows per pass, so that a
    # SmolLM2 update of 1,024-token rows fits next to the other agent's process.
    assert config.main.model.dtype == "float32"
    for agent in AGENTS:
      assert config[agent].model.remat == "full" and config[agent].optim.micro_batch_size == 4


def test_a_preset_is_required(module):
  with pytest.raises(ValueError, match="needs a preset"):
    module.get_config(None)


def test_the_lora_preset_trains_about_4_percent_of_the_parameters(module):
  """Rank 16 on every projection of SmolLM2-135M: 4.9M of 134.5M parameters train; the
  optimizer state shrinks in proportion and the bfloat16 base halves the parameters."""
  full, lora = (plan_from_config(module.get_config(p), ("main",), platform="gpu")[0]
                for p in ("accelerator", "accelerator_lora"))
  assert lora.optimizer == pytest.approx(full.optimizer * 4.88e6 / 134.5e6, rel=0.02)
  assert lora.parameters < 0.55 * full.parameters
  assert lora.train_peak < full.train_peak
