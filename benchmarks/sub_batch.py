"""Benchmark: the sub-agent's RL update on one step's aligned batch, three ways.

One M-GRPO step of the local demo's shape (`configs/local_demo.py`): Q = 8 queries x K =
8 rollouts x D = 3 aligned slots, S's context 128 tokens, the demo's `tiny` model with
smeared keys and a 1,600-symbol vocabulary. M's sub-call counts per rollout and S's
trajectory lengths are drawn like the demo's (about 1.5 calls per rollout, 0 to 4;
reports of 27-79 tokens). The batch is built by the trainer's own functions
(`core.alignment.align_indices`, `training.batching.aligned_batch`) and updated by its
jitted update (`training.make_update_fn`), three ways:

  per slot, context     one row per slot [Q*K*D, 128] (duplicates repeated, empty slots
                        kept), every row padded to the context: the peer (before);
  per slot, lengths     the same rows padded to 40, 80 or 128, whichever holds the
                        longest (`<agent>.limits.shortest_train_length=40`);
  merged, lengths       one row per distinct call, weighted by its slots, in a row bucket
                        (a quarter, half, three quarters or all of Q*K*D), padded as above:
                        what the sub slice trains on now.

All three have the same loss and gradient (the script checks the first step's loss and
gradient norm). Each update runs from the same initial state; times are the median of
`--repeats` steps after a first, compiling one.

  python benchmarks/sub_batch.py [--repeats 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import statistics

import jax
import numpy as np
from bench_timing import timed_updates

from mgrpo_jax.core.alignment import align_indices
from mgrpo_jax.models import get_config, init_model
from mgrpo_jax.training import (
    MeshConfig,
    OptimizerConfig,
    TokenSequence,
    UpdateConfig,
    aligned_batch,
    create_mesh,
    create_train_state,
    make_optimizer,
    make_update_fn,
)
from mgrpo_jax.training.batching import row_buckets

Q, K, D, CONTEXT, SHORTEST = 8, 8, 3, 128, 40
VOCAB = 1600
# Sub-calls per rollout (0..4) and their probabilities: about 1.5 calls on average.
CALL_COUNTS, CALL_PROBABILITIES = (0, 1, 2, 3, 4), (0.05, 0.45, 0.40, 0.07, 0.03)


def step_batches(seed: int) -> dict[str, object]:
  """The three batches of one step (module docstring), keyed by their row label."""
  rng = np.random.default_rng(seed)
  counts = rng.choice(CALL_COUNTS, size=(Q, K), p=CALL_PROBABILITIES).astype(np.int32)
  sequences = {}
  for q, k in np.ndindex(Q, K):
    for call in range(counts[q, k]):
      length = int(rng.integers(27, 80))
      mask = np.zeros(length, np.float32)
      mask[length - int(0.4 * length):] = 1.0  # S's own turns: the report's tokens last
      sequences[(q, k, call)] = TokenSequence(
          ids=rng.integers(4, VOCAB, length), loss_mask=mask,
          logp=np.where(mask > 0, -rng.exponential(0.3, length), 0.0).astype(np.float32))
  index, valid = (np.asarray(x) for x in align_indices(counts, D, jax.random.key(seed)))
  call_advantage = {key: rng.standard_normal() for key in sequences}
  advantages = np.zeros((Q, K, D), np.float32)
  for q, k, j in zip(*np.nonzero(valid), strict=True):
    advantages[q, k, j] = call_advantage[(q, k, int(index[q, k, j]))]
  lengths = (SHORTEST, 2 * SHORTEST, CONTEXT)
  return {
      "per slot, context": aligned_batch(sequences, index, valid, advantages,
                                         buckets=(CONTEXT,)),
      "per slot, lengths": aligned_batch(sequences, index, valid, advantages,
                                         buckets=lengths),
      "merged, lengths": aligned_batch(sequences, index, valid, advantages, buckets=lengths,
                                       row_buckets=row_buckets(Q * K * D)),
  }


def time_update(batch, repeats: int) -> dict[str, float]:
  """Median step seconds of the jitted update on `batch`, and its first step's metrics."""
  model = init_model(get_config("tiny", vocab_size=VOCAB, smeared_keys=True), seed=0)
  mesh = create_mesh(MeshConfig(), jax.devices()[:1])
  state, layout = create_train_state(model, make_optimizer(OptimizerConfig(
      learning_rate=3e-3, weight_decay=0.0)), mesh, seed=0)
  update = make_update_fn(layout, UpdateConfig(), batch.ids.shape[0])
  _, first_s, times, first = timed_updates(update, state, batch, repeats)
  return {"step_s": statistics.median(times), "first_s": first_s, "loss": first["loss"],
          "grad_norm": first["grad_norm"], "num_tokens": first["num_tokens"]}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  batches = step_batches(args.seed)
  results = {label: time_update(batch, args.repeats) for label, batch in batches.items()}
  peer = results["per slot, context"]
  print(f"S's update, Q={Q} K={K} D={D}, context {CONTEXT}, tiny model, vocab {VOCAB}; "
        f"median of {args.repeats} steps; jax {jax.__version__}")
  print("| batch | rows x T | step s | speed-up | first step s | loss | grad norm | "
        "slot tokens |")
  print("|---|---|---|---|---|---|---|---|")
  for label, result in results.items():
    rows, length = batches[label].ids.shape
    print(f"| {label} | {rows} x {length} | {result['step_s']:.3f} | "
          f"{peer['step_s'] / result['step_s']:.2f}x | {result['first_s']:.1f} | "
          f"{result['loss']:.6f} | {result['grad_norm']:.6f} | {result['num_tokens']:.0f} |")
  for label, result in results.items():
    for name in ("loss", "grad_norm", "num_tokens"):
      if not np.isclose(result[name], peer[name], rtol=1e-4, atol=1e-6):
        raise SystemExit(f"{label}: {name} {result[name]} differs from the peer's "
                         f"{peer[name]}")


if __name__ == "__main__":
  main()
