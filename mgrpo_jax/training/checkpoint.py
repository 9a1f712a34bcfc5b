"""Orbax checkpoints of one agent: the train state plus JSON metadata, local or `gs://`.

Each agent has its own checkpoint directory (e.g. `<workdir>/checkpoints/main`) managed
by one `orbax.checkpoint.CheckpointManager`. Checkpoint `t` (t = `state.step`, the
optimizer steps taken) holds two items:
  state     the whole `TrainState` (params, optimizer state, step, PRNG key data,
            reference params if any), saved as sharded arrays;
  metadata  a JSON object chosen by the caller (data iterator state, policy version,
            the store step it belongs to, ...).
Saves are asynchronous by default (the device-to-host copy happens before `save`
returns, so the state may be donated to the next update right away); the newest `keep`
checkpoints are kept, and with `keep_period` p > 0 also every checkpoint whose step is a
multiple of p (the held-out accuracy curve evaluates those after RL). Restores read the
arrays straight into the shardings of the current `StateLayout`, so a run may resume on
a different mesh shape.

A newest checkpoint that cannot be restored (a damaged file, bit rot, a half-copied
folder) is moved aside to `<step>.corrupt` with a warning naming it, and the previous
one is restored instead; the step is then saved afresh. When none can be restored the
error names the newest.

For `gs://` directories tensorstore needs credentials, or, against an emulator, the
variables of `mgrpo_jax.store.emulator.emulator_env`.

Orbax's warning "Waiting for previous save to complete took ... seconds" is not shown
(`_OwnWaitFilter`): the wait it reports is the caller's own `wait_until_finished`, which
a slice calls after every save (a step's ack promises a durable checkpoint); orbax adds
up every wait of the main thread and reports it at the next save.

Orbax keeps process-wide state for a save (operation ids, the signals its directory
creation and commit wait on), so two managers saving at once in one process (the two
slices of `--slice=both`, each in its own thread) can finalise each other's folders
("File exists", a missing `metadata`). Every orbax call here therefore runs alone in the
process (`_alone`): it takes one process-wide lock and first waits for every live
checkpointer's pending asynchronous save.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import orbax.checkpoint as ocp
from etils import epath

from mgrpo_jax.training.train_state import StateLayout, TrainState


class _OwnWaitFilter(logging.Filter):
  """Drops orbax's warning about the time a save waited for the previous one (module
  docstring); every other record passes."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Waiting for previous save to complete")


logging.getLogger("absl").addFilter(_OwnWaitFilter())  # orbax logs through absl's logger


_ORBAX_LOCK = threading.RLock()
_LIVE: weakref.WeakSet[AgentCheckpointer] = weakref.WeakSet()


@contextlib.contextmanager
def _alone() -> Iterator[None]:
  """Holds the process-wide orbax lock with no asynchronous save of any live checkpointer
  still running (module docstring)."""
  with _ORBAX_LOCK:
    for checkpointer in list(_LIVE):
      checkpointer._manager.wait_until_finished()  # noqa: SLF001 (same class)
    yield


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
  """Checkpoint policy (keys `checkpoint.*`).

  Attributes:
    keep: number of newest checkpoints kept.
    async_save: write in a background thread.
    keep_period: also keep checkpoints whose step is a multiple of this (0: none).
  """

  keep: int = 3
  async_save: bool = True
  keep_period: int = 0

  def __post_init__(self):
    if self.keep < 1:
      raise ValueError(f"checkpoint.keep must be >= 1, got {self.keep}")
    if self.keep_period < 0:
      raise ValueError(f"checkpoint.keep_period must be >= 0, got {self.keep_period}")

  @classmethod
  def from_config(cls, checkpoint: Any) -> CheckpointConfig:
    """Builds it from the `checkpoint` ConfigDict section."""
    return cls(keep=int(checkpoint["keep"]),
               async_save=bool(checkpoint["async_save"]),
               keep_period=int(checkpoint["keep_period"]))


def _resolve(directory: str | os.PathLike[str]) -> str:
  text = os.fspath(directory)
  return text if "://" in text else os.path.abspath(text)


