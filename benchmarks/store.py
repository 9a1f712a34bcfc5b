"""Store latency: LocalStore vs GCSStore (fake-gcs-server), and store ops per training step.

Measures put (new key), get and exists latency (p50/p99, ms) of realistic M-GRPO records
(a `MainOutcomes` record of Q x K rollouts and a `SliceAck`) on both backends, the ratio
GCS/local, and the number of store operations each slice performs per training step as
listed by `schema.step_store_ops`, with the store time per step they imply (p50 sums; a
`wait` is counted as one `exists` of a record that is already there).

Usage: python benchmarks/store.py [--iterations=200] [--queries=64] [--rollouts=8]
"""

from __future__ import annotations

import collections
import os
import tempfile
import time
from collections.abc import Callable

import numpy as np
from absl import app, flags

from mgrpo_jax.store import LocalStore, Store, schema
from mgrpo_jax.store.emulator import FakeGcsEmulator

_ITERATIONS = flags.DEFINE_integer("iterations", 200, "Timed operations per measurement.")
_QUERIES = flags.DEFINE_integer("queries", 64, "Q: queries per step in the outcomes record.")
_ROLLOUTS = flags.DEFINE_integer("rollouts", 8, "K: rollouts per query.")

RUN_ID = "bench"


def _outcomes(step: int) -> schema.MainOutcomes:
  rng = np.random.default_rng(step)
  shape = (_QUERIES.value, _ROLLOUTS.value)
  correct = rng.random(shape) < 0.5
  return schema.MainOutcomes.from_arrays(
      RUN_ID, step, [f"q{step}-{q}" for q in range(shape[0])], correct=correct,
      main_reward=0.1 + 0.9 * correct,
      sub_calls=[[[f"{q:04x}{k:04x}{i:056x}" for i in range(calls)] for k, calls in enumerate(row)]
                 for q, row in enumerate(rng.integers(0, 12, shape))],
      policy_version=step)


def _timed_ms(fn: Callable[..., object], *args: object) -> float:
  start = time.perf_counter()
  fn(*args)
  return (time.perf_counter() - start) * 1e3


def measure(store: Store, iterations: int) -> dict[str, list[float]]:
  """Latencies (ms) of put/get/exists for the outcomes and ack records."""
  latencies = collections.defaultdict(list)
  records = [(_outcomes(t), schema.SliceAck(RUN_ID, t, "sub", t + 1))
             for t in range(iterations)]
  store.put("warmup", b"x")
  store.get("warmup")
  for outcomes, ack in records:
    for name, record in (("outcomes", outcomes), ("ack", ack)):
      latencies[f"put {name}"].append(_timed_ms(store.put, record.key, record.to_bytes()))
      latencies[f"get {name}"].append(_timed_ms(store.get, record.key))
      latencies[f"exists {name}"].append(_timed_ms(store.exists, record.key))
  return latencies


def _latency_name(op: schema.StoreOp) -> str:
  """The measured latency that a step operation costs (a `wait` is one `exists`)."""
  record = "outcomes" if op.key.endswith("/outcomes") else "ack"
  return f"{'exists' if op.op == 'wait' else op.op} {record}"


def main(argv: list[str]) -> None:
  del argv
  iterations = _ITERATIONS.value
  with tempfile.TemporaryDirectory() as tmp:
    results = {"local": measure(LocalStore(os.path.join(tmp, "local")), iterations)}
    with FakeGcsEmulator(os.path.join(tmp, "gcs")) as emulator:
      os.environ.update(emulator.env())
      emulator.create_bucket("bench")
      from mgrpo_jax.store.gcs import GCSStore
      results["gcs"] = measure(GCSStore("bench", "store"), iterations)

  sizes = (len(_outcomes(0).to_bytes()), len(schema.SliceAck(RUN_ID, 0, "sub", 1).to_bytes()))
  print(f"records: outcomes Q={_QUERIES.value} x K={_ROLLOUTS.value} = {sizes[0]} bytes, "
        f"ack = {sizes[1]} bytes; {iterations} operations each")
  print(f"{'operation':<16}{'local p50':>10}{'local p99':>10}{'gcs p50':>10}{'gcs p99':>10}"
        f"{'gcs/local p50':>15}")
  p50 = {}
  for name in results["local"]:
    row = {b: np.percentile(results[b][name], [50, 99]) for b in results}
    p50.update({(b, name): row[b][0] for b in results})
    print(f"{name:<16}{row['local'][0]:>10.3f}{row['local'][1]:>10.3f}{row['gcs'][0]:>10.3f}"
          f"{row['gcs'][1]:>10.3f}{row['gcs'][0] / row['local'][0]:>14.1f}x")

  print("\nstore operations per training step (schema.step_store_ops, step >= 1):")
  print(f"{'slice':<8}{'put':>5}{'get':>5}{'wait':>6}{'local ms':>10}{'gcs ms':>9}"
        f"{'gcs/local':>11}")
  for slice_name in schema.SLICES:
    step_ops = schema.step_store_ops(RUN_ID, 1, slice_name)
    ops = collections.Counter(op.op for op in step_ops)
    ms = {b: sum(p50[(b, _latency_name(op))] for op in step_ops) for b in results}
    print(f"{slice_name:<8}{ops['put']:>5}{ops['get']:>5}{ops['wait']:>6}"
          f"{ms['local']:>10.2f}{ms['gcs']:>9.2f}{ms['gcs'] / ms['local']:>10.1f}x")


if __name__ == "__main__":
  app.run(main)
