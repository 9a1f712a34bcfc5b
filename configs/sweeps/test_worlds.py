"""The demo on two more held-out test worlds (`world.test_seed` 2 and 3; the demo's is 1),
each with its own warm start (its demonstration worlds avoid that test world's names).

  python launch/sweep.py --sweep=configs/sweeps/test_worlds.py --parallel=2
"""

from mgrpo_jax.config.sweep import SHARED_COMPILATION_CACHE, Sweep, axis, grid

TEST_SEEDS = (2, 3)


def get_sweep() -> Sweep:
  return Sweep(name="test_worlds", base_config="configs/local_demo.py",
               runs=grid(axis("world.test_seed", TEST_SEEDS, label="test_world{}"),
                         fixed=SHARED_COMPILATION_CACHE))
