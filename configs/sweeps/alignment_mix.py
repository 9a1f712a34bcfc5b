"""Alignment where it acts: the delegation mix (configs/local_demo.py:delegations: 1-6 S
calls per rollout), 4 ways to batch S's calls x 2 values of D x 3 seeds = 24 runs.

  python launch/sweep.py --sweep=configs/sweeps/alignment_mix.py --parallel=2
  python launch/compare.py --workdir=runs/alignment_mix --group_by=experiment.name

  duplicate_drop-d<D>  the paper's alignment: calls of a rollout duplicated up to D, or D
                       of them kept (`mgrpo.alignment=duplicate_drop`)
  duplicate_call-d<D>  the paper's alignment and statistics, each kept call weighing 1 in
                       S's loss instead of its number of slots
                       (`mgrpo.duplicate_weight=call`): separates the two parts of
                       duplication, the group's mean and std and the loss's weights
  mask-d<D>            the paper's masking alternative: missing slots empty
  no_alignment-d<D>    S's calls in arrival order, groups of K*D consecutive calls

D = 6 bounds the calls of the demonstrations (the paper's P(calls <= D) ~ 0.99); D = 3
drops calls of the lists of 4-6 entities. All arms of a seed share one warm start.
"""

from mgrpo_jax.config.sweep import SHARED_COMPILATION_CACHE, Axis, Run, Sweep, axis, grid

SLOTS = (6, 3)
SEEDS = (0, 1, 2)
BATCHING = {
    "duplicate_drop": {"experiment.mode": "mgrpo", "mgrpo.alignment": "duplicate_drop"},
    "duplicate_call": {"experiment.mode": "mgrpo", "mgrpo.alignment": "duplicate_drop",
                       "mgrpo.duplicate_weight": "call"},
    "mask": {"experiment.mode": "mgrpo", "mgrpo.alignment": "mask"},
    "no_alignment": {"experiment.mode": "no_alignment"},
}


def _named(run: Run) -> Run:
  arm = run.name.rsplit("-s", 1)[0]
  folder = f"../warm_start/delegations-s{run.overrides['experiment.seed']}"
  return Run(run.name, {**run.overrides, "experiment.name": arm, "warm_start.dir": folder})


def get_sweep() -> Sweep:
  arms = Axis(tuple((f"{name}-d{d}", {**overrides, "mgrpo.aligned_sub_calls": d})
                    for d in SLOTS for name, overrides in BATCHING.items()))
  runs = grid(arms, axis("experiment.seed", SEEDS, label="s{}"), fixed=SHARED_COMPILATION_CACHE)
  return Sweep(name="alignment_mix", base_config="configs/local_demo.py:delegations",
               runs=tuple(_named(run) for run in runs))
