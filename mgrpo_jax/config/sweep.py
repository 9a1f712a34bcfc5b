"""Named sweeps: ordered lists of runs, each a name and dotted config overrides.

A sweep file (configs/sweeps/<name>.py) defines `get_sweep()` returning a `Sweep`: a
name, the base config (`path.py` or `path.py:preset`, as the launcher's --config) and its
runs. `grid()` builds the cartesian product of `axis()` values with readable run names
(`mgrpo-s0`). `load_sweep()` imports a sweep file and checks every run's overrides against
the config spec, so a typo fails before anything runs. `launch_command()` renders a run as
the launcher's command line, `--config.<key>=<value>` flags that the launcher's config flag
(ml_collections.config_flags) parses back to the same values.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType, ModuleType
from typing import Any

import ml_collections

from mgrpo_jax.config.base import apply_overrides
from mgrpo_jax.config.validate import ConfigError, validate

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_SCALAR_TYPES = (bool, int, float, str)


# Overrides that point every run of a sweep at one persistent compilation cache beside
# the runs' folders (`<sweep workdir>/jax_cache`; the key is relative to each run's
# folder). A sweep's runs compile the same programs (one architecture, the same length
# buckets), so each program compiles once per sweep instead of once per run.
SHARED_COMPILATION_CACHE = MappingProxyType({"experiment.compilation_cache_dir": "../jax_cache"})


class SweepError(ConfigError):
  """A sweep file, a run or one of its overrides is invalid."""


def _check_name(kind: str, name: Any) -> None:
  if not isinstance(name, str) or not _NAME.fullmatch(name):
    raise SweepError(f"{kind} name {name!r}: use letters, digits and . _ + - (it names a "
                     "folder), starting with a letter or digit")


@dataclasses.dataclass(frozen=True)
class Run:
  """One run of a sweep.

  Attributes:
    name: names the run's folder (<sweep workdir>/<name>); letters, digits, `._+-`.
    overrides: dotted config keys to values, e.g. {"experiment.seed": 1}; read-only.
  """

  name: str
  overrides: Mapping[str, Any]

  def __post_init__(self):
    _check_name("run", self.name)
    for key, value in self.overrides.items():
      if not isinstance(key, str) or not key:
        raise SweepError(f"run {self.name!r}: override key {key!r} is not a dotted key")
      if not isinstance(value, _SCALAR_TYPES):
        raise SweepError(f"run {self.name!r}: override {key!r} = {value!r}: values are bool, "
                         f"int, float or str, got {type(value).__name__}")
    object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))


@dataclasses.dataclass(frozen=True)
class Sweep:
  """A named, ordered list of runs over one base config.

  Attributes:
    name: the sweep's name (default workdir runs/<name>).
    base_config: the launcher's --config: a config file path, optionally `:preset`.
    runs: the runs, in launch order; names are unique.
  """

  name: str
  base_config: str
  runs: tuple[Run, ...]

  def __post_init__(self):
    _check_name("sweep", self.name)
    if not isinstance(self.base_config, str) or not self.base_config.split(":", 1)[0]:
      raise SweepError(f"sweep {self.name!r}: base_config must be a config file path "
                       f"('path.py' or 'path.py:preset'), got {self.base_config!r}")
    object.__setattr__(self, "runs", tuple(self.runs))
    if not self.runs:
      raise SweepError(f"sweep {self.name!r} has no runs")
    seen = set()
    for run in self.runs:
      if not isinstance(run, Run):
        raise SweepError(f"sweep {self.name!r}: runs must be Run objects, got {run!r}")
      if run.name in seen:
        raise SweepError(f"sweep {self.name!r}: run name {run.name!r} appears twice")
      seen.add(run.name)

  def select(self, names: Iterable[str]) -> tuple[Run, ...]:
    """The runs named in `names`, in sweep order; an unknown name raises SweepError."""
    wanted = list(names)
    known = {run.name for run in self.runs}
    unknown = [name for name in wanted if name not in known]
    if unknown:
      raise SweepError(f"sweep {self.name!r} has no run {', '.join(map(repr, unknown))}; "
                       f"runs: {', '.join(run.name for run in self.runs)}")
    return tuple(run for run in self.runs if run.name in wanted)


@dataclasses.dataclass(frozen=True)
class Axis:
  """One dimension of a grid: labelled choices, each a dict of overrides.

  Attributes:
    choices: (label, overrides) pairs; labels become parts of run names.
  """

  choices: tuple[tuple[str, Mapping[str, Any]], ...]

  def __post_init__(self):
    if not self.choices:
      raise SweepError("an axis needs at least one choice")

  @property
  def keys(self) -> frozenset[str]:
    return frozenset(key for _, overrides in self.choices for key in overrides)


def axis(key: str, values: Sequence[Any], label: str = "{}") -> Axis:
  """An axis setting one dotted `key` to each of `values`.

  Args:
    key: dotted config key, e.g. "experiment.seed".
    values: the values, in order.
    label: format string of each value's part of the run name, e.g. "s{}" -> "s0",
      "lr{:g}" -> "lr0.001".
  """
  return Axis(tuple((label.format(value), {key: value}) for value in values))


def grid(*axes: Axis, fixed: Mapping[str, Any] | None = None,
         run_id_key: str | None = "experiment.run_id") -> tuple[Run, ...]:
  """The cartesian product of `axes`, the first axis varying slowest.

  Each run is named by its choices' labels joined with "-" (e.g. "mgrpo-s0") and
  overrides `fixed`, then each choice's overrides, then (if `run_id_key`) sets
  `run_id_key` to the run's name.
  """
  if not axes:
    raise SweepError("grid() needs at least one axis")
  for i, a in enumerate(axes):
    for b in axes[i + 1:]:
      if a.keys & b.keys:
        raise SweepError(f"grid(): keys {sorted(a.keys & b.keys)} are set by two axes")
  runs = []
  for combination in itertools.product(*(a.choices for a in axes)):
    name = "-".join(label for label, _ in combination)
    overrides = dict(fixed or {})
    for _, choice in combination:
      overrides.update(choice)
    if run_id_key:
      overrides[run_id_key] = name
    runs.append(Run(name, overrides))
  return tuple(runs)


def _import_file(path: str, module_name: str) -> ModuleType:
  spec = importlib.util.spec_from_file_location(module_name, path)
  if spec is None or spec.loader is None:
    raise ImportError("not a Python file")
  module = importlib.util.module_from_spec(spec)
  sys.modules[module_name] = module  # dataclasses and pickling look modules up here
  try:
    spec.loader.exec_module(module)
  finally:
    sys.modules.pop(module_name, None)
  return module


def _resolve(path: str, root: str | os.PathLike) -> str:
  return path if os.path.isabs(path) else os.path.join(root, path)


def load_config_file(config: str, root: str | os.PathLike = ".") -> ml_collections.ConfigDict:
  """The config of a launcher --config value ('path.py' or 'path.py:arg').

  Like ml_collections.config_flags: the file's get_config() is called with the text after
  the first ':' if there is one, else with no argument. Relative paths are under `root`.
  """
  path, *arg = config.split(":", 1)
  try:
    module = _import_file(_resolve(path, root), "mgrpo_sweep_base_config")
    result = module.get_config(*arg)
  except Exception as e:  # a config file that fails to import or run get_config
    raise SweepError(f"base config {config!r}: {type(e).__name__}: {e}") from e
  if not isinstance(result, ml_collections.ConfigDict):
    raise SweepError(f"base config {config!r}: get_config() returned "
                     f"{type(result).__name__}, not a ConfigDict")
  return result


def _lookup(config: ml_collections.ConfigDict, key: str) -> Any:
  node = config
  for part in key.split("."):
    if not isinstance(node, ml_collections.ConfigDict) or part not in node:
      raise SweepError(f"override {key!r}: config key {key!r} is not a known setting")
    node = node[part]
  return node


def format_override(key: str, value: Any, base_value: Any) -> str:
  """The flag `--config.<key>=<value>` that the launcher parses back to `value`.

  ml_collections.config_flags parses an override with the type of the key's value in the
  base config (`base_value`): a str is taken verbatim, bool as true/false, int and float
  with int()/float(). Raises SweepError when that parse would not give back `value`.
  """
  flag = f"--config.{key}="
  if isinstance(base_value, bool):
    ok = isinstance(value, bool)
  elif isinstance(base_value, int):
    ok = isinstance(value, int) and not isinstance(value, bool)
  elif isinstance(base_value, float):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
  elif isinstance(base_value, str):
    ok = isinstance(value, str) and "\0" not in value
  else:
    ok = False
  if not ok:
    raise SweepError(f"override {key!r} = {value!r}: the launcher parses --config.{key} as "
                     f"{type(base_value).__name__} (the base config holds {base_value!r})"
                     + (" and a command line cannot hold a NUL character"
                        if isinstance(value, str) else ""))
  if isinstance(value, bool):
    return flag + ("true" if value else "false")
  if isinstance(value, (int, float)):
    return flag + repr(value)
  return flag + value


def override_flags(run: Run, base: ml_collections.ConfigDict) -> list[str]:
  """The run's overrides as launcher flags, in the run's order."""
  return [format_override(key, value, _lookup(base, key))
          for key, value in run.overrides.items()]


def launch_command(sweep: Sweep, run: Run, base: ml_collections.ConfigDict, workdir: str, *,
                   slice_name: str = "all", python: str = "python",
                   launcher: str = "launch/tpu_run.py",
                   extra_flags: Sequence[str] = ()) -> list[str]:
  """The launcher command line (argv) of one run, writing to <workdir>/<run.name>.

  Args:
    sweep: the run's sweep (its base_config is the --config value).
    run: the run.
    base: the loaded base config (`load_config_file(sweep.base_config)`).
    workdir: the sweep's folder (a local path or gs://bucket/prefix).
    slice_name: the launcher's --slice.
    python: argv[0].
    launcher: the launcher script.
    extra_flags: launcher flags appended after the overrides.
  """
  return [python, launcher, f"--slice={slice_name}", f"--config={sweep.base_config}",
          f"--workdir={workdir.rstrip('/')}/{run.name}", *override_flags(run, base),
          *extra_flags]


def check_sweep(sweep: Sweep, base: ml_collections.ConfigDict, source: str) -> None:
  """Checks every run's overrides (spec, command-line round trip) and unique run ids.

  Raises:
    SweepError: naming `source` (the sweep file), the run and the key.
  """
  run_ids: dict[str, str] = {}
  for run in sweep.runs:
    config = base.copy_and_resolve_references()
    try:
      apply_overrides(config, dict(run.overrides))
      validate(config)
      override_flags(run, base)
    except ConfigError as e:
      raise SweepError(f"{source}: run {run.name!r}: {e}") from e
    other = run_ids.setdefault(config.experiment.run_id, run.name)
    if other != run.name:
      raise SweepError(f"{source}: runs {other!r} and {run.name!r} have the same "
                       f"experiment.run_id {config.experiment.run_id!r} (it names a run's "
                       "store records and checkpoints); grid() sets it to the run name")


def load_sweep(path: str, root: str | os.PathLike = ".") -> Sweep:
  """Imports the sweep file `path`, calls its get_sweep() and checks every run.

  The sweep's base config is resolved under `root` (the launcher's working directory).

  Raises:
    SweepError: naming the file, and the run and key when an override is bad.
  """
  name = "mgrpo_sweep_" + re.sub(r"\W", "_", os.path.basename(path).removesuffix(".py"))
  try:
    sweep = _import_file(_resolve(path, root), name).get_sweep()
  except SweepError as e:
    raise SweepError(f"{path}: {e}") from e
  except Exception as e:  # a sweep file that fails to import, lacks or fails get_sweep
    raise SweepError(f"{path}: {type(e).__name__}: {e}") from e
  if not isinstance(sweep, Sweep):
    raise SweepError(f"{path}: get_sweep() returned {type(sweep).__name__}, not a Sweep")
  try:
    base = load_config_file(sweep.base_config, root)
  except SweepError as e:
    raise SweepError(f"{path}: {e}") from e
  check_sweep(sweep, base, path)
  return sweep
