r"""Runs M-GRPO training: the main agent's slice, the sub-agent's slice, or both.

  python launch/tpu_run.py --slice=all  --config=configs/local_demo.py
  python launch/tpu_run.py --slice=main --config=configs/default.py:paper --workdir=gs://b/run1
  python launch/tpu_run.py --slice=sub  --config=configs/default.py:paper --workdir=gs://b/run1

--slice=all starts both slices on this machine, as two processes sharing the local store
(first each agent's warm start, in parallel, when warm_start.enabled). One agent's warm
start alone, e.g. on its own slice before the RL run:

  python launch/tpu_run.py --slice=main --stage=warm_start --config=configs/local_demo.py

The console names each stage as it starts and ends (the world build, each evaluation with
its seconds), a training step in one short line (the step, R_M, correct, format and
sub-calls for M, R_S and calls for S, seconds per step; --verbose: the full line, every
phase's seconds and the throughputs; metrics.jsonl holds every number either way), and
ends with the report's files.

The launcher first re-executes itself once with glibc's huge-page malloc tunable
(mgrpo_jax/utils/host_memory.py), and every process of a run keeps its compiled programs
in jax_cache beside the workdir (<workdir>/../jax_cache, experiment.compilation_cache_dir;
mgrpo_jax/training/compilation_cache.py), where the next command finds them.

Multi-host slices: every host of a slice runs the same command with
--coordinator_address=auto (TPU pod slices: the hosts are found from the environment) or
--coordinator_address=host:port --num_processes=P --process_id=i; the hosts then form one
global mesh (mgrpo_jax/scale/distributed.py).

Memory planning without the hardware (docs/SCALING.md):

  python launch/tpu_run.py --dry_run --slice=main --config.main.model.preset=qwen2_5_7b \
      --config.main.mesh.fsdp=16 --config.main.mesh.tensor=4 --dry_run_hbm_gib=16

prints, per agent, every parameter group's PartitionSpec and the per-device bytes of
parameters, optimizer state, gradients, activations and KV cache on the config's
<agent>.mesh shape, using abstract shapes only (no devices, nothing allocated).

A run records the config keys that define it in <workdir>/run_config.json; rerunning
with another value of one of them exits 2 naming it (the keys that may change on resume:
mgrpo_jax/slices/run_fingerprint.py, RESUMABLE_KEYS). Each computing process records its
machine and jax version in <workdir>/machines/<slice>_<stage>.json (float results, and so
accuracies, differ between CPU models: mgrpo_jax/metrics/machine.py); report/summary.txt
ends with the line naming them.

Config keys are overridden with --config.<key>=<value> (all keys: mgrpo_jax/config/spec.py);
user components (e.g. a reward function) are injected with --gin_file/--gin_bindings
(mgrpo_jax/plugins.py). A bad flag, config key or gin binding exits with status 2 and
one line naming it.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from mgrpo_jax.config import ConfigError, check_environment, iter_fields, validate
from mgrpo_jax.plugins import parse_gin
from mgrpo_jax.utils import cli, host_memory

_KNOWN_KEYS = {key for key, _ in iter_fields()}


def _fail(message: str) -> NoReturn:
  """Exits with status 2 after one line: the first and last lines of a long message."""
  lines = [line.strip() for line in message.splitlines() if line.strip()]
  if len(lines) > 1:
    lines = [lines[0], lines[-1]]
  sys.stderr.write(f"tpu_run.py: error: {' '.join(lines)}\n")
  sys.exit(2)


def _reject_unknown_overrides(argv: list[str]) -> None:
  for arg in argv[1:]:
    if arg.startswith("--config.") and "=" in arg:
      key = arg[len("--config."):].split("=", 1)[0]
      if key not in _KNOWN_KEYS:
        _fail(f"--config.{key}: config key {key!r} is not a known setting "
              "(all keys: mgrpo_jax/config/spec.py)")


# config_flags reads sys.argv when the flag is defined, so unknown keys are caught first.
_reject_unknown_overrides(sys.argv)

_SLICE = flags.DEFINE_enum(
    "slice", "all", ["main", "sub", "both", "all"],
    "Which agent's slice to run: 'main' (the planner M: rollouts, rewards, M's update), "
    "'sub' (the sub-agent S: serves S's turns, waits for M's outcomes, S's update), "
    "'both' (the two RL slices in this one process, sharing its devices: "
    "mgrpo_jax/slices/colocated.py), or 'all' (every stage; the slices as two local "
    "processes, or as one where the host's accelerators cannot be shared, e.g. one TPU "
    "chip, or with serving.colocate).")
_STAGE = flags.DEFINE_enum(
    "stage", "rl", ["rl", "warm_start", "eval_before", "eval_after", "select_stage2"],
    "With --slice=main or --slice=sub: 'rl' (M-GRPO, stage 2) or 'warm_start' (stage 1 of "
    "that agent alone: the noisy oracles' demonstrations, copy curriculum and SFT, saved "
    "under the run's warm_start folder). --slice=all runs every stage, starting each "
    "agent's warm start and RL as --slice=main|sub processes and each held-out "
    "evaluation as a --slice=all --stage=eval_before|eval_after process (and, with "
    "curriculum.stage2_steps, the choice of stage 2's questions as a --slice=all "
    "--stage=select_stage2 process).")
_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/default.py",
    "Config file defining get_config(arg); 'path.py:arg' passes arg (a preset). Override "
    "single keys with --config.<key>=<value>.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", "",
    "Run folder (a local path or gs://bucket/prefix) for checkpoints, metrics and, unless "
    "store.uri is set, the statistics store. Empty: runs/<experiment.run_id>.")
_GIN_FILE = flags.DEFINE_multi_string(
    "gin_file", [], "Gin file binding user components (see mgrpo_jax/plugins.py); repeatable.")
_GIN_BINDINGS = flags.DEFINE_multi_string(
    "gin_bindings", [], "One gin binding, e.g. "
    "\"mgrpo_jax.plugins.main_reward_fn.fn = @my_reward\"; repeatable, applied after files.")
_VERBOSE = flags.DEFINE_bool(
    "verbose", False,
    "Full console lines: a training step's line with the slice's chosen metrics, every "
    "phase's seconds and the throughputs, instead of the step, its headline numbers (R_M, "
    "correct, format, sub-calls; R_S, calls) and seconds per step. metrics.jsonl holds "
    "every number either way.")
_PRINT_CONFIG = flags.DEFINE_bool(
    "print_config", False, "Print the validated config and the gin bindings, then exit.")
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False,
    "Plan memory instead of training: for each agent of --slice, build its train state "
    "abstractly (jax.eval_shape) on a mesh of the config's <agent>.mesh.{data,fsdp,tensor} "
    "shape, needing neither those devices nor any memory, print each parameter group's "
    "PartitionSpec and the per-device bytes of parameters, optimizer state, gradients, "
    "activations and KV cache, then exit.")
_DRY_RUN_HBM_GIB = flags.DEFINE_float(
    "dry_run_hbm_gib", 0.0,
    "With --dry_run: the accelerator memory per chip in GiB to check the peaks against "
    "(v5e 16, v4 32, v5p 95, H200 141); 0: no check.", lower_bound=0.0)
_DRY_RUN_PLATFORM = flags.DEFINE_enum(
    "dry_run_platform", "tpu", ["tpu", "gpu", "cpu"],
    "With --dry_run: the platform the run will use, which decides the attention kernel "
    "<agent>.model.attention takes there (splash on a TPU, cuDNN on a GPU where they "
    "apply, else XLA) and so the attention line of the plan.")
_COORDINATOR_ADDRESS = flags.DEFINE_string(
    "coordinator_address", "",
    "Multi-host slices: '' (one process), 'auto' (jax.distributed.initialize() finds the "
    "hosts, e.g. on a TPU pod slice) or host:port of process 0's coordinator; needs "
    "--slice=main or --slice=sub.")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", 1, "With --coordinator_address=host:port: processes (hosts) in the slice.",
    lower_bound=1)
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", 0,
    "With --coordinator_address=host:port: this process's index in [0, --num_processes).",
    lower_bound=0)

def _parse_flags(argv: list[str]) -> list[str]:
  return cli.parse_flags(argv, _fail)


def _load_config():
  try:
    config = _CONFIG.value
    validate(config)
  except ConfigError as e:
    _fail(str(e))
  except Exception as e:  # a config file that fails to import or run get_config
    _fail(f"{flags.FLAGS['config'].serialize()}: {type(e).__name__}: {e}")
  return config


def _distributed_config():
  """The multi-host flags, checked together; a bad combination exits 2."""
  from mgrpo_jax.scale.distributed import DistributedConfig

  try:
    distributed = DistributedConfig(coordinator_address=_COORDINATOR_ADDRESS.value,
                                    num_processes=_NUM_PROCESSES.value,
                                    process_id=_PROCESS_ID.value)
  except ValueError as e:
    _fail(f"--coordinator_address/--num_processes/--process_id: {e}")
  if _STAGE.value == "warm_start" and _SLICE.value in ("all", "both"):
    _fail(f"--stage={_STAGE.value} needs --slice=main or --slice=sub: --slice=all runs every "
          "stage")
  if _STAGE.value in ("eval_before", "eval_after", "select_stage2") and _SLICE.value != "all":
    _fail(f"--stage={_STAGE.value} evaluates the whole system: it needs --slice=all")
  if distributed.mode != "single" and _SLICE.value in ("all", "both"):
    _fail("--coordinator_address needs --slice=main or --slice=sub: each agent's slice is "
          "its own multi-host job")
  return distributed


def _dry_run(config) -> None:
  """Prints the memory plan of each agent of --slice (no devices, nothing allocated)."""
  from mgrpo_jax.scale.planner import format_plan, plan_from_config

  roles = ("main", "sub") if _SLICE.value == "all" else (_SLICE.value,)
  try:
    plans = plan_from_config(config, roles, platform=_DRY_RUN_PLATFORM.value)
  except ValueError as e:
    _fail(f"--dry_run: {e}")
  sys.stdout.write("\n\n".join(format_plan(plan, _DRY_RUN_HBM_GIB.value) for plan in plans)
                   + "\n")


def _record_machine(workdir: str, role: str) -> None:
  """Records where this process computes (`metrics/machine.py`); warns when a resumed role
  runs on a machine whose float results differ from the last one's."""
  from mgrpo_jax.metrics import machine
  from mgrpo_jax.store.folder import open_folder

  description = machine.describe()
  try:
    changed = machine.record(open_folder(workdir), role, description)
  except ValueError as e:
    _fail(str(e))
  if changed:
    absl_logging.warning(
        "%s: %s ran on another machine before (it differs in %s); this launch runs on %s, so "
        "its steps round floats otherwise than the earlier ones", workdir, role,
        ", ".join(changed), machine.label(description))


