"""Benchmark: steps to learn copying, with smeared keys against plain keys.

A model preset (`--preset`, default `small`: 128 wide, 2 layers; `tiny` is the demo's
64-wide agent) trained from scratch on the copy curriculum
(`warm_start/copy_curriculum.py`: one repeated span per sequence, loss on the copy)
through the warm start's SFT update, once with `smeared_keys` and once without, same
seed, data and optimizer (AdamW, warm-up then constant). Every `--every` steps both
models predict the copies of 64 fresh sequences greedily (`copy_accuracy`). Printed:
the accuracy curve of each, the steps each needs to reach `--target`, and their ratio
(a plain model that never reaches it counts as more than `--steps`).

  python benchmarks/copy_learning.py [--preset small] [--steps 1500] [--every 100] [--target 0.8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from flax import nnx

from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.training import (
  MeshConfig,
  OptimizerConfig,
  create_mesh,
  create_train_state,
  make_optimizer,
)
from mgrpo_jax.warm_start import sft
from mgrpo_jax.warm_start.copy_curriculum import copy_accuracy, copy_sequences


def learning_curve(smeared: bool, args) -> tuple[list[tuple[int, float]], float]:
  """[(step, copy accuracy)] every `args.every` steps, and the wall seconds of training."""
  tokens = np.arange(4, args.vocab, dtype=np.int32)
  config = get_config(args.preset, vocab_size=args.vocab, max_seq_len=args.length,
                      smeared_keys=smeared)
  optimizer = make_optimizer(OptimizerConfig(learning_rate=args.learning_rate,
                                             warmup_steps=10, eps=1e-8))
  state, layout = create_train_state(init_model(config, seed=0), optimizer,
                                     create_mesh(MeshConfig()), seed=0)
  held_out = copy_sequences(64, tokens, length=args.length, seed=10**6)
  curve, seconds = [], 0.0
  for chunk in range(args.steps // args.every):
    data = copy_sequences(args.every * args.rows, tokens, length=args.length, seed=chunk)
    sft_config = sft.SFTConfig(epochs=1, batch_rows=args.rows, buckets=(args.length,),
                                      seed=chunk, nll_every_epoch=False)
    started = time.perf_counter()
    state, _ = sft.sft(state, layout, data, sft_config)
    seconds += time.perf_counter() - started
    accuracy = copy_accuracy(nnx.merge(layout.graphdef, state.params), held_out)
    curve.append(((chunk + 1) * args.every, accuracy))
  return curve, seconds


def steps_to(curve: list[tuple[int, float]], target: float) -> int | None:
  return next((step for step, accuracy in curve if accuracy >= target), None)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", default="small", help="model preset (models.get_config)")
  parser.add_argument("--steps", type=int, default=1500)
  parser.add_argument("--every", type=int, default=100)
  parser.add_argument("--target", type=float, default=0.8)
  parser.add_argument("--rows", type=int, default=16)
  parser.add_argument("--length", type=int, default=128)
  parser.add_argument("--vocab", type=int, default=512)
  parser.add_argument("--learning_rate", type=float, default=3e-3)
  args = parser.parse_args()
  curves = {}
  for name, smeared in (("smeared", True), ("plain", False)):
    curves[name], seconds = learning_curve(smeared, args)
    print(f"{name:8s} keys: {seconds:6.1f} s of SFT; copy accuracy by step: "
          + " ".join(f"{step}:{acc:.2f}" for step, acc in curves[name]), flush=True)
  smeared_steps = steps_to(curves["smeared"], args.target)
  plain_steps = steps_to(curves["plain"], args.target)
  print(f"steps to copy accuracy {args.target}: smeared {smeared_steps or f'>{args.steps}'}, "
        f"plain {plain_steps or f'>{args.steps}'}")
  if smeared_steps:
    ratio = (plain_steps or args.steps) / smeared_steps
    print(f"ratio plain / smeared: {'>' if plain_steps is None else ''}{ratio:.1f}x")


if __name__ == "__main__":
  main()
