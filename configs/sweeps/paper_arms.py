"""Every arm of the paper's comparison, the team arms and the single agent at the long
budget over 5 seeds (in the core comparison's workdir, so its 9 runs and their warm
starts are reused).

  python launch/sweep.py --sweep=configs/sweeps/paper_arms.py --parallel=2
  python launch/compare.py --workdir=runs/paper_comparison --group_by=experiment.name

Beyond configs/sweeps/paper_comparison.py: the team arms mgrpo, frozen_sub and
no_alignment (S's calls grouped in arrival order, not aligned) and single_agent_long
over seeds 0-4, for paired differences with 5 seeds; the single agent at M's context budget
(`single_agent`, 160 tokens: a three-hop chain's three pages do not fit, which is what
a context budget costs a single agent) and shared_policy (one model plays M and S), 3
seeds each.
"""

import importlib.util
import pathlib

from mgrpo_jax.config.sweep import Sweep

_spec = importlib.util.spec_from_file_location(
    "paper_comparison", pathlib.Path(__file__).with_name("paper_comparison.py"))
comparison = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(comparison)

TEAM_SEEDS = (0, 1, 2, 3, 4)
TEAM_ARMS = ("mgrpo", "frozen_sub", "no_alignment")
OTHER_ARMS = {
    "single_agent": comparison.SINGLE_AGENT,
    "shared_policy": {"experiment.mode": "shared_policy"},
}


def get_sweep() -> Sweep:
  team = comparison.arm_runs({**comparison.ARMS, "no_alignment": {
      "experiment.mode": "no_alignment"}}, TEAM_SEEDS)
  team = tuple(run for run in team if run.name.rsplit("-s", 1)[0] in TEAM_ARMS)
  single_long = comparison.arm_runs(
      {"single_agent_long": comparison.ARMS["single_agent_long"]}, TEAM_SEEDS)
  return Sweep(name=comparison.NAME, base_config="configs/local_demo.py",
               runs=team + single_long + comparison.arm_runs(OTHER_ARMS, comparison.SEEDS))
