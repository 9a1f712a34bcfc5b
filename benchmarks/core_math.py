"""Benchmark: jitted M-GRPO core math against a per-group numpy/Python reference.

One sub-agent step for growing sizes, Q queries x K = 8 rollouts x D = 8 aligned slots
(up to one million sub-trajectories):
  alignment   `alignment.align_indices` vs a loop over rollouts (numpy Generator draws);
  advantages  `advantages.mgrpo_advantages` vs a loop over samples collecting rewards per
              group id, then a loop normalizing each sample (how many RL libraries do it);
  loss        `losses.policy_loss` (token ratio, clip, seq-mean-token-mean) on [N, T]
              vs numpy token math plus a per-sequence reduction loop.
Both sides run in this process on the same inputs; the outputs are compared. Jitted
times are the median of repeated steady-state calls (compile time reported apart); the
reference runs once per size (best of 3 for small sizes).

  python benchmarks/core_math.py [--sizes 1000,10000,100000,1000000] [--seq_len 8]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mgrpo_jax.core import advantages, alignment, losses

K, D, MAX_CALLS = 8, 8, 12


def reference_alignment(counts: np.ndarray, rng: np.random.Generator
                        ) -> tuple[np.ndarray, np.ndarray]:
  q_count, k_count = counts.shape
  index = np.zeros((q_count, k_count, D), np.int32)
  valid = np.zeros((q_count, k_count, D), bool)
  for q in range(q_count):
    for k in range(k_count):
      c = int(counts[q, k])
      if c == 0:
        continue
      if c >= D:
        chosen = np.sort(rng.choice(c, D, replace=False))
      else:
        chosen = np.concatenate([np.arange(c), rng.integers(0, c, D - c)])
      index[q, k] = chosen
      valid[q, k] = True
  return index, valid


def _normalize_by_group(scores: np.ndarray, group_ids: np.ndarray,
                        keep: np.ndarray) -> np.ndarray:
  by_group: dict[int, list[float]] = collections.defaultdict(list)
  for i in range(len(scores)):
    if keep[i]:
      by_group[int(group_ids[i])].append(float(scores[i]))
  stats = {}
  for gid, values in by_group.items():
    array = np.asarray(values)
    stats[gid] = (array.mean(), array.std())
  out = np.zeros(len(scores), np.float32)
  for i in range(len(scores)):
    if keep[i]:
      mean, std = stats[int(group_ids[i])]
      out[i] = (scores[i] - mean) / std if std > 0 else 0.0
  return out


def reference_advantages(main_rewards: np.ndarray, sub_rewards: np.ndarray,
                         sub_valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  q_count, k_count, d_count = sub_rewards.shape
  main_ids = np.repeat(np.arange(q_count), k_count)
  main = _normalize_by_group(main_rewards.ravel(), main_ids, np.ones(main_ids.size, bool))
  sub_ids = np.repeat(np.arange(q_count), k_count * d_count)
  sub = _normalize_by_group(sub_rewards.ravel(), sub_ids, sub_valid.ravel())
  return main.reshape(q_count, k_count), sub.reshape(sub_rewards.shape)


def reference_loss(logp: np.ndarray, old_logp: np.ndarray, adv: np.ndarray,
                   mask: np.ndarray, clip_low: float = 0.2, clip_high: float = 0.28) -> float:
  ratio = np.exp(np.where(mask, logp - old_logp, 0.0))
  a = adv[:, None]
  token_loss = np.maximum(-a * ratio, -a * np.clip(ratio, 1 - clip_low, 1 + clip_high))
  total, rows = 0.0, 0
  for i in range(len(token_loss)):  # per-sequence reduction, as in slime's sample mean
    n = mask[i].sum()
    if n:
      total += float((token_loss[i] * mask[i]).sum() / n)
      rows += 1
  return total / max(rows, 1)


def _time_jitted(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
  start = time.perf_counter()
  jax.block_until_ready(fn())
  first = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  steady = statistics.median(times)
  return steady, max(first - steady, 0.0)


def _time_reference(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
  best, result = float("inf"), None
  for _ in range(repeats):
    start = time.perf_counter()
    result = fn()
    best = min(best, time.perf_counter() - start)
  return best, result


def run_size(n_target: int, seq_len: int, seed: int) -> list[dict[str, Any]]:
  rng = np.random.default_rng(seed)
  q_count = max(1, round(n_target / (K * D)))
  n = q_count * K * D
  counts = rng.integers(0, MAX_CALLS + 1, (q_count, K)).astype(np.int32)
  main_rewards = rng.choice(np.array([0.0, 0.1, 1.0], np.float32), (q_count, K))
  call_rewards = rng.choice(np.array([0.0, 0.1, 0.6, 1.0], np.float32),
                            (q_count, K, MAX_CALLS))
  old_logp = np.log(rng.uniform(0.05, 1.0, (n, seq_len))).astype(np.float32)
  logp = (old_logp + rng.normal(0.0, 0.2, (n, seq_len))).astype(np.float32)
  mask = rng.random((n, seq_len)) < 0.8
  key = jax.random.key(seed)
  jit_repeats = 20 if n <= 10**5 else 5
  ref_repeats = 3 if n <= 10**4 else 1
  rows = []

  steady, compile_s = _time_jitted(lambda: alignment.align_indices(counts, D, key), jit_repeats)
  ref_s, (_, ref_valid) = _time_reference(lambda: reference_alignment(counts, rng), ref_repeats)
  index, valid = (np.asarray(x) for x in alignment.align_indices(counts, D, key))
  agree = bool(np.array_equal(valid, ref_valid))
  rows.append(dict(component="alignment", ref=ref_s, jit=steady, compile=compile_s,
                   check=f"valid equal: {agree}"))

  sub_rewards = np.where(valid, np.take_along_axis(call_rewards, index, axis=-1), 0.0)
  sub_rewards = sub_rewards.astype(np.float32)
  steady, compile_s = _time_jitted(
      lambda: advantages.mgrpo_advantages(main_rewards, sub_rewards, valid), jit_repeats)
  ref_s, (ref_main, ref_sub) = _time_reference(
      lambda: reference_advantages(main_rewards, sub_rewards, valid), ref_repeats)
  main_adv, sub_adv = advantages.mgrpo_advantages(main_rewards, sub_rewards, valid)
  err = max(np.abs(np.asarray(main_adv) - ref_main).max(),
            np.abs(np.asarray(sub_adv) - ref_sub).max())
  rows.append(dict(component="advantages", ref=ref_s, jit=steady, compile=compile_s,
                   check=f"max |diff| {err:.1e}"))

  adv = np.asarray(sub_adv).reshape(n)
  mask = mask & valid.reshape(n, 1)  # empty slots carry no loss
  arrays = tuple(jnp.asarray(x) for x in (logp, old_logp, adv, mask))
  steady, compile_s = _time_jitted(lambda: losses.policy_loss(*arrays)[0], jit_repeats)
  ref_s, ref_value = _time_reference(
      lambda: reference_loss(logp, old_logp, adv, mask), ref_repeats)
  value = float(losses.policy_loss(*arrays)[0])
  rows.append(dict(component=f"loss (T={seq_len})", ref=ref_s, jit=steady, compile=compile_s,
                   check=f"|diff| {abs(value - ref_value):.1e}"))

  total = dict(component="total", ref=sum(r["ref"] for r in rows),
               jit=sum(r["jit"] for r in rows), compile=sum(r["compile"] for r in rows),
               check="")
  rows.append(total)
  for row in rows:
    row.update(n=n, q=q_count)
  return rows


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default="1000,10000,100000,1000000",
                      help="comma-separated numbers of sub-trajectories Q*K*D")
  parser.add_argument("--seq_len", type=int, default=8, help="tokens per sequence T")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  sizes = [int(s) for s in args.sizes.split(",")]

  print(f"jax {jax.__version__} on {jax.devices()[0].platform}; K={K}, D={D}, "
        f"calls per rollout uniform in [0, {MAX_CALLS}]")
  header = (f"{'N=Q*K*D':>9} {'Q':>6} {'component':<12} {'reference ms':>13} {'jit ms':>9} "
            f"{'compile ms':>11} {'speed-up':>9}  check")
  print(header)
  print("-" * len(header))
  largest_total = None
  for size in sizes:
    for row in run_size(size, args.seq_len, args.seed):
      speedup = row["ref"] / row["jit"]
      print(f"{row['n']:>9} {row['q']:>6} {row['component']:<12} {row['ref'] * 1e3:>13.2f} "
            f"{row['jit'] * 1e3:>9.3f} {row['compile'] * 1e3:>11.0f} {speedup:>8.1f}x  "
            f"{row['check']}")
      if row["component"] == "total":
        largest_total = (row["n"], speedup)
  n, speedup = largest_total
  print(f"\nspeed-up of the jitted core math at N={n}: {speedup:.1f}x (goal >= 20x)")


if __name__ == "__main__":
  main()
