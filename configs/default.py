"""Default M-GRPO configuration, with presets.

Usage:
  python launch/tpu_run.py --config=configs/default.py            # the defaults
  python launch/tpu_run.py --config=configs/default.py:paper      # the paper's B, K, D
  python launch/tpu_run.py --config=configs/default.py --config.mgrpo.rollouts_per_query=4

Every key, its meaning and its allowed values: mgrpo_jax/config/spec.py.
"""

from mgrpo_jax.config import apply_overrides, base_config

PRESETS = {
    # The paper's group sizes (K = 8 rollouts, D = 8 aligned sub-calls) and the released
    # code's optimizer (Adam lr 1e-6, wd 0.1, betas 0.9/0.98, clip 1.0).
    "paper": {
        "mgrpo.queries_per_step": 2,
        "mgrpo.rollouts_per_query": 8,
        "mgrpo.aligned_sub_calls": 8,
        "main.optim.learning_rate": 1e-6,
        "sub.optim.learning_rate": 1e-6,
    },
    # The released code's reward and advantage choices (docs/ALGORITHM.md sections 2 and 3):
    # R_S = format * (0.1 + 0.9 * correct_M), no expert term.
    "released_code": {
        "rewards.sub_reward": "released",
        "rewards.b1": 0.1,
        "rewards.b2": 0.9,
        "rewards.b3": 0.0,
        "mgrpo.advantage_std": "unbiased",
        "mgrpo.advantage_eps": 1e-6,
    },
}


def get_config(arg=None):
  """Returns the default config, with the named preset applied when `arg` is given."""
  config = base_config()
  if arg:
    if arg not in PRESETS:
      raise ValueError(f"unknown preset {arg!r} for configs/default.py; presets: "
                       f"{', '.join(sorted(PRESETS))}")
    apply_overrides(config, PRESETS[arg])
  return config
