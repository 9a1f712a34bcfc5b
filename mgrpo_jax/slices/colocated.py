"""Both RL slices in one process (`--slice=both`), sharing its devices.

For a host whose accelerators cannot be split between two processes (a TPU chip
belongs to one process, so a host of one chip cannot run the slices side by side),
`--slice=all` runs its RL stage this way by itself; elsewhere `serving.colocate` asks
for it. The step protocol is the one of two processes: the sub slice (S's trainer and
its service) and the main slice run their loops (`run_sub_slice`, `run_main_slice`) in
two threads, exchange outcomes and acknowledgements through the store, and M calls S's
service over loopback gRPC. Each thread's lines carry its slice's prefix (`[main] `,
`[sub] `). If either loop fails, the process exits at once with status 1, as the
failure of one of two processes stops the run; a crash point kills both, as losing the
host would.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback

from mgrpo_jax.config.modes import Mode
from mgrpo_jax.scale.writers import set_line_prefix
from mgrpo_jax.slices.main_slice import run_main_slice
from mgrpo_jax.slices.sub_slice import run_sub_slice


def _run(name: str, loop, config, mode: Mode, workdir: str) -> None:
  set_line_prefix(f"[{name}] ")
  try:
    loop(config, mode, workdir)
  except BaseException:  # noqa: BLE001 (the whole process stops: module docstring)
    traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def run_colocated(config, mode: Mode, workdir: str) -> None:
  """Runs the sub slice and the main slice to `experiment.num_steps` in this process, in
  `mode`, the config's `experiment.mode`."""
  threads = [threading.Thread(target=_run, args=(name, loop, config, mode, workdir),
                              name=f"{name}-slice")
             for name, loop in (("sub", run_sub_slice), ("main", run_main_slice))]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
