"""The newcomer's main job: warm start, M-GRPO, held-out evaluation, plots, in minutes.

  python launch/tpu_run.py --slice=all --config=configs/local_demo.py

On 2 CPU cores, from the tiny world (400 train pages, a held-out test world of unseen
entities): the noisy oracles demonstrate training questions spread over 50 training
worlds, and both agents (small models with smeared keys and a SentencePiece tokenizer
trained on the world's corpus, short system prompts) first learn to copy on the copy
curriculum, then are fine-tuned on the demonstrations (stage 1); M-GRPO then trains M
and S from there (stage 2, B queries x K rollouts, D aligned sub-calls); the agents are evaluated on the
test world before and after RL. Outputs under the workdir: metrics.jsonl and TensorBoard
events per slice, report/rewards.png, report/accuracy.png and report/summary.txt (the
table printed at the end).

The paper's comparison runs this config per mode and seed: configs/sweeps/
paper_comparison.py.
"""

from mgrpo_jax.config import apply_overrides, base_config

OVERRIDES = {
    "experiment.name": "local_demo",
    "experiment.run_id": "local_demo",
    "experiment.num_steps": 6,
    "world.size": "tiny",
    "world.stage": "stage1",
    "world.tokenizer_vocab_size": 1024,
    "prompts.system": "short",
    "tools.search_top_n": 2,
    "tools.visit_chars": 300,
    "mgrpo.queries_per_step": 4,
    "mgrpo.rollouts_per_query": 4,
    "mgrpo.aligned_sub_calls": 2,
    "mgrpo.max_sub_calls": 3,
    "warm_start.enabled": True,
    "warm_start.num_questions": 1000,
    "warm_start.num_worlds": 50,
    "warm_start.copy_steps": 300,
    "warm_start.window_copy_steps": 100,
    "warm_start.epochs": 2,
    "warm_start.batch_rows": 16,
    "eval.enabled": True,
    "eval.num_questions": 40,
    "eval.samples": 2,
    "serving.deadline_s": 60.0,
    "logging.tensorboard": True,
}
for _agent, _turns in (("main", 5), ("sub", 4)):
  OVERRIDES.update({
      f"{_agent}.model.preset": "small",
      f"{_agent}.model.smeared_keys": True,
      f"{_agent}.sampling.max_new_tokens": 96,
      f"{_agent}.limits.max_turns": _turns,
      f"{_agent}.limits.max_context": 768,
      f"{_agent}.optim.learning_rate": 3e-4,
      f"{_agent}.optim.weight_decay": 0.0,
  })


def get_config(arg=None):
  """The demo config; `arg` must be empty (no presets)."""
  if arg:
    raise ValueError(f"configs/local_demo.py has no presets, got {arg!r}")
  config = base_config()
  apply_overrides(config, OVERRIDES)
  return config
