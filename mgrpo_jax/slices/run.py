"""`run_slice(slice_name, config, workdir, stage)`: what `launch/tpu_run.py` calls.

  main  the main slice: RL (`main_slice.run_main_slice`), or with stage "warm_start"
        M's warm start alone (`warm_start.stage.warm_start_agent`)
  sub   the sub slice: RL (`sub_slice.run_sub_slice`), or S's warm start alone
  both  both RL slices in this one process (`colocated.run_colocated`)
  all   the stages of `pipeline.run_all`: warm start and held-out evaluation when
        configured, around the RL stage, each in child processes of this one, which
        itself computes nothing on a device (`run_children`): each agent's warm start
        and RL slice as `launch/tpu_run.py --slice=main|sub --stage=...`, the
        evaluations as `--slice=all --stage=eval_before|eval_after`
        (`pipeline.run_evaluation_stage`), and the two-stage curriculum's selection as
        `--slice=all --stage=select_stage2` (`curriculum.py`), with the same config (the validated config is
        written to `<local>/launch/config.py` and the gin bindings to
        `<local>/launch/bindings.gin`, so overrides and user components reach the children
        exactly), the same workdir, `--verbose` when this process has it and, unless
        `store.uri` is set, the local store under it. Concurrent children get disjoint
        shares of the host's accelerators in their environment (`child_env`). In the RL stage the RPC between them is real loopback
        gRPC. With `serving.colocate`, or on a host whose accelerators cannot be shared
        (one TPU chip), the RL stage is one `--slice=both` child and the warm starts run
        one after the other. Their output is relayed line by line with a `[main]` / `[sub]` / `[eval]`
        prefix; each child's pid is written to `<local>/launch/<prefix>.pid`. If one
        fails, the others are terminated and `run_slice` exits non-zero.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.metrics.wandb_run import import_wandb
from mgrpo_jax.scale.writers import is_verbose
from mgrpo_jax.slices.child_env import cannot_share, child_environments, detect_accelerators
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.utils.atomic_files import atomic_write

SLICES = ("main", "sub", "both", "all")
STAGES = ("rl", "warm_start", "eval_before", "eval_after", "select_stage2")
# Stages of the whole system, each a `--slice=all --stage=...` child of the pipeline.
EVAL_STAGES = ("eval_before", "eval_after", "select_stage2")
_LAUNCHER = pathlib.Path(__file__).resolve().parents[2] / "launch" / "tpu_run.py"
_CONFIG_FILE = '''"""The config of this run, written by run_slice('all') for its two slices."""

import json

import ml_collections

CONFIG_JSON = {config_json!r}


def get_config(arg=None):
  del arg
  return ml_collections.ConfigDict(json.loads(CONFIG_JSON))
'''


def run_slice(slice_name: str, config, workdir: str, stage: str = "rl") -> None:
  """Runs one slice's stage, or the whole run (module docstring)."""
  if stage not in STAGES:
    raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
  if config.logging.wandb.enabled:
    import_wandb()  # a missing package fails here, not after the warm start
  mode = parse_mode(str(config.experiment.mode))  # parsed once: every stage below gets it
  if stage in EVAL_STAGES:
    if slice_name != "all":
      raise ValueError(f"stage {stage!r} evaluates the whole system: slice 'all', got "
                       f"{slice_name!r}")
    if stage == "select_stage2":
      from mgrpo_jax.slices.curriculum import run_selection_stage
      run_selection_stage(config, mode, workdir)
    else:
      from mgrpo_jax.slices.pipeline import run_evaluation_stage
      run_evaluation_stage(config, mode, workdir, stage)
  elif stage == "warm_start":
    if slice_name not in ("main", "sub"):
      raise ValueError(f"stage 'warm_start' runs one agent: slice 'main' or 'sub', got "
                       f"{slice_name!r} (slice 'all' runs every stage)")
    from mgrpo_jax.warm_start.stage import warm_start_agent
    warm_start_agent(config, mode, workdir, slice_name)
  elif slice_name == "main":
    from mgrpo_jax.slices.main_slice import run_main_slice
    run_main_slice(config, mode, workdir)
  elif slice_name == "sub":
    from mgrpo_jax.slices.sub_slice import run_sub_slice
    run_sub_slice(config, mode, workdir)
  elif slice_name == "both":
    from mgrpo_jax.slices.colocated import run_colocated
    run_colocated(config, mode, workdir)
  elif slice_name == "all":
    from mgrpo_jax.slices.pipeline import run_all
    run_all(config, mode, workdir, run_children)
  else:
    raise ValueError(f"slice must be one of {SLICES}, got {slice_name!r}")


