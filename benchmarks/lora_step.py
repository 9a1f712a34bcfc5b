"""LoRA against full fine-tuning of one agent: step time, peak memory, checkpoint size.

SmolLM2-135M-Instruct (its GGUF weights, `models/weights/fetch.py`) takes the same
update in two subprocesses, one after the other, so each one's peak RSS is its own:
  full   every parameter trains (`<agent>.lora.rank` 0: the framework's default);
  lora   rank-r adapters on the `--targets` projections (default all seven), alpha 2r,
         the base frozen in `--base-dtype` (`<agent>.lora.*`).
The update is the trainer's (`training.make_update_fn`: forward, clipped policy loss,
backward, clipping, AdamW; one jitted, donated program) on the same random batch as
`benchmarks/train_step.py` (N x T tokens, float32 activations, 1-device mesh). The
first step (compile) is reported apart; step s is the median of the timed steps. After
them each side saves its train state with the agent's checkpointer (orbax), whose
folder size is reported: the adapters and their AdamW moments against every weight and
its moments.

  .venv/bin/python benchmarks/lora_step.py [--rank 16] [--targets q,k,v,o,gate,up,down]
      [--base-dtype float32|bfloat16] [--repeats 3] [--batch 8] [--seq 256]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import sys
import tempfile

import numpy as np
from bench_timing import timed_updates
from train_step import REPO_ROOT, make_batch, side_results


def run_side(rank: int, targets: str, base_dtype: str, batch_file: str, repeats: int,
             checkpoint_dir: str) -> dict:
  """One side's update (module docstring), in this process."""
  sys.path.insert(0, str(REPO_ROOT))
  import jax
  import jax.numpy as jnp

  from mgrpo_jax.models import load_model
  from mgrpo_jax.models.config import LoraConfig
  from mgrpo_jax.models.lora import with_lora
  from mgrpo_jax.training import (
      AgentCheckpointer,
      MeshConfig,
      OptimizerConfig,
      TrainBatch,
      UpdateConfig,
      create_mesh,
      create_train_state,
      make_optimizer,
      make_update_fn,
  )

  dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[base_dtype]
  model = load_model("smollm2_135m", param_dtype=dtype)
  if rank:
    model = with_lora(model, LoraConfig(rank, 2.0 * rank, tuple(targets.split(","))), seed=0)
  mesh = create_mesh(MeshConfig(), jax.devices()[:1])
  state, layout = create_train_state(model, make_optimizer(OptimizerConfig()), mesh, seed=0)
  del model
  batch = dict(np.load(batch_file))
  n = batch["ids"].shape[0]
  update = make_update_fn(layout, UpdateConfig(), n)
  train_batch = TrainBatch(weights=np.ones(n, np.float32), **batch)
  state, first_s, times, metrics = timed_updates(update, state, train_batch, repeats)
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
  with AgentCheckpointer(checkpoint_dir, layout) as checkpointer:
    checkpointer.save(state, force=True)
  folder = pathlib.Path(checkpoint_dir)
  return {"first_s": first_s, "times": times, "loss": float(metrics["loss"]),
          "peak_rss_gb": peak,
          "trained": sum(x.size for x in jax.tree.leaves(state.params)),
          "checkpoint_mb": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
          / 2**20}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rank", type=int, default=16)
  parser.add_argument("--targets", default="q,k,v,o,gate,up,down")
  parser.add_argument("--base-dtype", default="float32", choices=("float32", "bfloat16"))
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--seq", type=int, default=256)
  parser.add_argument("--prompt", type=int, default=64)
  parser.add_argument("--side-rank", type=int, help=argparse.SUPPRESS)
  parser.add_argument("--batch-file", help=argparse.SUPPRESS)
  parser.add_argument("--checkpoint-dir", help=argparse.SUPPRESS)
  parser.add_argument("--out", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.side_rank is not None:
    base = args.base_dtype if args.side_rank else "float32"
    result = run_side(args.side_rank, args.targets, base, args.batch_file, args.repeats,
                      args.checkpoint_dir)
    pathlib.Path(args.out).write_text(json.dumps(result))
    return

  results = {}
  with tempfile.TemporaryDirectory() as tmp:
    batch_file = pathlib.Path(tmp) / "batch.npz"
    np.savez(batch_file, **make_batch(49152, args.batch, args.seq, args.prompt))
    for side, rank in (("full", 0), ("lora", args.rank)):
      results[side] = side_results(
          pathlib.Path(sys.executable),
          ["--side-rank", str(rank), "--targets", args.targets, "--base-dtype",
           args.base_dtype, "--batch-file", str(batch_file), "--repeats", str(args.repeats),
           "--checkpoint-dir", str(pathlib.Path(tmp) / side)],
          pathlib.Path(tmp) / f"{side}.json", script=__file__)

  print(f"SmolLM2-135M-Instruct update, f32 activations, CPU {os.cpu_count()} cores; batch "
        f"{args.batch} x {args.seq}; median of {args.repeats} steps after the first; LoRA "
        f"rank {args.rank} alpha {2 * args.rank} on {args.targets}, base {args.base_dtype}")
  print(f"{'side':<6}{'trained':>12}{'first s':>9}{'step s':>8}{'peak RSS GiB':>14}"
        f"{'checkpoint MiB':>16}{'loss@1':>10}")
  for side, r in results.items():
    print(f"{side:<6}{r['trained']:>12,}{r['first_s']:>9.1f}{statistics.median(r['times']):>8.2f}"
          f"{r['peak_rss_gb']:>14.2f}{r['checkpoint_mb']:>16.1f}{r['loss']:>10.5f}")
  full, lora = results["full"], results["lora"]
  step = statistics.median(lora["times"]) / statistics.median(full["times"])
  print(f"lora / full: step time {step:.2f}x, peak RSS "
        f"{lora['peak_rss_gb'] / full['peak_rss_gb']:.2f}x, checkpoint "
        f"{lora['checkpoint_mb'] / full['checkpoint_mb']:.1%}")


if __name__ == "__main__":
  main()
