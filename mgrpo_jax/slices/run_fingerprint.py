"""The config keys that define a run, recorded in its workdir: a resume may not change them.

The first launch of a run writes `<workdir>/run_config.json` (write-once, through the
store layer, so a `gs://` workdir works too): every config key except
`RESUMABLE_KEYS`, with its value. Every later launch with that workdir compares its
config with it and refuses a different value, naming the key (`launch/tpu_run.py`
exits 2): a resumed run with another K, another reward or another model would mix two
experiments in one set of checkpoints and records.
"""

from __future__ import annotations

import json
from typing import Any

from mgrpo_jax.config import ConfigError, flat_values
from mgrpo_jax.store import StoreConflictError, open_store

FINGERPRINT_KEY = "run_config.json"

# Keys (or groups, ending in ".") that may change when a run resumes, because they change
# how long it runs, what it reports, or where and how it waits, never what a step
# computes:
RESUMABLE_KEYS: tuple[str, ...] = (
    "experiment.num_steps",  # extending (or shortening) a run is resuming it
    "experiment.name",  # a label for reports
    "experiment.compilation_cache_dir",  # where compiled programs are cached
    "rewards.judge.cache_dir",  # where the judge model's replies are cached
    "logging.",  # what is logged, how often
    "eval.",  # held-out evaluation reads checkpoints; it never feeds training
    "serving.",  # where the service listens, its token and the clients' deadlines
    "store.wait_timeout_s",  # how long a slice waits for the other
    "checkpoint.async_save",  # how checkpoints are written
    "checkpoint.keep",  # which old checkpoints are kept (the pipeline sets keep_period
    "checkpoint.keep_period",  # from eval.every)
    "main.mesh.", "sub.mesh.",  # restores reshard onto any mesh shape
    "curriculum.",  # stage 2 is its own run after this one (slices/curriculum.py)
)
# Keys whose empty value means "derived by the pipeline": `--slice=all` starts its RL
# slices from the warm start (`pipeline.with_init_checkpoints`), which `warm_start.*`
# defines. Empty matches any value; two different non-empty values do not.
_EMPTY_MATCHES_ANY = ("main.model.init_checkpoint", "sub.model.init_checkpoint")


def defining_values(config) -> dict[str, Any]:
  """The run-defining keys of `config` (all but `RESUMABLE_KEYS`) and their values."""
  return flat_values(config, excluding=RESUMABLE_KEYS)


def fingerprint_bytes(config) -> bytes:
  return json.dumps(defining_values(config), sort_keys=True, indent=1).encode()


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
  """The keys whose values differ (keys only one side knows are not compared)."""
  out = []
  for key in sorted(recorded.keys() & current.keys()):
    before, now = recorded[key], current[key]
    if key in _EMPTY_MATCHES_ANY and "" in (before, now):
      continue
    if json.dumps(before) != json.dumps(now):
      out.append(key)
  return out


def check_fingerprint(config, workdir: str) -> None:
  """Records the run's defining keys in `workdir`, or checks `config` against them.

  Raises:
    ConfigError: naming the first key whose value differs from the recorded one.
  """
  store = open_store(workdir)
  data = fingerprint_bytes(config)
  try:
    store.put(FINGERPRINT_KEY, data)
    return
  except StoreConflictError:
    pass
  where = f"{workdir.rstrip('/')}/{FINGERPRINT_KEY}"
  try:
    recorded = json.loads(store.get(FINGERPRINT_KEY))
  except ValueError as e:
    raise ConfigError(f"{where}: not a run fingerprint ({e}); restore it or use a new "
                      "workdir") from None
  changed = differences(recorded, defining_values(config))
  if not changed:
    return  # the same values, written by another version (key order, new keys)
  key = changed[0]
  more = f" (and {len(changed) - 1} more: {', '.join(changed[1:4])})" if len(changed) > 1 else ""
  raise ConfigError(
      f"config key {key!r} is {defining_values(config)[key]!r}, but the run in {workdir} was "
      f"started with {recorded[key]!r}{more}; a resumed run may only change "
      f"{', '.join(RESUMABLE_KEYS)} (run_fingerprint.RESUMABLE_KEYS): restore the value "
      "or start a new run in another workdir")
