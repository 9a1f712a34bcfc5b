"""Prints 'bazel: N passed, N failed, N skipped' from the JUnit XML files of the last run.

Bazel's own summary counts targets; this counts the test cases inside them.
Usage: python tools/bazel_summary.py "$(bazel info bazel-testlogs)"
"""

import pathlib
import sys
import xml.etree.ElementTree as ET


def main(testlogs: str) -> int:
  passed = failed = skipped = 0
  files = sorted(pathlib.Path(testlogs).rglob("test.xml"))
  for path in files:
    for case in ET.parse(path).getroot().iter("testcase"):
      if case.find("failure") is not None or case.find("error") is not None:
        failed += 1
      elif case.find("skipped") is not None:
        skipped += 1
      else:
        passed += 1
  sys.stdout.write(f"bazel: {passed} passed, {failed} failed, {skipped} skipped "
                   f"({len(files)} targets)\n")
  return 1 if failed or not files else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1]))
