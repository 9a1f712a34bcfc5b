"""The trainer tests' config: both slices with tiny random models, no warm start, no evaluation.

  python launch/tpu_run.py --slice=all --config=tests/support/plumbing_config.py

It tests the decoupled training system (processes, sockets, store, checkpoints, exact
resume), not learning, so it stays fixed while `configs/local_demo.py` (the demo) is
tuned: the tiny world, `tiny` models, full system prompts, B=2, K=4, D=4, 3 steps, RL batches
padded to doublings of 64 tokens.
The training questions come from eight worlds (`world.train_worlds`), so every trainer
test also routes tool calls and r_expert by question, across the slices' socket.
"""

from mgrpo_jax.config import apply_overrides, base_config

OVERRIDES = {
    "experiment.name": "local_demo",
    "experiment.run_id": "local_demo",
    "experiment.num_steps": 3,
    "world.size": "tiny",
    "world.stage": "stage1",
    "world.train_worlds": 8,
    "world.tokenizer_vocab_size": 1024,
    "mgrpo.queries_per_step": 2,
    "mgrpo.rollouts_per_query": 4,
    "mgrpo.aligned_sub_calls": 4,
    "mgrpo.max_sub_calls": 4,
    "serving.deadline_s": 60.0,
    "logging.tensorboard": True,
}
for _agent in ("main", "sub"):
  OVERRIDES.update({
      f"{_agent}.model.preset": "tiny",
      f"{_agent}.sampling.max_new_tokens": 16,
      f"{_agent}.limits.max_turns": 3,
      f"{_agent}.limits.max_context": 1024,
      # RL batches padded to the doubling of 64 that holds their longest row, not to
      # max_context: on CPU an update of 8 rows at T = 1024 costs 20 times one at 256.
      f"{_agent}.limits.shortest_train_length": 64,
      f"{_agent}.optim.learning_rate": 1e-3,
  })


def get_config(arg=None):
  """The trainer tests' config; `arg` must be empty."""
  if arg:
    raise ValueError(f"plumbing_config.py has no presets, got {arg!r}")
  config = base_config()
  apply_overrides(config, OVERRIDES)
  return config
