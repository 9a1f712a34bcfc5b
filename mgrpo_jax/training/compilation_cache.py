"""The persistent XLA compilation cache: each program compiles once, not once per process.

A run compiles the same programs in several processes and phases: the warm start's two
agents share an architecture and length buckets, the held-out evaluations and the RL
slices sample with the same shapes, and `--slice=all` starts each slice as a child
process whose in-memory jit caches are empty. The next command compiles them again: a
run started over in a fresh workdir, the same job with LoRA after full fine-tuning, a
run extended by a few steps. With `experiment.compilation_cache_dir` set (default
`../jax_cache`: `jax_cache` beside the run's local folder, so `runs/a` and `runs/b`
share `runs/jax_cache`), `launch/tpu_run.py` points JAX's persistent cache there before
anything compiles, in the parent and in both slices, so a program compiled once is
loaded by every later process of the run and of later commands, and a resumed run
compiles nothing it compiled before. A program's cache key is its XLA program with the
compiler options, the backend and jax's version, so runs that share a folder only share
identical programs, and a loaded program is the compiled program itself: the results
are bitwise those of compiling it again.

Every program is kept, however fast it compiled (`MIN_COMPILE_TIME_S`). JAX's default
keeps only those that took at least 1 s, and on a CPU most of a run's programs (one
sampling program per length bucket, the initializers) take 0.3-1 s each: a held-out
evaluation of the demo compiled 18 sampling programs in 19 s, kept 6 and compiled the
other 12 again in every later process. A `JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`
set in the environment is kept.

The cache is trusted code (JAX's warning): keep it in a folder only its user writes.
"""

from __future__ import annotations

import os
import pathlib

import jax

from mgrpo_jax.training.paths import RunPaths

# Seconds a program must take to compile to be kept (module docstring): all are.
MIN_COMPILE_TIME_S = 0.0
_MIN_COMPILE_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def compilation_cache_dir(config, workdir: str) -> str | None:
  """The cache folder of the run (module docstring); None when the setting is empty."""
  folder = str(config.experiment.compilation_cache_dir)
  if not folder:
    return None
  if "://" in folder:
    return folder
  local = RunPaths.from_config(config, workdir).local
  return os.path.normpath(local / pathlib.Path(folder).expanduser())


def enable_compilation_cache(config, workdir: str) -> str | None:
  """Points JAX's persistent compilation cache at the run's folder; returns it (or None).

  Call before the first compilation of the process.
  """
  folder = compilation_cache_dir(config, workdir)
  if folder is not None:
    jax.config.update("jax_compilation_cache_dir", folder)
    if _MIN_COMPILE_TIME_ENV not in os.environ:
      jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
  return folder
