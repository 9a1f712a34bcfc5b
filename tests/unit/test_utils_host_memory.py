"""glibc's huge-page tunable for the launcher's process (`utils/host_memory.py`)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from mgrpo_jax.utils import host_memory
from mgrpo_jax.utils.host_memory import ENV, tunables_with_huge_pages

PROBE = """
import os, sys
print("start", flush=True)
from mgrpo_jax.utils import host_memory
host_memory.reexec_with_huge_pages()
print("tunables", os.environ.get("GLIBC_TUNABLES"), "args", sys.argv[1:], flush=True)
"""


@pytest.mark.parametrize("current, expected", [
    ("", "glibc.malloc.hugetlb=1"),
    ("glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
    ("glibc.malloc.hugetlb=0", None),  # the user's own setting is kept
    ("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2", None),
])
def test_the_tunable_is_added_unless_set(current, expected):
  environ = {ENV: current} if current else {}
  assert tunables_with_huge_pages(environ) == expected


def _probe(tmp_path, env):
  script = tmp_path / "probe.py"
  script.write_text(PROBE)
  env = {k: v for k, v in env.items() if not k.startswith("MGRPO_HUGE")}
  return subprocess.run([sys.executable, "-u", str(script), "--flag=1"], env=env,
                        capture_output=True, text=True, check=True).stdout.splitlines()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_the_process_reexecutes_once_with_the_tunable_and_its_arguments(tmp_path):
  env = {k: v for k, v in os.environ.items() if k != ENV}
  lines = _probe(tmp_path, env)
  # The first run stops at the re-exec; the second, with the tunable, runs to the end.
  assert lines == ["start", "start",
                   "tunables glibc.malloc.hugetlb=1 args ['--flag=1']"]
  kept = _probe(tmp_path, {**env, ENV: "glibc.malloc.hugetlb=0"})
  assert kept == ["start", "tunables glibc.malloc.hugetlb=0 args ['--flag=1']"]


def _rss() -> int:
  """This process's resident bytes (Linux)."""
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_memory_goes_back_to_the_system():
  """Every other block of 4096 x 64 KiB freed (128 MiB of holes that are not at the top
  of the heap): glibc keeps those pages until they are released."""
  blocks = [bytearray(os.urandom(64)) * 1024 for _ in range(4096)]  # filled
  held = _rss()
  del blocks[::2]
  kept = _rss()
  host_memory.release_free_host_memory()
  released = _rss()
  assert held - kept < 64 * 2**20, "free() alone returned the blocks; nothing to test"
  assert kept - released > 100 * 2**20, (held, kept, released)
