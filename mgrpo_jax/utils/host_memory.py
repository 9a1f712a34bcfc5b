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

The same allocator keeps memory a process freed (the compiler's temporaries, a model
built on the host and then placed on the mesh) for reuse, where a program's large
buffers, each a fresh mapping, never reuse it: `release_free_host_memory` hands it back
to the system (glibc's `malloc_trim`), so it stops adding to the peak of the step that
follows (SmolLM2-135M's update at 8 x 256: 0.4 GiB of 6.6).

Tunables are read when a process starts, so `launch/tpu_run.py` re-executes itself
once, first thing, with the tunable added (`reexec_with_huge_pages`); the slices it
starts inherit the environment. A GLIBC_TUNABLES that already sets glibc.malloc.hugetlb
is kept as it is (`GLIBC_TUNABLES=glibc.malloc.hugetlb=0` turns this off), and a system
without glibc is left alone.
"""

from __future__ import annotations

import ctypes
import functools
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


@functools.cache
def _libc() -> ctypes.CDLL | None:
  return ctypes.CDLL("libc.so.6") if platform.libc_ver()[0] == "glibc" else None


def release_free_host_memory() -> None:
  """Returns the memory this process freed but glibc's malloc still holds to the system
  (module docstring); nothing off glibc. What is allocated is untouched."""
  libc = _libc()
  if libc is not None:
    libc.malloc_trim(0)
