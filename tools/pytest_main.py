"""Entry point that runs pytest on the files Bazel passes, writing Bazel's JUnit XML.

Under a target's `shard_count` Bazel starts one process per shard with TEST_TOTAL_SHARDS
and TEST_SHARD_INDEX set: shard i runs the collected tests i, i + n, i + 2n, ... (in
collection order, so each shard gets a share of every file's tests; a module fixture is
built in each shard that runs one of its tests). The status file tells Bazel that this
runner shards.
"""

import os
import pathlib
import sys

import pytest


class ShardSelection:
  """A pytest plugin keeping the collected tests of shard `index` of `total`."""

  def __init__(self, index: int, total: int):
    self.index, self.total = index, total

  def pytest_collection_modifyitems(self, config, items):
    config.hook.pytest_deselected(items=[item for n, item in enumerate(items)
                                         if n % self.total != self.index])
    items[:] = items[self.index::self.total]


def shard_plugins(environ: dict[str, str]) -> list[ShardSelection]:
  """The shard selection of a sharded target (none when it is not sharded)."""
  total = int(environ.get("TEST_TOTAL_SHARDS", "1"))
  if total <= 1:
    return []
  if environ.get("TEST_SHARD_STATUS_FILE"):
    pathlib.Path(environ["TEST_SHARD_STATUS_FILE"]).touch()
  return [ShardSelection(int(environ["TEST_SHARD_INDEX"]), total)]


if __name__ == "__main__":
  args = ["-p", "no:cacheprovider", "-q", "--rootdir=."]
  if os.environ.get("XML_OUTPUT_FILE"):
    args += ["--junitxml", os.environ["XML_OUTPUT_FILE"]]
  sys.exit(pytest.main(args + sys.argv[1:], plugins=shard_plugins(dict(os.environ))))
