"""tools/pytest_main.py under a sharded Bazel target: shard i of n runs the collected
tests i, i + n, ...; the shards together run every test once, and the runner tells Bazel
that it shards by touching the status file."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = "".join(f"def test_{i}():\n  pass\n\n" for i in range(7))


def _ran(tmp_path: pathlib.Path, shard: dict[str, str]) -> list[str]:
  """The names of the tests that the runner ran under the environment `shard`."""
  env = {k: v for k, v in os.environ.items() if not k.startswith(("TEST_", "XML_OUTPUT"))}
  proc = subprocess.run(
      [sys.executable, str(ROOT / "tools" / "pytest_main.py"), str(tmp_path / "test_few.py"),
       "-rA"],
      env=env | shard, cwd=tmp_path, capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  return sorted(line.split("::")[-1] for line in proc.stdout.splitlines()
                if line.startswith("PASSED "))


def test_three_shards_run_every_test_once_and_tell_bazel(tmp_path):
  (tmp_path / "test_few.py").write_text(TESTS)
  status = tmp_path / "shard_status"
  shards = [_ran(tmp_path, {"TEST_TOTAL_SHARDS": "3", "TEST_SHARD_INDEX": str(i),
                            "TEST_SHARD_STATUS_FILE": str(status)}) for i in range(3)]
  assert shards == [["test_0", "test_3", "test_6"], ["test_1", "test_4"], ["test_2", "test_5"]]
  assert status.exists()
  assert _ran(tmp_path, {}) == [f"test_{i}" for i in range(7)]


def _junit(path: pathlib.Path, outcomes: str) -> None:
  """A JUnit XML file at `path` with one case per letter: p passed, f failed, s skipped."""
  inner = {"p": "", "f": "<failure/>", "s": "<skipped/>"}
  cases = "".join(f'<testcase name="t{i}">{inner[o]}</testcase>' for i, o in enumerate(outcomes))
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>")


def test_the_summary_counts_each_shards_cases_and_not_a_stale_unsharded_file(tmp_path):
  _junit(tmp_path / "tests" / "core" / "test.xml", "pps")
  _junit(tmp_path / "tests" / "training" / "shard_1_of_2" / "test.xml", "ppp")
  _junit(tmp_path / "tests" / "training" / "shard_2_of_2" / "test.xml", "pf")
  _junit(tmp_path / "tests" / "training" / "test.xml", "pppppppppp")  # an earlier run's
  proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bazel_summary.py"), str(tmp_path)],
                        capture_output=True, text=True, check=False)
  assert proc.stdout == "bazel: 6 passed, 1 failed, 1 skipped (2 targets)\n"
  assert proc.returncode == 1