def _check_workdir(config, workdir: str) -> None:
  """Exits 2 naming the folder unless the run's local folder (the workdir, or a `gs://`
  workdir's `runs_local/<run_id>`) can be created and written."""
  from mgrpo_jax.training.paths import RunPaths

  folder = RunPaths.from_config(config, workdir).local
  probe = folder / f".write-check-{os.getpid()}"
  try:
    folder.mkdir(parents=True, exist_ok=True)
    probe.write_bytes(b"")
    probe.unlink()
  except OSError as e:
    _fail(f"--workdir={workdir}: cannot create or write {e.filename or folder} "
          f"({e.strerror or e})")


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    _fail(f"unexpected arguments: {' '.join(argv[1:])}")
  config = _load_config()
  distributed = _distributed_config()
  planning_only = _PRINT_CONFIG.value or _DRY_RUN.value
  orchestrating = _SLICE.value == "all" and _STAGE.value == "rl"
  workdir = _WORKDIR.value or f"runs/{config.experiment.run_id}"
  if not planning_only:  # what the config names outside itself, before JAX starts
    try:
      check_environment(config)  # the token's variable and the TLS files
    except ConfigError as e:
      _fail(str(e))
    _check_workdir(config, workdir)
  if planning_only or orchestrating:
    import jax

    # Abstract shapes only, or the --slice=all parent, whose children do the work: never
    # open (and hold) the accelerators of the host.
    jax.config.update("jax_platforms", "cpu")
  else:
    from mgrpo_jax.scale.distributed import initialize

    initialize(distributed)  # before any JAX computation, including imports that run one
  import mgrpo_jax.slices  # the slices' step protocol (run_slice)
  from mgrpo_jax.scale.writers import set_verbose

  set_verbose(_VERBOSE.value)

  if not planning_only:
    from mgrpo_jax.scale.distributed import is_writer
    from mgrpo_jax.slices.run_fingerprint import check_fingerprint
    from mgrpo_jax.training.compilation_cache import enable_compilation_cache

    try:
      if is_writer():  # process 0 records the run (the others may name another store)
        check_fingerprint(config, workdir)  # a resume may not change what defines the run
    except ConfigError as e:
      _fail(str(e))
    enable_compilation_cache(config, workdir)  # before the first compilation
    if not orchestrating and is_writer():
      for role in ("main", "sub") if _SLICE.value == "both" else (_SLICE.value,):
        _record_machine(workdir, f"{role}_{_STAGE.value}")

  try:
    parse_gin(_GIN_FILE.value, _GIN_BINDINGS.value)
  except Exception as e:  # gin reports parse and binding errors with several types
    _fail(f"gin: {e}")
  if _PRINT_CONFIG.value:
    import gin

    sys.stdout.write(str(config))
    sys.stdout.write("\n# gin bindings\n" + gin.config_str() + "\n")
    return
  if _DRY_RUN.value:
    _dry_run(config)
    return
  try:
    mgrpo_jax.slices.run_slice(_SLICE.value, config, workdir, _STAGE.value)
  except ConfigError as e:  # e.g. a shared warm start computed from other values
    _fail(str(e))


if __name__ == "__main__":
  host_memory.reexec_with_huge_pages()  # before anything allocates (its module docstring)
  app.run(main, flags_parser=_parse_flags)
