"""LocalStore: write-once publishing in a folder, and `open_store` backend selection.

The full contract suite (shared with GCSStore) is in tests/integration; these are the
fast folder-specific checks.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.store import (
    InvalidKeyError,
    LocalStore,
    Store,
    StoreConflictError,
    StoreError,
    StoreNotFoundError,
    StoreTimeoutError,
    open_store,
)


def test_record_is_a_read_only_file_at_the_key_path(tmp_path) -> None:
  store = LocalStore(tmp_path)
  store.put("runs/r/step_00000001/outcomes", b"abc")
  path = tmp_path / "runs" / "r" / "step_00000001" / "outcomes"
  assert path.read_bytes() == b"abc"
  assert stat.S_IMODE(path.stat().st_mode) == 0o444
  assert sorted(os.listdir(path.parent)) == ["outcomes"]  # no temporary file left


def test_records_persist_across_instances(tmp_path) -> None:
  LocalStore(tmp_path).put("a/b", b"1")
  reopened = LocalStore(tmp_path)
  assert reopened.get("a/b") == b"1"
  with pytest.raises(StoreConflictError, match="'a/b'"):
    reopened.put("a/b", b"2")


def test_conflict_keeps_first_value_and_names_key(tmp_path) -> None:
  store = LocalStore(tmp_path)
  store.put("k", b"first")
  with pytest.raises(StoreConflictError, match=r"store key 'k' in .* different bytes"):
    store.put("k", b"second")
  assert store.get("k") == b"first"


def test_leftover_temporary_files_are_invisible(tmp_path) -> None:
  store = LocalStore(tmp_path)
  store.put("d/k", b"x")
  (tmp_path / "d" / ".tmp-crashed").write_bytes(b"partial")
  (tmp_path / ".tmp-top").write_bytes(b"partial")
  (tmp_path / "d" / ".hidden_dir").mkdir()
  (tmp_path / "d" / ".hidden_dir" / "k").write_bytes(b"x")
  assert store.list() == ["d/k"]
  assert store.list("d/") == ["d/k"]
  store.put("d/k2", b"y")
  assert store.list("d") == ["d/k", "d/k2"]


def test_key_cannot_be_record_and_folder(tmp_path) -> None:
  store = LocalStore(tmp_path)
  store.put("a/b", b"record")
  with pytest.raises(InvalidKeyError, match="'a/b/c'.*'a/b' is a record"):
    store.put("a/b/c", b"x")
  with pytest.raises(InvalidKeyError, match="'a/b/c/d'"):
    store.put("a/b/c/d", b"x")
  assert not store.exists("a/b/c")
  with pytest.raises(StoreNotFoundError):
    store.get("a/b/c")
  store.put("x/y/z", b"deep")
  with pytest.raises(InvalidKeyError, match="'x/y' in .* is a folder"):
    store.put("x/y", b"x")
  assert not store.exists("x/y")
  with pytest.raises(StoreNotFoundError, match="'x/y'"):
    store.get("x/y")
  assert store.list() == ["a/b", "x/y/z"]


def test_wait_for_sees_key_written_concurrently(tmp_path) -> None:
  store = LocalStore(tmp_path)
  writer = threading.Timer(0.05, lambda: store.put("late", b"x"))
  writer.start()
  try:
    store.wait_for(["late"], timeout=30)
  finally:
    writer.join()
  assert store.get("late") == b"x"
  with pytest.raises(StoreTimeoutError, match="1 key.*'missing'"):
    store.wait_for(["late", "missing"], timeout=0.05)


@pytest.mark.parametrize("error", [PermissionError(1, "Operation not permitted"),
                                   OSError(95, "Operation not supported")])
def test_file_system_without_hard_links_is_a_store_error_naming_the_path(
    tmp_path, monkeypatch, error) -> None:
  store = LocalStore(tmp_path)

  def no_links(src, dst):
    raise error

  monkeypatch.setattr(os, "link", no_links)  # what such a file system answers
  with pytest.raises(StoreError, match="cannot hard-link .*runs/r/outcomes") as info:
    store.put("runs/r/outcomes", b"abc")
  assert error.strerror in str(info.value)
  assert not store.exists("runs/r/outcomes")
  assert os.listdir(tmp_path / "runs" / "r") == []  # no temporary file left behind


_UNWRITABLE = textwrap.dedent("""
    import os, resource, signal, sys
    from mgrpo_jax.store import LocalStore, StoreError
    store = LocalStore(sys.argv[1])
    if sys.argv[2] == "full":  # writes past 16 bytes fail (EFBIG), as on a full disk
      signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
      resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))
    elif os.getuid() == 0:  # root writes anywhere: drop to nobody to meet the permissions
      try:
        os.setuid(65534)
      except OSError:  # a user namespace without that uid (a build sandbox): cannot drop
        print("CANNOT_DROP_ROOT")
        sys.exit(0)
    try:
      store.put("runs/r/step_00000000/outcomes", b"x" * 1000)
    except StoreError as e:
      print(f"{type(e).__name__}: {e}")