class AgentCheckpointer:
  """Saves and restores one agent's `TrainState` and metadata.

  Example:
    checkpointer = AgentCheckpointer(workdir + "/checkpoints/main", layout)
    restored = checkpointer.restore()          # None on a fresh start
    if restored is not None:
      state, metadata = restored
    ...
    checkpointer.save(state, metadata={"data_iterator": ..., "policy_version": 3})
    checkpointer.close()                       # waits for pending saves
  """

  def __init__(self, directory: str | os.PathLike[str], layout: StateLayout,
               config: CheckpointConfig = CheckpointConfig()):
    self.directory = _resolve(directory)
    self._layout = layout
    options = ocp.CheckpointManagerOptions(
        max_to_keep=config.keep, keep_period=config.keep_period or None,
        enable_async_checkpointing=config.async_save, create=True)
    with _alone():
      self._manager = ocp.CheckpointManager(self.directory, options=options)
    _LIVE.add(self)

  def save(self, state: TrainState, *, metadata: dict[str, Any] | None = None,
           force: bool = False) -> bool:
    """Saves `state` as checkpoint `state.step`.

    Args:
      state: the agent's state (may be donated to an update right after the call).
      metadata: JSON-serializable dict stored next to it.
      force: passed to orbax: save even where its own policy would skip the step.

    Returns:
      Whether a save was started; False when checkpoint `state.step` already exists (a
      resumed run re-saving the step it restored) or orbax skipped it.
    """
    step = int(state.step)
    args = ocp.args.Composite(state=ocp.args.StandardSave(state),
                              metadata=ocp.args.JsonSave(dict(metadata or {})))
    with _alone():
      if step in self._manager.all_steps():
        return False
      return self._manager.save(step, args=args, force=force)

  def restore(self, step: int | None = None) -> tuple[TrainState, dict[str, Any]] | None:
    """(state, metadata) of checkpoint `step` (default: the latest), or None if none.

    The arrays are placed with the shardings of the layout given at construction. With
    no `step`, a checkpoint that fails to restore is moved aside and the previous one is
    tried (the module docstring); an explicit `step` that fails raises.
    """
    with _alone():
      if step is not None:
        if step not in self._manager.all_steps():
          raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory}; "
                                  f"available: {self.all_steps()}")
        return self._restore(step)
      return self._restore_newest_restorable()

  def _restore_newest_restorable(self) -> tuple[TrainState, dict[str, Any]] | None:
    steps = sorted(self._manager.all_steps(), reverse=True)
    failed: list[tuple[int, Exception]] = []
    for candidate in steps:
      try:
        restored = self._restore(candidate)
      except Exception as e:  # noqa: BLE001 (orbax and tensorstore raise many types)
        failed.append((candidate, e))
        continue
      for bad, error in failed:
        aside = self._move_aside(bad)
        logging.warning("checkpoint %s/%d (step %d) cannot be restored (%s: %s); moved it to "
                        "%s and falling back to step %d", self.directory, bad, bad,
                        type(error).__name__, str(error)[:500], aside, candidate)
      return restored
    if failed:
      step, error = failed[0]
      raise RuntimeError(f"no checkpoint in {self.directory} can be restored (steps "
                         f"{[s for s, _ in failed]}); the newest, {self.directory}/{step}: "
                         f"{type(error).__name__}: {error}") from error
    return None

  def _restore(self, step: int) -> tuple[TrainState, dict[str, Any]]:
    args = ocp.args.Composite(state=ocp.args.StandardRestore(self._layout.abstract),
                              metadata=ocp.args.JsonRestore())
    restored = self._manager.restore(step, args=args)
    return restored.state, dict(restored.metadata)

  def _move_aside(self, step: int) -> str:
    """Renames checkpoint `step` to `<step>.corrupt` (kept for inspection, invisible to
    orbax) and returns the new path."""
    folder = epath.Path(self.directory)
    aside = folder / f"{step}.corrupt"
    suffix = 1
    while aside.exists():
      aside = folder / f"{step}.corrupt{suffix}"
      suffix += 1
    (folder / str(step)).rename(aside)
    self._manager.reload()
    return os.fspath(aside)

  def latest_step(self) -> int | None:
    with _ORBAX_LOCK:
      return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    with _ORBAX_LOCK:
      return sorted(self._manager.all_steps())

  def wait_until_finished(self) -> None:
    """Blocks until pending asynchronous saves are written."""
    with _ORBAX_LOCK:
      self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and releases the manager."""
    with _alone():
      _LIVE.discard(self)
      self._manager.close()

  def __enter__(self) -> AgentCheckpointer:
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()


def save_params(directory: str | os.PathLike[str], params: Any, *,
                metadata: dict[str, Any] | None = None) -> None:
  """Saves a parameter tree alone (initial weights, e.g. a warm start) and waits for it.

  Unlike an `AgentCheckpointer` state, the tree holds no optimizer or reference policy,
  so any run of the same model shape can start from it (`restore_params`).
  """
  options = ocp.CheckpointManagerOptions(max_to_keep=1, enable_async_checkpointing=False,
                                         create=True)
  with _alone(), ocp.CheckpointManager(_resolve(directory), options=options) as manager:
    manager.save(0, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                            metadata=ocp.args.JsonSave(dict(metadata or {}))),
                 force=True)
    manager.wait_until_finished()


def restore_params(directory: str | os.PathLike[str], abstract_params: Any
                   ) -> tuple[Any, dict[str, Any]]:
  """(params, metadata) saved by `save_params`, placed as `abstract_params` says.

  Args:
    directory: the folder given to `save_params`.
    abstract_params: a tree of `jax.ShapeDtypeStruct`s with shardings (e.g.
      `layout.abstract.params`); a shape mismatch raises orbax's error naming the leaf.
  """
  path = _resolve(directory)
  with _alone(), ocp.CheckpointManager(path) as manager:
    step = manager.latest_step()
    if step is None:
      raise FileNotFoundError(f"{path} holds no parameter checkpoint")
    restored = manager.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(abstract_params), metadata=ocp.args.JsonRestore()))
  return restored.params, dict(restored.metadata)
