"""Per-step cost of a run's replaceable workdir files: a local folder vs `gs://` (fake-gcs-server).

One training step writes, besides the store's records: M's write-ahead cache (B x K
scored rollouts in one file), S's records (one file per sub-agent call, written by the
service before it replies, here as one delegation batch), reads both back once, retires an older step's files, and
(with a `gs://` workdir) copies the slice's logs (metrics.jsonl and a TensorBoard event
file, after `--history` earlier steps of them) to the workdir. This times each part per step
(median over the steps, ms) for both backends. The emulator runs on this machine, so its
round trips are faster than a real bucket's: multiply the GCS numbers by the ratio of a
real request's latency (tens of ms) to the emulator's.

Usage: python benchmarks/run_files.py [--steps=20] [--queries=8] [--rollouts=4]
  [--calls=2] [--tokens=1024] [--history=0]
"""

from __future__ import annotations

import collections
import os
import pathlib
import tempfile

import numpy as np
from absl import app, flags

from mgrpo_jax.agents.records import END_RESULT, MainRecord, SubRecord, Trajectory
from mgrpo_jax.metrics import MetricsWriter
from mgrpo_jax.slices.common import Timer
from mgrpo_jax.slices.log_mirror import LogMirror
from mgrpo_jax.slices.step_cache import MainStepCache, SubStepCache
from mgrpo_jax.store.emulator import FakeGcsEmulator
from mgrpo_jax.store.folder import Folder, open_folder

_STEPS = flags.DEFINE_integer("steps", 20, "Timed steps.")
_QUERIES = flags.DEFINE_integer("queries", 8, "B: queries per step.")
_ROLLOUTS = flags.DEFINE_integer("rollouts", 4, "K: rollouts per query.")
_CALLS = flags.DEFINE_integer("calls", 2, "Sub-agent calls per rollout.")
_TOKENS = flags.DEFINE_integer("tokens", 1024, "Tokens per trajectory.")
_HISTORY = flags.DEFINE_integer("history", 0, "Steps of metrics written before the timed "
                                "ones (the logs' size at the timed steps).")
_METRICS = 60  # scalars per metrics line, about what a slice writes


def _trajectory(rng: np.random.Generator) -> Trajectory:
  n = _TOKENS.value
  return Trajectory(ids=rng.integers(0, 32000, n).astype(np.int32),
                    loss_mask=rng.random(n) < 0.5,
                    logprobs=(-rng.random(n) * 7).astype(np.float32),
                    roles=rng.integers(0, 4, n).astype(np.int32),
                    messages=(("user", "q"), ("assistant", "a")), policy_version=1,
                    format_ok=True, error="", end=END_RESULT, num_turns=2, tool_calls=(),
                    final="report", wall_s=1.0)


def measure(files: Folder, logs: pathlib.Path, mirror: bool) -> dict[str, list[float]]:
  """Milliseconds per step of each part (module docstring)."""
  rng = np.random.default_rng(0)
  main_cache = MainStepCache(files.child("main/cache"), checkpoints_kept=3)
  sub_cache = SubStepCache(files.child("sub/cache"), checkpoints_kept=3)
  writer = MetricsWriter(logs, tensorboard=True)
  log_mirror = LogMirror(logs, files.child("logs/main"))
  ids = [f"q{q}" for q in range(_QUERIES.value)]
  for step in range(-_HISTORY.value, 0):
    writer.write(step, {f"metric_{i}": float(i) for i in range(_METRICS)})
  seconds = collections.defaultdict(list)
  for step in range(_STEPS.value):
    main = [MainRecord(q, k, "main", _trajectory(rng), _CALLS.value, correct=1.0)
            for q in ids for k in range(_ROLLOUTS.value)]
    sub = [SubRecord(q, k, i, "task", "", "report", _trajectory(rng))
           for q in ids for k in range(_ROLLOUTS.value) for i in range(_CALLS.value)]
    timer = Timer()
    with timer("S records stored check"):  # the service's look-up before it runs a batch
      sub_cache.stored(step, [record.key for record in sub])
    with timer("S records put"):
      sub_cache.put(step, [(record, (0, j)) for j, record in enumerate(sub)])
    with timer("M cache write"):
      main_cache.write(step, ids, main, [], {r.key: r.digest() for r in sub})
    with timer("M cache read"):
      main_cache.load(step)
    with timer("S records read"):
      sub_cache.load(step)
    with timer("retire"):
      main_cache.retire(step)
      sub_cache.retire(step)
    writer.write(step, {f"metric_{i}": float(i) for i in range(_METRICS)})
    if mirror:
      with timer("logs sync"):
        log_mirror.sync()
    for phase, elapsed in timer.seconds.items():
      seconds[phase].append(elapsed * 1e3)
  writer.close()
  return seconds


def main(argv: list[str]) -> None:
  del argv
  with tempfile.TemporaryDirectory() as tmp:
    results = {"local": measure(open_folder(os.path.join(tmp, "run")),
                                pathlib.Path(tmp, "run", "logs", "main"), mirror=False)}
    with FakeGcsEmulator(os.path.join(tmp, "gcs")) as emulator:
      os.environ.update(emulator.env())
      emulator.create_bucket("bench")
      results["gcs"] = measure(open_folder("gs://bench/run"),
                               pathlib.Path(tmp, "local", "logs", "main"), mirror=True)
  calls = _QUERIES.value * _ROLLOUTS.value * _CALLS.value
  print(f"B={_QUERIES.value} K={_ROLLOUTS.value}, {calls} sub-agent calls, "
        f"{_TOKENS.value} tokens per trajectory, logs of {_HISTORY.value} earlier steps; "
        f"median ms per step over {_STEPS.value}")
  print(f"{'part':<16}{'local':>10}{'gcs':>10}")
  totals = collections.Counter()
  for phase in results["gcs"]:
    row = {b: float(np.median(results[b][phase])) if phase in results[b] else 0.0
           for b in results}
    totals.update(row)
    print(f"{phase:<16}{row['local']:>10.1f}{row['gcs']:>10.1f}")
  print(f"{'total':<16}{totals['local']:>10.1f}{totals['gcs']:>10.1f}")


if __name__ == "__main__":
  app.run(main)
