"""Host buffers on transparent huge pages: glibc's malloc tunable `glibc.malloc.hugetlb=1`.

XLA:CPU allocates a step's large buffers (activations, gradients) afresh every step.
glibc serves any allocation above its mmap threshold (32 MiB at most) with a new
mapping and unmaps it on free, so every step zero-fills those buffers again one 4 KiB
page fault at a time: 12 SFT steps of the demo's S (16 x 640 tokens, the `small` model)
took 4.3 million minor faults on 2 CPU cores, a quarter of their CPU time in the kernel.
With the tunable glibc (2.35 and later) advises transparent huge pages for its mappings
(when the kernel's THP mode is `madvise` or `always`), 2 MiB per fault: the same steps
took 50,000 faults and 16% less wall time (`benchmarks/host_memory.py`). It changes
where buffers live, not what is computed.

Tunables are read when a process starts, so `launch/tpu_run.py` re-executes itself
once, first thing, with the tunable added (`reexec_with_huge_pages`); the slices it
starts inherit the environment. A GLIBC_TUNABLES that already sets glibc.malloc.hugetlb
is kept as it is (`GLIBC_TUNABLES=glibc.malloc.hugetlb=0` turns this off), and a system
without glibc is left alone.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

TUNABLE = "glibc.malloc.hugetlb"
ENV = "GLIBC_TUNABLES"
# Set in the re-executed process, so that it never re-executes again.
_REEXECUTED = "MGRPO_HUGE_PAGES_REEXEC"


def tunables_with_huge_pages(environ: Mapping[str, str]) -> str | None:
  """GLIBC_TUNABLES with `glibc.malloc.hugetlb=1` added; None if it already sets it."""
  current = environ.get(ENV, "")
  names = {item.split("=", 1)[0] for item in current.split(":") if item}
  if TUNABLE in names:
    return None
  return f"{current}:{TUNABLE}=1" if current else f"{TUNABLE}=1"


def reexec_with_huge_pages() -> None:
  """Re-executes this process with the tunable (module docstring), or returns.

  Call first thing in a script's main: the process is replaced, so nothing done before
  the call survives. Returns without re-executing off glibc, when the tunable is
  already set, or in the re-executed process itself.
  """
  if os.environ.get(_REEXECUTED) or platform.libc_ver()[0] != "glibc":
    return
  value = tunables_with_huge_pages(os.environ)
  if value is None:
    return
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, list(sys.orig_argv), {**os.environ, ENV: value, _REEXECUTED: "1"})
