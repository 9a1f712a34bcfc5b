"""The paper's synchronization ablation (its section 5.3.3, Fig. 8): how stale S's data
may be, 5 arms x 3 seeds, in the core comparison's workdir (the team's warm starts and
mgrpo's runs, staleness 1, are reused).

  python launch/sweep.py --sweep=configs/sweeps/synchronization.py --parallel=2
  python launch/compare.py --workdir=runs/paper_comparison --group_by=experiment.name

  staleness<s>     M-GRPO whose sub-agent serves weights up to s steps older than its
                   trainer's (`mgrpo.staleness`; the demo's 1 is the mgrpo arm), s = 0, 2, 4
  unsynchronized   S trains on the B*K oldest calls of a FIFO of earlier steps' calls, in
                   groups of K consecutive calls whatever their query (the released
                   code's FIFO; `experiment.mode=unsynchronized`, slices/sub_queue.py)
"""

import importlib.util
import pathlib

from mgrpo_jax.config.sweep import Sweep

_spec = importlib.util.spec_from_file_location(
    "paper_comparison", pathlib.Path(__file__).with_name("paper_comparison.py"))
comparison = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(comparison)

STALENESS = (0, 2, 4)
ARMS = {
    **{f"staleness{s}": {"experiment.mode": "mgrpo", "mgrpo.staleness": s,
                         "checkpoint.keep": max(2, s + 1)} for s in STALENESS},
    "unsynchronized": {"experiment.mode": "unsynchronized"},
}


def get_sweep() -> Sweep:
  runs = comparison.arm_runs(ARMS, comparison.SEEDS)
  # Every arm here is the team's M and S: they start from its warm start.
  runs = tuple(comparison.arm_run(run, run.overrides["experiment.name"], "multi")
               for run in runs)
  return Sweep(name=comparison.NAME, base_config="configs/local_demo.py", runs=runs)
