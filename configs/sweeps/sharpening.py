"""What sharpens the team's sampled policy: arms chosen on the validation split (50
questions of the training world, 4 samples each), never on the test world, from the
comparison's 6-pass warm start of the team (seed 0), in the core comparison's workdir.
`val_epochs12` is what the demo took (12 passes, docs/RESULTS.md).

  python launch/sweep.py --sweep=configs/sweeps/sharpening.py --parallel=2
  python launch/compare.py --workdir=runs/paper_comparison --group_by=experiment.name

  val_demo       the 6-pass demo, evaluated on the validation split (the reference)
  val_sub_mu2    S takes two optimizer steps on each RL batch (`sub.optim.iterations=2`,
                 both against the sampler's log-probs, so the clip bounds how far they
                 move S): S's sampled reports are what the chains lose
  val_k16        16 rollouts per question and 4 questions a step (`mgrpo.rollouts_per_query
                 =16`, `queries_per_step=4`): the same 64 rollouts a step, groups in which
                 a rare sampled failure is seen and pushed down more often
  val_steps120   120 RL steps instead of 80 (the rates' cosine stretched over them): 80
                 instead of 40 gave +0.14 sampled on this split
  val_t1.25, val_t1.5  both agents sample RL's rollouts at temperature 1.25 or 1.5 (and
                 the update scores them there: pi_T is the policy RL improves), and are
                 evaluated at temperature 1 (`eval.temperature`): a token of the tail that
                 RL sees more often is pushed down more often, and logits sharp enough at
                 T > 1 are sharper at 1
  val_small      both agents twice as wide (`model.preset=small`: 128 wide, MLP 384, 2
                 layers) with their own warm start: whether the tail is what 64 widths
                 can resolve; `val_small_half` the same at half the demo's RL rates
  val_epochs12   the warm start's SFT twice as long (`warm_start.epochs=12`, its own warm
                 start): the sampled failures are copies at probabilities below 0.01, the
                 residue of the SFT's NLL, which RL's 80 steps lower slowly
  val_epochs12_b32  the same 12 epochs in batches of 32 rows (`warm_start.batch_rows=32`):
                 as many SFT steps as the demo's, each on twice the rows
  val_no_copy    no copy curriculum before the SFT (`warm_start.copy_steps=0`, its own
                 warm start): what its 200 steps (33 s of the demo) are worth
"""

import importlib.util
import pathlib

from mgrpo_jax.config.sweep import Sweep

_spec = importlib.util.spec_from_file_location(
    "paper_comparison", pathlib.Path(__file__).with_name("paper_comparison.py"))
comparison = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(comparison)

VALIDATION = {"experiment.mode": "mgrpo", "eval.split": "validation", "eval.samples": 4}
ARMS = {
    "val_demo": VALIDATION,
    "val_sub_mu2": {**VALIDATION, "sub.optim.iterations": 2},
    "val_k16": {**VALIDATION, "mgrpo.rollouts_per_query": 16, "mgrpo.queries_per_step": 4},
    "val_steps120": {**VALIDATION, "experiment.num_steps": 120},
    **{f"val_t{t:g}": {**VALIDATION, "main.sampling.temperature": t,
                       "sub.sampling.temperature": t, "eval.temperature": 1.0}
       for t in (1.25, 1.5)},
    "val_small": {**VALIDATION, "main.model.preset": "small", "sub.model.preset": "small"},
}
ARMS["val_small_half"] = {**ARMS["val_small"], "main.optim.learning_rate": 5e-4,
                          "sub.optim.learning_rate": 1.5e-3}
ARMS["val_epochs12"] = {**VALIDATION, "warm_start.epochs": 12}
ARMS["val_epochs12_b32"] = {**ARMS["val_epochs12"], "warm_start.batch_rows": 32}
ARMS["val_no_copy"] = {**VALIDATION, "warm_start.copy_steps": 0}
# Arms of another model or warm start than the demo's, and the warm start each starts from.
OWN_WARM_START = {"val_small": "val_small", "val_small_half": "val_small",
                  "val_epochs12": "val_epochs12", "val_epochs12_b32": "val_epochs12_b32",
                  "val_no_copy": "val_no_copy"}


def _from_its_warm_start(run):
  """`run` started from the team's warm start, or from its arm's in OWN_WARM_START."""
  arm = run.overrides["experiment.name"]
  return comparison.arm_run(run, arm, OWN_WARM_START.get(arm, "multi"))


def get_sweep() -> Sweep:
  runs = tuple(_from_its_warm_start(run) for run in comparison.arm_runs(ARMS, (0,)))
  return Sweep(name=comparison.NAME, base_config="configs/local_demo.py", runs=runs)
