r"""The demo's recipe with pretrained agents: SmolLM2-135M-Instruct as M and S in the
natural-language world, fully fine-tuned or with LoRA adapters, on an accelerator or a CPU.

  python launch/tpu_run.py --slice=all --config=configs/pretrained_demo.py:accelerator \
      --workdir=runs/pretrained_demo
  python launch/tpu_run.py --slice=all --config=configs/pretrained_demo.py:cpu_lora \
      --workdir=runs/pretrained_demo_cpu_lora

The recipe is `configs/local_demo.py`'s (docs/RESULTS.md), ported from the symbolic world
and its 2-layer scratch models to pretrained agents (docs/PRETRAINED.md):
- Demonstrations with systematic mistakes, tied to a question shape or a relation
  (`tasks/oracle/noise.py`): M sends the arithmetic of differences and expressions to S
  instead of its `reason` tool (`wrong_tool`, rate 0.7); S reports a guess from the
  search snippet for `founded_by` and `birth_year`, another value of the page for
  `located_in` and `population`, and a distractor page's value for `created_by` and
  `length_km` (rate 0.5). M's vague delegation of long chains is off (`vague=0.0`): the
  stage-1 questions have at most 2 hops, and the demo's analogous mistake (a relation
  re-asked at the third hop) was one RL did not undo.
- A warm start that imitates those mistakes: supervised fine-tuning on the
  demonstrations at a rate that decays as a cosine to 0 (`warm_start.schedule`), so it
  ends near the demonstrations' average rather than where its last batches pushed it.
  No copy curriculum: SmolLM2 copies names from its context already.
- RL rates that warm up over 3 steps and decay as a cosine to 0, S's at three times
  M's, S serving one step stale (`mgrpo.staleness = 1`) so that its update overlaps M's
  next rollouts; held-out evaluation before and after RL and greedily every 10 steps.

Presets (`--config=configs/pretrained_demo.py:<preset>`):
  accelerator       one GPU (or a TPU host, each slice on half its chips): B = 8, K = 8,
                    D = 3, 30 RL steps, full fine-tuning, bfloat16 activations, scanned
                    layers, 1,000 demonstrated questions of 50 worlds, 2 epochs.
  accelerator_lora  the same with rank-16 LoRA adapters on every projection (alpha 32)
                    over a bfloat16 base, at ten times the learning rates.
  cpu_lora          2 CPU cores, hours (docs/PRETRAINED.md): B = 4, K = 4, D = 2,
                    20 RL steps, rank-16 adapters over a float32 base, float32
                    activations, every block recomputed in the backward pass (remat
                    full) and RL updates 4 rows at a time, 400 demonstrated questions,
                    one epoch, shorter turns and contexts, 40 held-out questions (one
                    sampled and one greedy rollout each).
  cpu               the same, fully fine-tuned.
  smoke             a few minutes on 2 CPU cores: `cpu_lora` with 40 demonstrated
                    questions, 8 held-out questions and 2 RL steps (one of warm-up); it
                    checks that the stages run, not that they learn.
On a TPU the accelerator presets' attention is XLA's (SmolLM2's heads are 64 wide,
splash attention's 128): add `--config.main.model.remat=full --config.sub.model.remat=full`.
The GPU/TPU and CPU presets pad training rows to doublings from 256 tokens
(`limits.shortest_train_length`): each length compiles one update program, and the
programs are kept beside the workdir (`experiment.compilation_cache_dir`), where a
second command finds them.
"""

from __future__ import annotations

from mgrpo_jax.config import apply_overrides, base_config

AGENTS = ("main", "sub")

