"""Weights & Biases as a second sink of a slice's scalar metrics (`logging.wandb.*`).

Optional: `pip install 'mgrpo_jax[wandb]'`. Each slice logs its own W&B run, grouped by
the experiment's run id and named `<run_id>/<slice>`, with the whole config. The W&B id
of a slice's run is kept in `<logdir>/wandb_id`, so a slice restarted from its checkpoint
resumes the same W&B run instead of starting another. With `mode="offline"` the run is
written under `<logdir>/wandb/` without network; `wandb sync <logdir>/wandb/offline-run-*`
uploads it later. W&B's console capture is off: the slices' stdout stays what the
`--slice=all` parent prefixes and relays.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Mapping
from typing import Any

ENABLED_KEY = "logging.wandb.enabled"
_ID_FILE = "wandb_id"


def import_wandb() -> Any:
  """The `wandb` module; ImportError naming the config key when it is not installed."""
  try:
    import wandb
  except ImportError as e:
    raise ImportError(f"{ENABLED_KEY}=true needs the wandb package: pip install "
                      f"'mgrpo_jax[wandb]' (or set {ENABLED_KEY}=false)") from e
  return wandb


def _run_id(logdir: pathlib.Path) -> str:
  """The W&B id of the run logged from `logdir`: the one kept there, else a new one."""
  path = logdir / _ID_FILE
  kept = path.read_text(encoding="utf-8").strip() if path.exists() else ""
  if kept:
    return kept
  new = uuid.uuid4().hex[:16]
  path.write_text(new, encoding="utf-8")
  return new


class WandbRun:
  """One slice's W&B run: `log(step, scalars)` per step, `close()` at the end.

  Args:
    logdir: the slice's log folder (`<local>/logs/<slice>`); W&B writes under
      `<logdir>/wandb/`.
    project: W&B project.
    entity: W&B user or team ("" for the account's default).
    mode: "online" or "offline".
    group: the experiment's run id, shared by its slices.
    slice_name: "main" or "sub": the run's job type, and its name is `<group>/<slice>`.
    config: the run's config as plain nested dicts.
  """

  def __init__(self, logdir: str | pathlib.Path, *, project: str, entity: str, mode: str,
               group: str, slice_name: str, config: Mapping[str, Any]) -> None:
    wandb = import_wandb()
    logdir = pathlib.Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    self._run = wandb.init(
        project=project, entity=entity or None, mode=mode, group=group,
        job_type=slice_name, name=f"{group}/{slice_name}", config=dict(config),
        dir=str(logdir), id=_run_id(logdir), resume="allow", reinit="create_new",
        settings=wandb.Settings(console="off"))

  @property
  def directory(self) -> pathlib.Path:
    """The run's own folder (`<logdir>/wandb/<offline-run|run>-<time>-<id>`)."""
    return pathlib.Path(self._run.dir).parent

  def log(self, step: int, scalars: Mapping[str, float]) -> None:
    self._run.log(dict(scalars), step=int(step))

  def close(self) -> None:
    self._run.finish()
