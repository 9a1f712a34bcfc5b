"""The shared store contract, run against LocalStore and GCSStore (on fake-gcs-server)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from mgrpo_jax.store import LocalStore, Store, StoreConflictError, open_store
from mgrpo_jax.store.gcs import GCSStore
from tests.support.store_contract import CONTRACT_CHECKS, StoreMachine

BACKENDS = ["local", "gcs"]


@pytest.fixture(params=BACKENDS)
def store_factory(request: pytest.FixtureRequest, tmp_path) -> Callable[[], Store]:
  """Makes fresh, empty stores of one backend (GCS: new prefixes in one fresh bucket)."""
  counter = itertools.count()
  if request.param == "local":
    return lambda: LocalStore(tmp_path / f"store{next(counter)}")
  bucket = request.getfixturevalue("gcs_bucket")
  return lambda: open_store(f"gs://{bucket}/prefix{next(counter)}/sub")


@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__)
def test_contract(store_factory: Callable[[], Store], check: Callable[[Store], None]) -> None:
  check(store_factory())


def test_store_matches_dict_model(store_factory: Callable[[], Store]) -> None:
  machine = type("Machine", (StoreMachine,), {"make_store": staticmethod(store_factory)})
  run_state_machine_as_test(machine, settings=settings(max_examples=15,
                                                       stateful_step_count=25))


def test_open_store_selects_backend(gcs_bucket: str, tmp_path) -> None:
  assert isinstance(open_store(tmp_path / "x"), LocalStore)
  store = open_store(f"gs://{gcs_bucket}/a/b/")
  assert isinstance(store, GCSStore)
  assert store.uri == f"gs://{gcs_bucket}/a/b"


def test_gcs_prefixes_isolate_stores(gcs_bucket: str) -> None:
  root = open_store(f"gs://{gcs_bucket}")
  first = open_store(f"gs://{gcs_bucket}/one")
  second = open_store(f"gs://{gcs_bucket}/one2")
  first.put("k", b"1")
  second.put("k", b"2")
  assert first.list() == ["k"] and second.list() == ["k"]
  assert first.get("k") == b"1" and second.get("k") == b"2"
  assert root.list() == ["one/k", "one2/k"]
  with pytest.raises(StoreConflictError, match="'one/k'"):
    root.put("one/k", b"other")
