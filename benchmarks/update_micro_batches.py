"""Benchmark: the demo's updates in micro-batches against the whole batch at once.

The demo's `tiny` model (64 wide, smeared keys, a 1,600-symbol vocabulary) takes one
update (`training.make_update_fn`) on batches of the demo's shapes: the warm start's SFT
batches (16 rows of 64 or 96 tokens) and the RL batches (M's 64 rollouts of 80 or 160
tokens), whole (`micro_batch_size` 0, the peer) and in micro-batches of b rows (gradients
accumulated by a `lax.scan`: `<agent>.optim.micro_batch_size`, which the warm start
follows too). Same loss and gradient up to float summation order (the script checks the
first step's loss and gradient norm); rows hold random tokens with a loss on 40% of them.
Printed: the median step seconds of each, and the whole batch's time over each.

  python benchmarks/update_micro_batches.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import statistics

import jax
import numpy as np
from bench_timing import timed_updates

from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.training import (
    MeshConfig,
    OptimizerConfig,
    TrainBatch,
    UpdateConfig,
    create_mesh,
    create_train_state,
    make_optimizer,
    make_update_fn,
)

VOCAB = 1600
# (label, rows, tokens, micro-batch sizes to try besides the whole batch)
SHAPES = (("SFT, short rows", 16, 64, (8, 4)), ("SFT, long rows", 16, 96, (8, 4)),
          ("RL, M's short rollouts", 64, 80, (16, 8)), ("RL, M's long rollouts", 64, 160,
                                                        (16, 8)))


def random_batch(rows: int, length: int, seed: int = 0) -> TrainBatch:
  """Random tokens, a loss on each row's 40% before its last 4 tokens, signed advantages."""
  rng = np.random.default_rng(seed)
  mask = np.zeros((rows, length), np.float32)
  mask[:, int(0.56 * length):length - 4] = 1.0
  return TrainBatch(ids=rng.integers(4, VOCAB, (rows, length)).astype(np.int32),
                    loss_mask=mask, old_logp=np.where(mask > 0, -0.5, 0.0).astype(np.float32),
                    advantages=rng.standard_normal(rows).astype(np.float32),
                    weights=np.ones(rows, np.float32))


def time_update(batch: TrainBatch, micro: int, repeats: int) -> dict[str, float]:
  """Median step seconds of the update in micro-batches of `micro` rows, and its first
  step's loss and gradient norm."""
  model = init_model(get_config("tiny", vocab_size=VOCAB, smeared_keys=True), seed=0)
  state, layout = create_train_state(model, make_optimizer(OptimizerConfig(
      learning_rate=1e-3, weight_decay=0.0)), create_mesh(MeshConfig(), jax.devices()[:1]),
      seed=0)
  update = make_update_fn(layout, UpdateConfig(micro_batch_size=micro), batch.ids.shape[0])
  _, _, times, first = timed_updates(update, state, batch, repeats)
  return {"step_s": statistics.median(times), "loss": first["loss"],
          "grad_norm": first["grad_norm"]}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=10)
  args = parser.parse_args()
  print(f"tiny model, vocab {VOCAB}; median of {args.repeats} steps; jax {jax.__version__}")
  print("| batch | rows x T | micro-batch | step ms | whole / this |")
  print("|---|---|---|---|---|")
  for label, rows, length, micros in SHAPES:
    batch = random_batch(rows, length)
    peer = time_update(batch, 0, args.repeats)
    print(f"| {label} | {rows} x {length} | whole | {1e3 * peer['step_s']:.1f} | 1.00x |")
    for micro in micros:
      result = time_update(batch, micro, args.repeats)
      for name in ("loss", "grad_norm"):
        if not np.isclose(result[name], peer[name], rtol=1e-5, atol=1e-7):
          raise SystemExit(f"{label}, micro-batches of {micro}: {name} {result[name]} "
                           f"differs from the whole batch's {peer[name]}")
      print(f"| {label} | {rows} x {length} | {micro} | {1e3 * result['step_s']:.1f} | "
            f"{peer['step_s'] / result['step_s']:.2f}x |")


if __name__ == "__main__":
  main()
