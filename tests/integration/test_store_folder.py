"""The run's replaceable files (`store.folder`): one contract, a local folder and GCS
(the fake-gcs-server emulator)."""

from __future__ import annotations

import pytest

from mgrpo_jax.store import InvalidKeyError
from mgrpo_jax.store.folder import LocalFolder, open_folder


@pytest.fixture(params=["local", "gcs"])
def folder(request, tmp_path):
  if request.param == "local":
    return open_folder(str(tmp_path / "run"))
  bucket = request.getfixturevalue("gcs_bucket")
  return open_folder(f"gs://{bucket}/runs/r1")


def test_write_replace_read_list_delete(folder):
  assert folder.read("main/cache/step_1.json") is None
  assert folder.list() == []
  folder.write("main/cache/step_1.json", b"first")
  folder.write("main/cache/step_1.json", b"second")  # replaced as a whole
  folder.write("sub/cache/step_1/q%2F1.0.0.json", b"\x00\xff")
  folder.write("sub/cache/step_10/q.0.0.json", b"")
  assert folder.read("main/cache/step_1.json") == b"second"
  assert folder.read("sub/cache/step_1/q%2F1.0.0.json") == b"\x00\xff"
  assert folder.list("sub/cache/step_1/") == ["sub/cache/step_1/q%2F1.0.0.json"]
  assert folder.list("sub/cache/step_1") == ["sub/cache/step_1/q%2F1.0.0.json",
                                             "sub/cache/step_10/q.0.0.json"]
  sub = folder.child("sub/cache")
  assert sub.uri == f"{folder.uri}/sub/cache"
  assert sub.list() == ["step_1/q%2F1.0.0.json", "step_10/q.0.0.json"]
  assert sub.read("step_10/q.0.0.json") == b""
  sub.delete("step_1/q%2F1.0.0.json")
  sub.delete("step_1/q%2F1.0.0.json")  # a missing file: a no-op
  assert folder.list() == ["main/cache/step_1.json", "sub/cache/step_10/q.0.0.json"]


@pytest.mark.parametrize("name", ["", "a//b", "/a", "a/", ".tmp", "a/../b", "a/./b"])
def test_names_must_be_plain_relative_paths(folder, name):
  with pytest.raises(InvalidKeyError):
    folder.write(name, b"x")


def test_local_delete_removes_the_folders_it_empties(tmp_path):
  folder = LocalFolder(tmp_path / "run")
  folder.write("cache/step_1/a.json", b"a")
  folder.write("cache/step_1/b.json", b"b")
  folder.write("cache/step_2/a.json", b"a")
  (tmp_path / "run" / "cache" / "step_1" / ".a.json.1.tmp").write_bytes(b"")  # not listed
  assert folder.list("cache/step_1/") == ["cache/step_1/a.json", "cache/step_1/b.json"]
  folder.delete("cache/step_2/a.json")
  assert sorted(p.name for p in (tmp_path / "run" / "cache").iterdir()) == ["step_1"]
  assert (tmp_path / "run").is_dir()


def test_other_schemes_are_refused(tmp_path):
  with pytest.raises(InvalidKeyError, match="s3://"):
    open_folder("s3://bucket/run")
