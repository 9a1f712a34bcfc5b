"""configs/smollm2_deep_research.py: its presets validate and hold the documented values."""

from __future__ import annotations

import functools
import importlib.util
import pathlib

import pytest

from mgrpo_jax.config import ConfigError, validate
from mgrpo_jax.scale.planner import plan_from_config
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup

CONFIG_FILE = pathlib.Path(__file__).resolve().parents[2] / "configs" / "smollm2_deep_research.py"
AGENTS = ("main", "sub")
GIB = 2**30
# Peak GiB of one SmolLM2 update measured on one H200 (bfloat16 activations, float32
# state), keyed by (rows per pass, T): the attention scores every layer keeps make it
# grow as rows x T^2.
MEASURED_PEAK_GIB = {(1, 1024): 5.88, (1, 1536): 9.70, (1, 2048): 14.84, (1, 4096): 52.16,
                     (2, 4096): 102.78}


def _peak_bound_gib(rows: int, length: int) -> float:
  """An upper bound of the measured peaks: 3 GiB + 3.1e-6 GiB per row and token^2."""
  return 3.0 + 3.1e-6 * rows * length**2


def _module():
  spec = importlib.util.spec_from_file_location("smollm2_deep_research", CONFIG_FILE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.fixture(scope="module")
def module():
  return _module()


@pytest.mark.parametrize("preset", [None, "tpu_v5e_8", "cpu_smoke"])
def test_config_and_presets_validate_with_both_agents_on_smollm2(module, preset):
  config = module.get_config(preset)
  validate(config)
  for agent in AGENTS:
    section = config[agent]
    assert section.model.preset == "smollm2_135m"
    assert section.model.preset in agent_setup.PRETRAINED  # loaded with its own weights
    assert section.model.tokenizer == ""  # ... and its own tokenizer
    assert section.model.init_checkpoint == ""
    # The released code's optimizer and clipped surrogate (docs/ALGORITHM.md section 5).
    assert section.optim.learning_rate == 1e-6
    assert (section.optim.weight_decay, section.optim.b1, section.optim.b2) == (0.1, 0.9, 0.98)
    assert section.optim.grad_clip == 1.0 and section.optim.schedule == "constant"
    assert (section.loss.clip_low, section.loss.clip_high) == (0.2, 0.28)
    assert section.loss.ratio == "token" and section.loss.kl_coef == 0.0
    assert section.sampling.temperature == 1.0
    # A turn must fit the context (`AgentLimits` rejects max_new_tokens >= context).
    assert section.sampling.max_new_tokens < section.limits.max_context <= 8192
  limits = agent_setup.rollout_config(config)
  assert limits.max_sub_calls == config.mgrpo.max_sub_calls >= config.mgrpo.aligned_sub_calls


def test_default_is_the_papers_group_sizes_in_bfloat16_on_one_device(module):
  config = module.get_config()
  assert (config.mgrpo.queries_per_step, config.mgrpo.rollouts_per_query,
          config.mgrpo.aligned_sub_calls, config.mgrpo.max_sub_calls) == (2, 8, 8, 8)
  assert config.experiment.mode == "mgrpo"
  assert config.world.size == "small" and config.world.stage == "stage1"
  for agent in AGENTS:
    assert config[agent].model.dtype == "bfloat16" and config[agent].model.scan_layers
    assert config[agent].limits.max_context == 4096
    assert tuple(config[agent].mesh.values()) == (1, 1, 1)


def test_cpu_smoke_runs_two_tiny_steps_in_float32(module):
  config = module.get_config("cpu_smoke")
  assert config.experiment.num_steps == 2 and config.world.size == "tiny"
  assert (config.mgrpo.queries_per_step, config.mgrpo.rollouts_per_query,
          config.mgrpo.aligned_sub_calls) == (1, 2, 1)
  assert config.experiment.run_id != module.get_config().experiment.run_id
  for agent in AGENTS:
    section = config[agent]
    assert section.model.dtype == "float32"
    assert section.sampling.max_new_tokens == 16 and section.limits.max_turns == 1
    assert section.limits.max_context <= 384  # every training row is padded to it
    assert section.optim.micro_batch_size == 0


def test_gpu_demo_warm_starts_and_evaluates_pretrained_agents_on_one_device(module):
  """The demo's job for SmolLM2 (tools/accelerator_demo.sh): its own RL learning rate,
  the rest of the released code's optimizer, rows padded to doublings from 256."""
  config = module.get_config("gpu_demo")
  validate(config)
  assert config.warm_start.enabled and config.eval.enabled and config.eval.every == 10
  assert config.world.size == "tiny" and config.world.render == "natural"
  assert config.warm_start.copy_steps == 0  # pretrained models copy already
  assert config.experiment.run_id != module.get_config().experiment.run_id
  for agent in AGENTS:
    section = config[agent]
    assert section.model.preset in agent_setup.PRETRAINED and section.model.tokenizer == ""
    assert section.optim.learning_rate == 1e-5 and section.optim.weight_decay == 0.1
    assert section.loss.ratio == "token" and section.loss.kl_coef == 0.0
    assert section.limits.shortest_train_length == 256
    assert section.sampling.max_new_tokens < section.limits.max_context <= 8192
    assert tuple(section.mesh.values()) == (1, 1, 1)
  # Both slices share one GPU, each with 45% of its memory (slices/child_env.py): with
  # cuDNN attention each agent's update and rollouts fit that share of an 80 GB GPU.
  for plan in plan_from_config(config, platform="gpu"):
    assert max(plan.train_peak, plan.rollout_peak) <= 0.45 * 80 * GIB, plan.role


@pytest.mark.parametrize("preset, devices, hbm_gib", [(None, 1, 80), ("tpu_v5e_8", 8, 16)])
def test_accelerator_presets_fit_their_chips_by_the_memory_planner(module, preset, devices,
                                                                  hbm_gib):
  config = module.get_config(preset)
  for plan in plan_from_config(config):
    mesh = plan.mesh
    assert mesh.size == devices
    rows, micro = plan.workload.train_rows, plan.workload.micro_batch_size
    assert micro and rows % micro == 0, (plan.role, rows, micro)
    assert micro % (mesh.data * mesh.fsdp) == 0  # each pass splits evenly over the rows
    assert max(plan.train_peak, plan.rollout_peak) <= hbm_gib * GIB, plan.role
    rows_per_device = micro // (mesh.data * mesh.fsdp)
    assert _peak_bound_gib(rows_per_device, plan.workload.seq_len) <= 0.9 * hbm_gib, plan.role
  sub_rows = (config.mgrpo.queries_per_step * config.mgrpo.rollouts_per_query
              * config.mgrpo.aligned_sub_calls)
  assert plan_from_config(config, ("sub",))[0].workload.train_rows == sub_rows


def test_the_peak_bound_covers_every_measurement():
  for (rows, length), peak in MEASURED_PEAK_GIB.items():
    assert peak <= _peak_bound_gib(rows, length) <= 1.25 * peak, (rows, length)


def test_every_preset_is_documented_and_an_unknown_one_is_named(module):
  for name in module.PRESETS:
    assert f"\n  {name} " in module.__doc__, name
  with pytest.raises(ValueError, match=r"unknown preset 'tpu'.*cpu_smoke, gpu_demo, tpu_v5e_8"):
    module.get_config("tpu")


def test_smeared_keys_are_refused_for_pretrained_weights(module, tmp_path):
  """Pretrained checkpoints have no key-smear parameters: the error names the key before
  any weights are read (at start, and again where the model is built)."""
  config = module.get_config("cpu_smoke")
  config.sub.model.smeared_keys = True
  with pytest.raises(ConfigError, match=r"'sub\.model\.smeared_keys': .*'smollm2_135m'"):
    validate(config)
  with pytest.raises(ValueError, match=r"sub\.model\.smeared_keys: .*smollm2_135m"):
    agent_setup.build_model(AgentSetup.from_config(config, "sub"),
                            functools.partial(agent_setup.world_tokenizer, tmp_path,
                                              TokenizerSetup.from_config(config)))
