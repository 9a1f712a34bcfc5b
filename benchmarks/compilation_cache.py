"""Benchmark: the demo's pipeline with the run's compilation cache, and what it keeps.

Runs `launch/tpu_run.py --slice=all --config=configs/local_demo.py` in fresh workdirs,
the same schedule every time, with three caches:

  no cache      `experiment.compilation_cache_dir=''` (and no JAX_COMPILATION_CACHE_DIR
                in the environment): every process compiles every program itself;
  1 s or more   the run's cache keeping only programs that took at least 1 s to compile
                (JAX's default, `JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=1`);
  every program the default (`training/compilation_cache.py`: all are kept).

Each cache starts empty (what a first `make demo` gets). The two caches are then used
by a second run in another workdir (`experiment.compilation_cache_dir` naming the first
run's folder), as the runs of a sweep share `<sweep>/jax_cache`. Printed: the wall time
of every run and of its phases (warm start per agent, the two evaluations, the RL stage
as the rest), the ratios of the totals against `every program`, and whether all runs
gave the same results (the printed table and both evaluations' summaries, example
trajectories included): a cached program is the compiled program itself, so they must.

  python benchmarks/compilation_cache.py            # a shortened schedule (~5 x 3 min)
  python benchmarks/compilation_cache.py --full     # the demo's own schedule (~5 x 5 min)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# A shortened demo: the same stages and shapes, fewer steps and questions.
SHORT = ("warm_start.num_questions=300", "warm_start.num_worlds=10",
         "warm_start.copy_steps=100", "warm_start.window_copy_steps=30",
         "warm_start.epochs=1", "eval.num_questions=16", "experiment.num_steps=2")
_THRESHOLD_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
# Cache -> (the JAX threshold set in the environment or None, whether a folder is used).
CACHES = {"no cache": (None, False), "1 s or more": ("1", True), "every program": (None, True)}


def run_demo(workdir: pathlib.Path, overrides: list[str], threshold: str | None) -> dict:
  """Wall seconds of one `--slice=all` run and of its phases, and its results."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("JAX_COMPILATION_CACHE_DIR", _THRESHOLD_ENV)}
  if threshold is not None:
    env[_THRESHOLD_ENV] = threshold
  command = [sys.executable, "launch/tpu_run.py", "--slice=all",
             "--config=configs/local_demo.py", f"--workdir={workdir}",
             *(f"--config.{o}" for o in overrides)]
  started = time.perf_counter()
  subprocess.run(command, cwd=REPO_ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
  total = time.perf_counter() - started
  warm = json.loads((workdir / "warm_start" / "warm_start.json").read_text())
  evals = {label: json.loads((workdir / "eval" / f"{label}.json").read_text())
           for label in ("warm_start", "final")}
  phases = {"warm start M": warm["main"]["seconds"], "warm start S": warm["sub"]["seconds"],
            "eval before": evals["warm_start"].pop("seconds"),
            "eval after": evals["final"].pop("seconds")}
  phases["RL and the rest"] = total - sum(phases.values())
  # The results: the printed table and both evaluations (with example trajectories).
  results = ((workdir / "report" / "summary.txt").read_text(), evals)
  return {"total": total, "phases": phases, "results": results}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--full", action="store_true", help="the demo's own schedule")
  args = parser.parse_args()
  overrides = [] if args.full else list(SHORT)
  runs = {}
  with tempfile.TemporaryDirectory() as folder:
    for name, (threshold, cached) in CACHES.items():
      arm = pathlib.Path(folder, name.replace(" ", "_"))
      cache = [f"experiment.compilation_cache_dir={arm / 'jax_cache' if cached else ''}"]
      runs[f"{name}, first"] = run_demo(arm / "first", [*overrides, *cache], threshold)
      if cached:
        runs[f"{name}, second"] = run_demo(arm / "second", [*overrides, *cache], threshold)
  print(f"schedule: {'the demo' if args.full else 'shortened: ' + ' '.join(SHORT)}")
  width = max(len(name) for name in runs)
  phases = list(next(iter(runs.values()))["phases"])
  print(f"{'run':<{width}} " + " ".join(f"{p:>15}" for p in phases) + f" {'total s':>8}")
  for name, run in runs.items():
    print(f"{name:<{width}} " + " ".join(f"{run['phases'][p]:>15.1f}" for p in phases)
          + f" {run['total']:>8.1f}")
  for which in ("first", "second"):
    reference = runs[f"every program, {which}"]["total"]
    for name in CACHES:
      if name != "every program" and f"{name}, {which}" in runs:
        print(f"{which} run: {name} / every program: "
              f"{runs[f'{name}, {which}']['total'] / reference:.2f}x")
  results = [run["results"] for run in runs.values()]
  print(f"same results (table, evaluations): {all(r == results[0] for r in results)}")


if __name__ == "__main__":
  main()
