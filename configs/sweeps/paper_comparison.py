"""The paper's comparison on this project's world: 6 arms x 3 seeds = 18 runs.

  python launch/sweep.py --sweep=configs/sweeps/paper_comparison.py --parallel=2
  python launch/compare.py --workdir=runs/paper_comparison --group_by=experiment.name

Arms (run names <arm>-s<seed>; the arm is also `experiment.name`, the run name
`experiment.run_id`): the training modes of mgrpo_jax/config/spec.py MODES: mgrpo (both
agents trained, M-GRPO), frozen_sub (only the main agent M is trained), shared_policy
(one model plays M and S), no_alignment (variable sub-call counts are masked instead of
aligned to D slots) and single_agent (one agent with search, visit and reason, no
sub-agent) at two context budgets: M's (`single_agent`: every page it reads costs its
own context, where M reads only S's short reports) and a generous one
(`single_agent_long`, `LONG_CONTEXT` tokens), so that "division of labour" and
"context budget" are measured apart. Every run has the base config's warm-start
budget and RL steps.

The arms mgrpo, frozen_sub and no_alignment of one seed start from the same warm start
(same demonstrations, same fine-tuning), computed once in
`<workdir>/warm_start/multi-s<seed>`; each other arm has its own, with the same budget,
in `<workdir>/warm_start/<arm>-s<seed>` (its demonstrations differ: one model, or one
context budget). The three arms that share a warm start also share its held-out
evaluation (computed by the first; `evaluation.stage.shared_evaluation`), and every run
loads the programs the others compiled from `<workdir>/jax_cache`.
"""

from mgrpo_jax.config.sweep import SHARED_COMPILATION_CACHE, Axis, Run, Sweep, axis, grid

LONG_CONTEXT = 1024
# Rows per update pass at the long budget. Every RL row is padded to the context, and
# XLA attention on a CPU keeps each layer's float32 scores and probabilities
# [rows, heads, T, T] for the backward pass: 64 rows x 8 heads x 1024^2 x 4 B = 2 GiB per
# tensor, so the whole batch at once ran out of memory. Micro-batches of 8 rows
# accumulate the same gradient (up to float rounding) in an eighth of that memory.
LONG_CONTEXT_MICRO_BATCH = 8
# Its rollouts are mostly far shorter than the budget: each RL batch is padded only to
# 128, 256, 512 or 1024 tokens, whichever holds its longest row.
LONG_CONTEXT_SHORTEST = 128
ARMS = Axis((
    ("mgrpo", {"experiment.mode": "mgrpo"}),
    ("frozen_sub", {"experiment.mode": "frozen_sub"}),
    ("single_agent", {"experiment.mode": "single_agent"}),
    ("single_agent_long", {"experiment.mode": "single_agent",
                           "main.limits.max_context": LONG_CONTEXT,
                           "main.optim.micro_batch_size": LONG_CONTEXT_MICRO_BATCH,
                           "main.limits.shortest_train_length": LONG_CONTEXT_SHORTEST}),
    ("shared_policy", {"experiment.mode": "shared_policy"}),
    ("no_alignment", {"experiment.mode": "no_alignment"}),
))
SEEDS = (0, 1, 2)
# Arms whose agents are warm-started alike (M and S, each its own model, full budgets).
MULTI_AGENT_TEAM = ("mgrpo", "frozen_sub", "no_alignment")


def _arm_run(run: Run) -> Run:
  """Names the arm (`experiment.name`) and points the run at its team's warm start."""
  arm = run.name.rsplit("-s", 1)[0]
  team = "multi" if arm in MULTI_AGENT_TEAM else arm
  folder = f"../warm_start/{team}-s{run.overrides['experiment.seed']}"
  return Run(run.name, {**run.overrides, "experiment.name": arm, "warm_start.dir": folder})


def get_sweep() -> Sweep:
  runs = grid(ARMS, axis("experiment.seed", SEEDS, label="s{}"), fixed=SHARED_COMPILATION_CACHE)
  return Sweep(name="paper_comparison", base_config="configs/local_demo.py",
               runs=tuple(_arm_run(run) for run in runs))