""")


@pytest.mark.parametrize("fault,problem", [("full", "File too large"),
                                           ("read_only", "Permission denied")])
def test_a_refused_write_is_a_store_error_naming_the_path(tmp_path, fault, problem) -> None:
  """A full disk or a folder the process may not write: a StoreError naming the path
  (was: a bare OSError), nothing partial left."""
  root = pathlib.Path(tempfile.mkdtemp(prefix="store-")) / "store"
  root.parent.chmod(0o755)
  (root / "runs" / "r").mkdir(parents=True)
  for folder in (root, root / "runs", root / "runs" / "r"):
    folder.chmod(0o755 if fault == "full" else 0o555)
  try:
    out = subprocess.run([sys.executable, "-c", _UNWRITABLE, str(root), fault],
                         capture_output=True, text=True, timeout=60)
    if out.stdout.startswith("CANNOT_DROP_ROOT"):
      pytest.skip("root here cannot drop to an unprivileged user, so permissions bind nothing")
    assert out.stdout.startswith("StoreError: store key 'runs/r/step_00000000/outcomes': "
                                 "cannot write"), out.stdout + out.stderr
    assert str(root / "runs" / "r") in out.stdout and problem in out.stdout
    assert [p for p in (root / "runs" / "r").rglob("*") if not p.is_dir()] == []
  finally:
    for folder in (root, root / "runs", root / "runs" / "r"):
      folder.chmod(0o755)
    shutil.rmtree(root.parent)


def test_a_store_root_that_cannot_be_created_is_a_store_error() -> None:
  with pytest.raises(StoreError, match=r"store root /proc/no-such-process/store: cannot "
                                       r"create it"):
    LocalStore("/proc/no-such-process/store")


def test_open_store_selects_local_backend(tmp_path) -> None:
  store = open_store(str(tmp_path / "new" / "dir"))
  assert isinstance(store, LocalStore) and isinstance(store, Store)
  assert store.uri == str(tmp_path / "new" / "dir")
  assert (tmp_path / "new" / "dir").is_dir()
  assert isinstance(open_store(tmp_path), LocalStore)


@pytest.mark.parametrize("uri, message", [
    ("s3://bucket/x", "unsupported scheme 's3'"), ("", "non-empty"),
    ("http://h/x", "unsupported scheme 'http'"), ("gs://", "invalid bucket name ''"),
    ("gs://Bad_Bucket/x", "invalid bucket"), ("gs://bucket/../x", "invalid prefix"),
])
def test_open_store_rejects_bad_uris(uri: str, message: str) -> None:
  with pytest.raises(InvalidKeyError, match=message):
    open_store(uri)


def test_root_that_is_a_file_is_rejected(tmp_path) -> None:
  (tmp_path / "file").write_bytes(b"")
  with pytest.raises(InvalidKeyError, match="not a folder"):
    LocalStore(tmp_path / "file")


_OPS = st.lists(st.tuples(
    st.sampled_from(["put", "get", "exists", "list"]),
    st.sampled_from(["a/x", "a/y", "b/x", "ab/x"]),
    st.sampled_from([b"", b"1", b"2"])), max_size=30)


@given(_OPS)
def test_random_operations_match_dict_model(tmp_path_factory, ops) -> None:
  store = LocalStore(tmp_path_factory.mktemp("model"))
  model: dict[str, bytes] = {}
  for op, key, data in ops:
    if op == "put":
      if model.get(key, data) != data:
        with pytest.raises(StoreConflictError):
          store.put(key, data)
      else:
        store.put(key, data)
        model[key] = data
    elif op == "get":
      if key in model:
        assert store.get(key) == model[key]
      else:
        with pytest.raises(StoreNotFoundError):
          store.get(key)
    elif op == "exists":
      assert store.exists(key) == (key in model)
    else:
      prefix = key[:2]
      assert store.list(prefix) == sorted(k for k in model if k.startswith(prefix))
  assert store.list() == sorted(model)
