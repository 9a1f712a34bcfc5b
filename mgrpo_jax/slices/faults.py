"""Named crash points for restart tests: `MGRPO_FAULT=<slice>:<point>:<step>` kills the process.

`crash_point(slice, point, step)` sends SIGKILL to the current process when the
environment variable names exactly this (slice, point, step); unset, it does nothing.
A SIGKILL skips every handler, `finally` block and buffered write, as a preempted
machine would, so a test can stop a slice at a chosen place of the step protocol:

  main: rollout (after the first sub-agent batch of the step), cached (after the step
        cache is written), outcomes (after outcomes are in the store), checkpoint (after
        M's checkpoint, before its ack)
  sub:  served (records of a batch persisted, reply not sent), loaded (the step's
        records read, before the update), checkpoint (after S's checkpoint, before its
        ack)
"""

from __future__ import annotations

import os
import signal

ENV = "MGRPO_FAULT"


def crash_point(slice_name: str, point: str, step: int) -> None:
  """Kills this process if `MGRPO_FAULT` is `<slice_name>:<point>:<step>`."""
  if os.environ.get(ENV) == f"{slice_name}:{point}:{step}":
    os.kill(os.getpid(), signal.SIGKILL)
