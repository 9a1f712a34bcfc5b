"""The paper's comparison on this project's world: 4 training modes x 3 seeds = 12 runs.

  python launch/sweep.py --sweep=configs/sweeps/paper_comparison.py --parallel=2
  python launch/sweep.py --sweep=configs/sweeps/paper_comparison.py --print_commands

Modes (mgrpo_jax/config/spec.py MODES): mgrpo (both agents trained, M-GRPO), frozen_sub
(only the main agent M is trained), single_agent (one agent with search, visit and
reason, no sub-agent) and no_alignment (variable sub-call counts are masked instead of
aligned to D slots). Every run has the base config's warm-start budget and RL steps; runs
are named <mode>-s<seed>, and the run name is also experiment.run_id.

The three multi-agent modes of one seed start from the same warm start (same
demonstrations, same fine-tuning), computed once in `<workdir>/warm_start/multi-s<seed>`;
the single agent's, with the same budget, in `<workdir>/warm_start/single-s<seed>`.
"""

from mgrpo_jax.config.sweep import Run, Sweep, axis, grid

MODES = ("mgrpo", "frozen_sub", "single_agent", "no_alignment")
SEEDS = (0, 1, 2)


def _shared_warm_start(run: Run) -> Run:
  team = "single" if run.overrides["experiment.mode"] == "single_agent" else "multi"
  folder = f"../warm_start/{team}-s{run.overrides['experiment.seed']}"
  return Run(run.name, {**run.overrides, "warm_start.dir": folder})


def get_sweep() -> Sweep:
  runs = grid(axis("experiment.mode", MODES), axis("experiment.seed", SEEDS, label="s{}"))
  return Sweep(name="paper_comparison", base_config="configs/local_demo.py",
               runs=tuple(_shared_warm_start(run) for run in runs))
