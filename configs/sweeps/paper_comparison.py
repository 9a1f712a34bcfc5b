"""The paper's comparison on this project's world: 4 training modes x 3 seeds = 12 runs.

  python launch/sweep.py --sweep=configs/sweeps/paper_comparison.py --parallel=2
  python launch/sweep.py --sweep=configs/sweeps/paper_comparison.py --print_commands

Modes (mgrpo_jax/config/spec.py MODES): mgrpo (both agents trained, M-GRPO), frozen_sub
(only the main agent M is trained), single_agent (one model plays both roles) and
no_alignment (variable sub-call counts are masked instead of aligned to D slots). Every run
has the base config's warm-start budget and RL steps; runs are named <mode>-s<seed>, and
the run name is also experiment.run_id.
"""

from mgrpo_jax.config.sweep import Sweep, axis, grid

MODES = ("mgrpo", "frozen_sub", "single_agent", "no_alignment")
SEEDS = (0, 1, 2)


def get_sweep() -> Sweep:
  return Sweep(
      name="paper_comparison",
      base_config="configs/local_demo.py",
      runs=grid(axis("experiment.mode", MODES), axis("experiment.seed", SEEDS, label="s{}")),
  )
