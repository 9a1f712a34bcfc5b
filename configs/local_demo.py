"""A small, fast run of both slices on one machine: tiny models, the tiny world.

  python launch/tpu_run.py --slice=all --config=configs/local_demo.py

Both agents are the `tiny` preset (random init, a SentencePiece tokenizer trained on
the world's corpus), B=2 queries x K=4 rollouts, D=4 aligned sub-calls, short turn and
context limits, 3 steps. A random model emits malformed turns, so rewards (and hence
advantages) are mostly 0: this exercises the plumbing, not learning.
"""

from mgrpo_jax.config import apply_overrides, base_config

OVERRIDES = {
    "experiment.name": "local_demo",
    "experiment.run_id": "local_demo",
    "experiment.num_steps": 3,
    "world.size": "tiny",
    "world.stage": "stage1",
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
      f"{_agent}.optim.learning_rate": 1e-3,
  })


def get_config(arg=None):
  """The demo config; `arg` must be empty (no presets)."""
  if arg:
    raise ValueError(f"configs/local_demo.py has no presets, got {arg!r}")
  config = base_config()
  apply_overrides(config, OVERRIDES)
  return config
