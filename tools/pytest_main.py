"""Entry point that runs pytest on the files Bazel passes, writing Bazel's JUnit XML."""

import os
import sys

import pytest

if __name__ == "__main__":
  args = ["-p", "no:cacheprovider", "-q", "--rootdir=."]
  if os.environ.get("XML_OUTPUT_FILE"):
    args += ["--junitxml", os.environ["XML_OUTPUT_FILE"]]
  sys.exit(pytest.main(args + sys.argv[1:]))