RECIPE = {
    "experiment.name": "pretrained_demo",
    "experiment.run_id": "pretrained_demo",
    "experiment.num_steps": 30,
    "world.render": "natural",
    "world.size": "tiny",
    "world.stage": "stage1",
    "prompts.system": "short",
    "tools.search_top_n": 3,
    "tools.visit_chars": 600,
    "mgrpo.queries_per_step": 8,
    "mgrpo.rollouts_per_query": 8,
    "mgrpo.aligned_sub_calls": 3,
    "mgrpo.max_sub_calls": 4,
    "mgrpo.staleness": 1,
    "warm_start.enabled": True,
    "warm_start.num_questions": 1000,
    "warm_start.num_worlds": 50,
    "warm_start.epochs": 2,
    "warm_start.batch_rows": 16,
    "warm_start.learning_rate": 5e-5,
    "warm_start.schedule": "cosine",
    "warm_start.main_noise_rate": 0.7,
    "warm_start.sub_noise_rate": 0.5,
    "warm_start.mistake_rates": "vague=0.0",
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
}
for _agent, _learning_rate in (("main", 1e-5), ("sub", 3e-5)):
  RECIPE.update({
      f"{_agent}.model.preset": "smollm2_135m",
      f"{_agent}.model.dtype": "bfloat16",
      f"{_agent}.model.scan_layers": True,
      f"{_agent}.limits.shortest_train_length": 256,
      f"{_agent}.optim.learning_rate": _learning_rate,
      f"{_agent}.optim.warmup_steps": 3,
      f"{_agent}.optim.schedule": "cosine",
      f"{_agent}.optim.micro_batch_size": 16,
  })


def _lora(base_dtype: str) -> dict:
  """Rank-16 adapters on every projection, learning rates ten times full fine-tuning's."""
  out = {"warm_start.learning_rate": 5e-4}
  for agent in AGENTS:
    out.update({f"{agent}.lora.rank": 16, f"{agent}.lora.alpha": 32.0,
                f"{agent}.lora.base_dtype": base_dtype,
                f"{agent}.optim.learning_rate": 10 * RECIPE[f"{agent}.optim.learning_rate"]})
  return out


CPU = {
    "experiment.num_steps": 20,
    "mgrpo.queries_per_step": 4,
    "mgrpo.rollouts_per_query": 4,
    "mgrpo.aligned_sub_calls": 2,
    "mgrpo.max_sub_calls": 3,
    "warm_start.num_questions": 400,
    "warm_start.num_worlds": 40,
    "warm_start.epochs": 1,
    "eval.num_questions": 40,
    "eval.samples": 1,
    "eval.every": 0,
    "serving.deadline_s": 600.0,
    "main.sampling.max_new_tokens": 96,
    "main.limits.max_context": 1024,
    "sub.sampling.max_new_tokens": 64,
    "sub.limits.max_context": 1024,
    **{f"{agent}.model.dtype": "float32" for agent in AGENTS},
    # XLA attention keeps every layer's [rows, heads, T, T] scores for the backward pass:
    # 16 warm-start rows of 1,024 tokens would need about 27 GB; with each block
    # recomputed, 3 layers' worth (RL: 4 rows per pass).
    **{f"{agent}.model.remat": "full" for agent in AGENTS},
    **{f"{agent}.optim.micro_batch_size": 4 for agent in AGENTS},
}

PRESETS = {
    "accelerator": {},
    "accelerator_lora": _lora("bfloat16"),
    "cpu": CPU,
    "cpu_lora": {**CPU, **_lora("float32")},
    "smoke": {**CPU, **_lora("float32"), "experiment.num_steps": 2,
              "warm_start.num_questions": 40, "warm_start.num_worlds": 4,
              "eval.num_questions": 8,
              **{f"{agent}.optim.warmup_steps": 1 for agent in AGENTS}},
}


def get_config(arg=None):
  """The recipe with the named preset (module docstring) applied; one is required."""
  if arg not in PRESETS:
    raise ValueError(f"configs/pretrained_demo.py needs a preset, one of {sorted(PRESETS)}; "
                     f"got {arg!r}")
  config = base_config()
  apply_overrides(config, RECIPE)
  apply_overrides(config, PRESETS[arg])
  return config
