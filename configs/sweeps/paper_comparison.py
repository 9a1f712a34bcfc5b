"""The paper's core comparison on this project's world: 3 arms x 3 seeds = 9 runs.

  python launch/sweep.py --sweep=configs/sweeps/paper_comparison.py --parallel=2
  python launch/compare.py --workdir=runs/paper_comparison --group_by=experiment.name

Arms (run names <arm>-s<seed>; the arm is also `experiment.name`, the run name
`experiment.run_id`): mgrpo (both agents trained, M-GRPO), frozen_sub (only the main
agent M is trained; the paper's "main-only") and single_agent_long (one agent with
search, visit and reason, no sub-agent, at a context of `LONG_CONTEXT` tokens, so that
every page it reads fits). Every run has the demo's RL steps.

The two team arms of one seed start from the same warm start (same demonstrations, same
fine-tuning), computed once in `<workdir>/warm_start/multi-s<seed>`, and share its
held-out evaluation (`evaluation.stage.shared_evaluation`). The single agent has its own
warm start in `<workdir>/warm_start/<arm>-s<seed>`, fine-tuned on as many demonstrated
tokens as M's and S's together (`warm_start.budget=team_tokens`: about 1.8 times the
team's questions, the same epochs), at the warm-start rate chosen for it on the
validation split (`SINGLE_AGENT_WARM_START_RATE`, docs/RESULTS.md). Every run loads the
programs the others compiled from `<workdir>/jax_cache`.

The other tables of docs/RESULTS.md run in the same workdir, so they reuse these runs
and warm starts: configs/sweeps/paper_arms.py (every arm, the team arms over 5 seeds)
and configs/sweeps/synchronization.py (staleness and the unsynchronized arm).
"""

from mgrpo_jax.config.sweep import SHARED_COMPILATION_CACHE, Axis, Run, Sweep, axis, grid

NAME = "paper_comparison"
LONG_CONTEXT = 1024
# Rows per update pass at the long budget. Every RL row is padded to its length bucket,
# and XLA attention on a CPU keeps each layer's float32 scores and probabilities
# [rows, heads, T, T] for the backward pass: 64 rows x 8 heads x 1024^2 x 4 B = 2 GiB per
# tensor, so the whole batch at once ran out of memory. Micro-batches of 8 rows
# accumulate the same gradient (up to float rounding) in an eighth of that memory.
LONG_CONTEXT_MICRO_BATCH = 8
# Its rollouts are mostly far shorter than the budget: each RL batch is padded only to
# 128, 256, 512 or 1024 tokens, whichever holds its longest row.
LONG_CONTEXT_SHORTEST = 128
# The single agent's warm-start learning rate (its SFT's peak, cosine-decayed as the
# team's), chosen on the validation split among 1e-3, 3e-3 and 1e-2 (docs/RESULTS.md).
SINGLE_AGENT_WARM_START_RATE = 3e-3
SINGLE_AGENT = {"experiment.mode": "single_agent", "warm_start.budget": "team_tokens",
                "warm_start.learning_rate": SINGLE_AGENT_WARM_START_RATE}
ARMS = {
    "mgrpo": {"experiment.mode": "mgrpo"},
    "frozen_sub": {"experiment.mode": "frozen_sub"},
    "single_agent_long": {**SINGLE_AGENT, "main.limits.max_context": LONG_CONTEXT,
                          "main.optim.micro_batch_size": LONG_CONTEXT_MICRO_BATCH,
                          "main.limits.shortest_train_length": LONG_CONTEXT_SHORTEST},
}
CORE_ARMS = ("mgrpo", "frozen_sub", "single_agent_long")
# The warm start's passes over the demonstrations in every run of docs/RESULTS.md's
# comparison tables: the demo's before it went to 12 (configs/local_demo.py), kept so
# that these commands give those tables.
WARM_START_EPOCHS = {"warm_start.epochs": 6}
SEEDS = (0, 1, 2)
# Arms warm-started alike (M and S, each its own model, the same demonstrations), which
# share one warm start per seed.
MULTI_AGENT_TEAM = ("mgrpo", "frozen_sub", "no_alignment", "unsynchronized")


def arm_run(run: Run, arm: str, team: str) -> Run:
  """`run` named as the arm `arm` (`experiment.name`), started from `team`'s warm start."""
  folder = f"../warm_start/{team}-s{run.overrides['experiment.seed']}"
  return Run(run.name, {**run.overrides, "experiment.name": arm, "warm_start.dir": folder})


def arm_runs(arms: dict[str, dict], seeds) -> tuple[Run, ...]:
  """Each arm for each seed, named <arm>-s<seed>, the team arms on the team's warm start."""
  runs = grid(Axis(tuple(arms.items())), axis("experiment.seed", seeds, label="s{}"),
              fixed={**SHARED_COMPILATION_CACHE, **WARM_START_EPOCHS})
  out = []
  for run in runs:
    arm = run.name.rsplit("-s", 1)[0]
    out.append(arm_run(run, arm, "multi" if arm in MULTI_AGENT_TEAM else arm))
  return tuple(out)


def get_sweep() -> Sweep:
  return Sweep(name=NAME, base_config="configs/local_demo.py",
               runs=arm_runs({arm: ARMS[arm] for arm in CORE_ARMS}, SEEDS))
