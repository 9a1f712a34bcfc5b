"""What a warm start is computed from, recorded in its folder, so a shared folder is reused
only by runs that would compute the same warm start.

`warm_start.dir` lets runs share one warm start: the arms of the paper's comparison that
differ only in their RL (mgrpo, frozen_sub, no_alignment) load one folder per seed. The
first run that builds a folder writes `warm_start_config.json` in it: every config key
but `NOT_WARM_STARTED` (keys that name a run or shape only its RL, evaluation, logging
or infrastructure), and what the mode decides of the warm start (the warm-started
agents, whose oracles demonstrate, M's role). A later run that finds the folder
compares its own values with them and stops, naming the first key that differs, where
it used to load, silently, a warm start computed for another world, seed, model or set
of demonstrations. A folder built before this record existed is reused as it is.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from mgrpo_jax.config import ConfigError, flat_values
from mgrpo_jax.config.modes import Mode
from mgrpo_jax.utils.atomic_files import atomic_write

CONFIG_NAME = "warm_start_config.json"
# Keys (or groups, ending in ".") the warm start never reads: the run's names and
# length, RL's batch, advantages, rewards, optimizer and loss, where and how things are
# stored, served, logged and evaluated, and the checkpoints the RL slices start from
# (the warm start itself), and the lengths RL batches are padded to, and RL's tool backend
# (the demonstrations read the generated worlds' indexes). `mgrpo.max_sub_calls` is read:
# it bounds the demonstrations' delegations. `experiment.mode` enters as `mode_values`.
NOT_WARM_STARTED = (
    "experiment.name", "experiment.run_id", "experiment.mode", "experiment.num_steps",
    "experiment.compilation_cache_dir", "logging.", "eval.", "serving.", "store.",
    "checkpoint.", "rewards.", "curriculum.", "warm_start.dir", "tools.backend", "tools.web.",
    "mgrpo.queries_per_step", "mgrpo.rollouts_per_query", "mgrpo.aligned_sub_calls",
    "mgrpo.alignment", "mgrpo.duplicate_weight", "mgrpo.advantage_std",
    "mgrpo.advantage_eps", "mgrpo.staleness",
    "mgrpo.queue_calls", "mgrpo.queue_group",
    *(f"{role}.{group}" for role in ("main", "sub")
      for group in ("optim.", "loss.", "mesh.", "sampling.", "model.init_checkpoint",
                    "limits.shortest_train_length")),
)


def mode_values(mode: Mode) -> dict[str, Any]:
  """What `experiment.mode` decides of a warm start: its agents, the mode whose oracles
  demonstrate, M's spec role."""
  return {"mode.agents": list(mode.agents), "mode.demonstration": mode.demonstration.name,
          "mode.main_role": mode.main_role}


def defining_values(config, mode: Mode) -> dict[str, Any]:
  """{key: value} that a warm start under `config` (in `mode`, its `experiment.mode`) is
  computed from (module docstring)."""
  values = flat_values(config, excluding=NOT_WARM_STARTED)
  values.update(mode_values(mode))
  return dict(sorted(values.items()))


def check_or_record(config, mode: Mode, folder: pathlib.Path, *, built: bool) -> None:
  """Records `config`'s defining values in `folder`, or checks them against the record.

  Args:
    config: the run's config.
    mode: its `experiment.mode`, parsed.
    folder: the warm start's folder (`training.paths.warm_start_folder`).
    built: whether the folder already holds a warm start (or an agent's part of one);
      such a folder without a record was built before records existed, and is neither
      checked nor recorded.

  Raises:
    ConfigError: naming the record and the first key whose value differs (the record and
      the warm start are left as they are).
  """
  path = folder / CONFIG_NAME
  values = defining_values(config, mode)
  if not path.exists():
    if not built:
      atomic_write(path, json.dumps(values, indent=1).encode())
    return
  try:
    recorded = json.loads(path.read_text())
  except ValueError as e:
    raise ConfigError(f"{path}: not a warm start record ({e}); restore it or use another "
                      "warm_start.dir") from None
  # Keys only one side knows (added or removed by another version) are not compared.
  changed = [key for key in sorted(recorded.keys() & values.keys())
             if json.dumps(recorded[key]) != json.dumps(values[key])]
  if changed:
    key = changed[0]
    more = f" (and {len(changed) - 1} more: {', '.join(changed[1:4])})" if len(changed) > 1 else ""
    raise ConfigError(
        f"warm start folder {folder} was computed with {key}={recorded[key]!r}, but this "
        f"run has {values[key]!r}{more} ({path}); use another warm_start.dir, or the "
        "values it was computed with")
