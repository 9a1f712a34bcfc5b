"""Prints 'bazel: N passed, N failed, N skipped' from the JUnit XML files of the last run.

Bazel's own summary counts targets; this counts the test cases inside them. A sharded
target's cases are in its `shard_<i>_of_<n>/test.xml` files (a `test.xml` beside them is
an earlier unsharded run's and is not counted).
Usage: python tools/bazel_summary.py "$(bazel info bazel-testlogs)"
"""

import pathlib
import sys
import xml.etree.ElementTree as ET


def main(testlogs: str) -> int:
  passed = failed = skipped = 0
  files = [path for path in sorted(pathlib.Path(testlogs).rglob("test.xml"))
           if not any(path.parent.glob("shard_*_of_*"))]
  targets = {path.parent.parent if path.parent.name.startswith("shard_") else path.parent
             for path in files}
  for path in files:
    for case in ET.parse(path).getroot().iter("testcase"):
      if case.find("failure") is not None or case.find("error") is not None:
        failed += 1
      elif case.find("skipped") is not None:
        skipped += 1
      else:
        passed += 1
  sys.stdout.write(f"bazel: {passed} passed, {failed} failed, {skipped} skipped "
                   f"({len(targets)} targets)\n")
  return 1 if failed or not files else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1]))