def write_launch_files(config, paths: RunPaths) -> tuple[pathlib.Path, pathlib.Path]:
  """(config file, gin file) that reproduce `config` and the gin bindings in a child."""
  import gin

  folder = paths.local / "launch"
  config_path, gin_path = folder / "config.py", folder / "bindings.gin"
  config_json = json.dumps(json.loads(config.to_json()), sort_keys=True)
  atomic_write(config_path, _CONFIG_FILE.format(config_json=config_json).encode())
  atomic_write(gin_path, gin.config_str().encode())
  return config_path, gin_path


def _relay(prefix: str, stream, out) -> None:
  for line in iter(stream.readline, b""):
    out.write(f"[{prefix}] {line.decode(errors='replace')}")
    out.flush()
  stream.close()


def run_children(config, workdir: str, slices: tuple[str, ...], stage: str) -> None:
  """`stage` of each of `slices` as concurrent child processes; where they cannot share
  the host's accelerators (or `serving.colocate`), the RL slices as one `--slice=both`
  child and other stages one child at a time (module docstring)."""
  accelerators = detect_accelerators()
  if len(slices) > 1 and (cannot_share(accelerators, len(slices), os.environ)
                          or config.serving.colocate):
    for group in [("both",)] if stage == "rl" else [(name,) for name in slices]:
      _run_concurrently(config, workdir, group, stage, accelerators)
    return
  _run_concurrently(config, workdir, slices, stage, accelerators)


def _run_concurrently(config, workdir: str, slices: tuple[str, ...], stage: str,
                      accelerators) -> None:
  """`stage` of each of `slices` as concurrent child processes."""
  paths = RunPaths.from_config(config, workdir)
  config_path, gin_path = write_launch_files(config, paths)
  prefixes = {name: {"all": "eval", "both": "rl"}.get(name, name) for name in slices}
  environments = child_environments(accelerators, tuple(prefixes.values()),
                                    dict(os.environ, PYTHONUNBUFFERED="1"))
  # A SIGTERM to this process stops the children (the `finally` below).
  previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
  children: dict[str, subprocess.Popen] = {}
  relays = []
  failed = None
  try:  # from the first spawn on: a SIGTERM at any point stops what has been started
    for name in slices:
      command = [sys.executable, str(_LAUNCHER), f"--slice={name}", f"--stage={stage}",
                 f"--config={config_path}", f"--workdir={paths.workdir}",
                 f"--gin_file={gin_path}", "--verbosity=-1",
                 *(["--verbose"] if is_verbose() else [])]
      child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=environments[prefixes[name]])
      children[name] = child
      atomic_write(paths.local / "launch" / f"{prefixes[name]}.pid", str(child.pid).encode())
      relay = threading.Thread(target=_relay, args=(prefixes[name], child.stdout, sys.stdout),
                               daemon=True)
      relay.start()
      relays.append(relay)
    while failed is None and any(c.poll() is None for c in children.values()):
      failed = next((n for n, c in children.items() if c.poll() not in (None, 0)), None)
      time.sleep(0.2)
    failed = failed or next((n for n, c in children.items() if c.returncode != 0), None)
  finally:
    for child in children.values():
      _terminate(child)
    for relay in relays:
      relay.join(timeout=5)
    signal.signal(signal.SIGTERM, previous)
  if failed is not None:
    raise SystemExit(f"run_slice('all'): the {prefixes[failed]} process's {stage} stage "
                     f"exited with status {children[failed].returncode}; the other processes "
                     "were stopped")


def _terminate(child: subprocess.Popen, grace_s: float = 10.0) -> None:
  if child.poll() is not None:
    return
  child.send_signal(signal.SIGTERM)
  try:
    child.wait(timeout=grace_s)
  except subprocess.TimeoutExpired:
    child.kill()
    child.wait()
