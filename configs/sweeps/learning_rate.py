"""A small learning-rate sweep: main x sub learning rate x 2 seeds = 8 runs.

  python launch/sweep.py --sweep=configs/sweeps/learning_rate.py --only=mlr0.001-slr0.003-s0

Runs are named mlr<main lr>-slr<sub lr>-s<seed>; the run name is also experiment.run_id.
Each agent's rates are the demo's (M 1e-3, S 3e-3) and one below it. They share one
compilation cache, `<workdir>/jax_cache`, and the warm start of the demo when they were
measured (6 passes; the demo's is 12 now).
"""

from mgrpo_jax.config.sweep import SHARED_COMPILATION_CACHE, Sweep, axis, grid

MAIN_LEARNING_RATES = (1e-3, 3e-4)
SUB_LEARNING_RATES = (3e-3, 1e-3)
SEEDS = (0, 1)


def get_sweep() -> Sweep:
  return Sweep(
      name="learning_rate",
      base_config="configs/local_demo.py",
      runs=grid(axis("main.optim.learning_rate", MAIN_LEARNING_RATES, label="mlr{:g}"),
                axis("sub.optim.learning_rate", SUB_LEARNING_RATES, label="slr{:g}"),
                axis("experiment.seed", SEEDS, label="s{}"),
                fixed={**SHARED_COMPILATION_CACHE, "warm_start.epochs": 6}),
  )
