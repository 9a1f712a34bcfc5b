"""Benchmark: the demo's pipeline with the run's compilation cache against without it.

Runs `launch/tpu_run.py --slice=all --config=configs/local_demo.py` twice in fresh
workdirs, the same schedule both times: once with `experiment.compilation_cache_dir=''`
(and no JAX_COMPILATION_CACHE_DIR in the environment: every process compiles every
program itself) and once with the default (`<workdir>/jax_cache`, empty at the start:
what a first `make demo` gets). Printed per run: the wall time of the whole command and
of its phases (warm start per agent, the two evaluations, the RL stage as the rest), the
ratio of the two totals, and whether the two runs gave the same results (the printed
table and both evaluations' summaries, example trajectories included): a cached
program is the compiled program itself, so they must.

  python benchmarks/compilation_cache.py            # a shortened schedule (~2 x 3 min)
  python benchmarks/compilation_cache.py --full     # the demo's own schedule (~2 x 9 min)
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


def run_demo(workdir: pathlib.Path, overrides: list[str]) -> dict:
  """Wall seconds of one `--slice=all` run and of its phases, and its results table."""
  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
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
  with tempfile.TemporaryDirectory() as folder:
    off = run_demo(pathlib.Path(folder, "off"),
                   [*overrides, "experiment.compilation_cache_dir="])
    on = run_demo(pathlib.Path(folder, "on"), overrides)
  print(f"schedule: {'the demo' if args.full else 'shortened: ' + ' '.join(SHORT)}")
  print(f"{'phase':<18} {'no cache s':>11} {'cache s':>9} {'saved s':>8}")
  for name in off["phases"]:
    a, b = off["phases"][name], on["phases"][name]
    print(f"{name:<18} {a:>11.1f} {b:>9.1f} {a - b:>8.1f}")
  print(f"{'total':<18} {off['total']:>11.1f} {on['total']:>9.1f} "
        f"{off['total'] - on['total']:>8.1f}")
  print(f"speed-up (no cache / cache): {off['total'] / on['total']:.2f}x")
  print(f"same results (table, evaluations): {off['results'] == on['results']}")


if __name__ == "__main__":
  main()
