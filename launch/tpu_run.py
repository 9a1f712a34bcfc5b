r"""Runs M-GRPO training: the main agent's slice, the sub-agent's slice, or both.

  python launch/tpu_run.py --slice=all  --config=configs/local_demo.py
  python launch/tpu_run.py --slice=main --config=configs/default.py:paper --workdir=gs://b/run1
  python launch/tpu_run.py --slice=sub  --config=configs/default.py:paper --workdir=gs://b/run1

--slice=all starts both slices on this machine, as two processes sharing the local store.
Config keys are overridden with --config.<key>=<value> (all keys: mgrpo_jax/config/spec.py);
user components (e.g. a reward function) are injected with --gin_file/--gin_bindings
(mgrpo_jax/plugins.py). A bad flag, config key or gin binding exits with status 2 and
one line naming it.
"""

from __future__ import annotations

import sys

from absl import app, flags
from ml_collections import config_flags

from mgrpo_jax.config import ConfigError, iter_fields, validate
from mgrpo_jax.plugins import parse_gin

_KNOWN_KEYS = {key for key, _ in iter_fields()}


def _fail(message: str) -> None:
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
    "slice", "all", ["main", "sub", "all"],
    "Which agent's slice to run: 'main' (the planner M: rollouts, rewards, M's update), "
    "'sub' (the sub-agent S: serves S's turns, waits for M's outcomes, S's update), or "
    "'all' (both, as two local processes).")
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
_PRINT_CONFIG = flags.DEFINE_bool(
    "print_config", False, "Print the validated config and the gin bindings, then exit.")

def _parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing where any bad flag exits 2 with one line."""
  try:
    return flags.FLAGS(argv)
  except SystemExit:
    # absl exits 1 after printing --help/--helpfull; asking for help is not an error.
    if any(arg.split("=")[0] in ("--help", "-h", "-?", "--helpshort", "--helpfull")
           for arg in argv[1:]):
      sys.exit(0)
    raise
  except flags.Error as e:
    _fail(str(e))
  except (AttributeError, KeyError) as e:
    _fail(f"bad config override: {e}")
  raise AssertionError("unreachable")


def _load_config():
  try:
    config = _CONFIG.value
    validate(config)
  except ConfigError as e:
    _fail(str(e))
  except Exception as e:  # a config file that fails to import or run get_config
    _fail(f"{flags.FLAGS['config'].serialize()}: {type(e).__name__}: {e}")
  return config


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    _fail(f"unexpected arguments: {' '.join(argv[1:])}")
  config = _load_config()
  try:
    parse_gin(_GIN_FILE.value, _GIN_BINDINGS.value)
  except Exception as e:  # gin reports parse and binding errors with several types
    _fail(f"gin: {e}")
  if _PRINT_CONFIG.value:
    import gin

    sys.stdout.write(str(config))
    sys.stdout.write("\n# gin bindings\n" + gin.config_str() + "\n")
    return
  from mgrpo_jax.training import run_slice

  run_slice(_SLICE.value, config, _WORKDIR.value or f"runs/{config.experiment.run_id}")


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_flags)
