"""Benchmark: warm-start SFT steps with glibc's huge-page tunable against without it.

The same work twice, each in a fresh process: `--steps` SFT steps (`sft.sft`,
the demo's `small` model with smeared keys, 16 rows x `--seq` tokens of random ids, a
third of each row prompt) after one compiling step, once with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (`mgrpo_jax/utils/host_memory.py`) and once with
glibc.malloc.hugetlb=0. Printed per run: wall seconds of the timed steps, CPU seconds
in user and kernel mode, minor page faults, and the ratio of the wall times. The final
losses of the two runs must be equal: the tunable moves buffers, not arithmetic.

  python benchmarks/host_memory.py [--steps 12] [--seq 640]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def timed_steps(steps: int, seq: int) -> dict:
  """Runs in the child process: the timed SFT steps and their resource usage."""
  from mgrpo_jax.models import get_config, init_model
  from mgrpo_jax.training import (
    MeshConfig,
    OptimizerConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
  )
  from mgrpo_jax.training.batching import TokenSequence
  from mgrpo_jax.warm_start import sft

  model = init_model(get_config("small", vocab_size=1024, max_seq_len=seq,
                                smeared_keys=True), 0)
  optimizer = make_optimizer(OptimizerConfig(learning_rate=3e-3, weight_decay=0.0,
                                             warmup_steps=10, eps=1e-8))
  state, layout = create_train_state(model, optimizer, create_mesh(MeshConfig()), seed=0)
  rng = np.random.default_rng(0)
  mask = np.ones(seq, np.float32)
  mask[:seq // 3] = 0.0
  rows = [TokenSequence(rng.integers(4, 1024, seq).astype(np.int32), mask,
                        np.zeros(seq, np.float32)) for _ in range(16 * (steps + 1))]
  config = sft.SFTConfig(epochs=1, batch_rows=16, buckets=(seq,),
                                nll_every_epoch=False, nll_sequences=16)
  state, _ = sft.sft(state, layout, rows[:16], config)  # compiles
  before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
  state, metrics = sft.sft(state, layout, rows[16:], config)
  wall = time.perf_counter() - started
  after = resource.getrusage(resource.RUSAGE_SELF)
  return {"wall": wall, "user": after.ru_utime - before.ru_utime,
          "sys": after.ru_stime - before.ru_stime,
          "faults": after.ru_minflt - before.ru_minflt, "nll": metrics["nll"][-1]}


def run_child(hugetlb: int, args) -> dict:
  env = {**os.environ, "GLIBC_TUNABLES": f"glibc.malloc.hugetlb={hugetlb}"}
  out = subprocess.run([sys.executable, __file__, "--child", f"--steps={args.steps}",
                        f"--seq={args.seq}"], env=env, check=True, capture_output=True,
                       text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=12)
  parser.add_argument("--seq", type=int, default=640)
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    print(json.dumps(timed_steps(args.steps, args.seq)))
    return
  runs = {"hugetlb=0": run_child(0, args), "hugetlb=1": run_child(1, args)}
  print(f"{args.steps} SFT steps, 16 x {args.seq} tokens, `small` model")
  print(f"{'tunable':<10} {'wall s':>7} {'user s':>7} {'sys s':>6} {'minor faults':>13}")
  for name, run in runs.items():
    print(f"{name:<10} {run['wall']:>7.1f} {run['user']:>7.1f} {run['sys']:>6.1f} "
          f"{run['faults']:>13,}")
  off, on = runs["hugetlb=0"], runs["hugetlb=1"]
  print(f"speed-up (hugetlb=0 / hugetlb=1): {off['wall'] / on['wall']:.2f}x")
  print(f"same final NLL: {off['nll'] == on['nll']}")


if __name__ == "__main__":
  main()
