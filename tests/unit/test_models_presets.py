"""The published shapes: every preset is selectable in the config, and each pretrained
family's preset has the parameter count its model card states."""

from __future__ import annotations

import pytest

from mgrpo_jax.config.spec import MODEL_PRESETS
from mgrpo_jax.models import PRESETS

# Parameters as the model cards state them, rounded there to two or three digits.
PUBLISHED = {
    "smollm2_135m": 135e6, "smollm2_360m": 362e6, "smollm2_1_7b": 1.71e9,
    "qwen3_0_6b": 0.6e9, "qwen3_1_7b": 1.7e9, "qwen3_4b": 4.0e9, "qwen3_8b": 8.2e9,
    "qwen3_14b": 14.8e9, "qwen3_32b": 32.8e9,
    "qwen2_5_0_5b": 0.49e9, "qwen2_5_1_5b": 1.54e9, "qwen2_5_3b": 3.09e9,
    "qwen2_5_7b": 7.61e9, "qwen2_5_14b": 14.7e9, "qwen2_5_32b": 32.5e9,
    "llama3_2_1b": 1.24e9, "llama3_2_3b": 3.21e9, "llama3_1_8b": 8.03e9,
}


def test_every_model_preset_is_a_config_choice():
  assert set(MODEL_PRESETS) == set(PRESETS)
  assert set(PUBLISHED) == set(PRESETS) - {"tiny", "small"}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_has_the_published_parameter_count(name):
  assert PRESETS[name].num_params == pytest.approx(PUBLISHED[name], rel=0.03)


def test_family_features():
  assert all(PRESETS[n].qk_norm and PRESETS[n].head_dim == 128 for n in PRESETS
             if n.startswith("qwen3"))
  assert all(PRESETS[n].qkv_bias and not PRESETS[n].qk_norm for n in PRESETS
             if n.startswith("qwen2_5"))
  assert all(PRESETS[n].rope_scaling is not None for n in PRESETS if n.startswith("llama3"))
