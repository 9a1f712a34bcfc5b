"""The store contract, as checks that take a fresh empty store; run against every backend.

`CONTRACT_CHECKS` are plain functions `check(store)`; `StoreMachine` is a hypothesis
state machine comparing random put/get/exists/list/wait_for sequences with a dict model.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mgrpo_jax.store import (
    InvalidKeyError,
    Store,
    StoreConflictError,
    StoreNotFoundError,
    StoreTimeoutError,
)


def check_put_get_roundtrip(store: Store) -> None:
  payloads = {"a": b"", "b/c": b"\x00\xff" * 1000, "b/d.json": b'{"x": 1}',
              "runs/r-1/step_00000000/outcomes": bytes(range(256))}
  for key, data in payloads.items():
    store.put(key, data)
  for key, data in payloads.items():
    assert store.get(key) == data
    assert store.exists(key)


def check_identical_reput_is_noop(store: Store) -> None:
  store.put("k", b"same")
  store.put("k", b"same")
  store.put("k", bytearray(b"same"))
  assert store.get("k") == b"same"
  assert store.list() == ["k"]


def check_conflict_names_key(store: Store) -> None:
  store.put("runs/r/step_00000001/outcomes", b"first")
  with pytest.raises(StoreConflictError, match="runs/r/step_00000001/outcomes") as info:
    store.put("runs/r/step_00000001/outcomes", b"second")
  assert info.value.key == "runs/r/step_00000001/outcomes"
  assert store.get("runs/r/step_00000001/outcomes") == b"first"


def check_missing_key(store: Store) -> None:
  assert not store.exists("nope/x")
  with pytest.raises(StoreNotFoundError, match="nope/x"):
    store.get("nope/x")


def check_list_prefix_semantics(store: Store) -> None:
  keys = ["runs/a/step_00000001/ack_main", "runs/a/step_00000001/outcomes",
          "runs/a/step_00000002/outcomes", "runs/ab/step_00000001/outcomes", "top"]
  for key in reversed(keys):
    store.put(key, key.encode())
  assert store.list() == keys
  assert store.list("") == keys
  assert store.list("runs/a/") == keys[:3]
  assert store.list("runs/a") == keys[:4]
  assert store.list("runs/a/step_00000001/") == keys[:2]
  assert store.list("runs/a/step_00000001/out") == keys[1:2]
  assert store.list("runs/a/step_00000001/outcomes") == keys[1:2]
  assert store.list("runs/zzz/") == []
  assert store.list("t") == ["top"]


def check_invalid_keys_rejected(store: Store) -> None:
  for bad in ["", "/abs", "a/../b", "..", "a//b", "a/", ".hidden", "a/.tmp-x", "sp ace",
              "a\\b", "é", "a/b\n"]:
    with pytest.raises(InvalidKeyError):
      store.put(bad, b"x")
    with pytest.raises(InvalidKeyError):
      store.get(bad)
    with pytest.raises(InvalidKeyError):
      store.exists(bad)
  for bad_prefix in ["/", "../", "a//", ".x"]:
    with pytest.raises(InvalidKeyError):
      store.list(bad_prefix)
  with pytest.raises(TypeError, match="'k'"):
    store.put("k", "text, not bytes")  # type: ignore[arg-type]
  assert store.list() == []


def check_wait_for(store: Store) -> None:
  store.put("w/1", b"1")
  store.put("w/2", b"2")
  store.wait_for(["w/1", "w/2"], timeout=0)
  with pytest.raises(StoreTimeoutError, match="w/3") as info:
    store.wait_for(["w/1", "w/3", "w/4"], timeout=0.2)
  assert info.value.missing == ("w/3", "w/4")
  assert "w/1" not in str(info.value)


CONTRACT_CHECKS: list[Callable[[Store], None]] = [
    check_put_get_roundtrip,
    check_identical_reput_is_noop,
    check_conflict_names_key,
    check_missing_key,
    check_list_prefix_semantics,
    check_invalid_keys_rejected,
    check_wait_for,
]

_KEYS = st.sampled_from([f"{d}/{k}" for d in ("d0", "d1", "d1x") for k in ("k0", "k1", "k2")])
_VALUES = st.sampled_from([b"", b"v1", b"v2", b"\x00" * 300])
_PREFIXES = st.sampled_from(["", "d", "d1", "d1/", "d1/k", "d1x/k2", "e/"])


class StoreMachine(RuleBasedStateMachine):
  """Random operation sequences against a store and a dict model of the contract.

  Subclasses set `make_store` (a fresh empty store per run) and may set `cleanup`.
  """

  make_store: Callable[[], Store]

  def __init__(self):
    super().__init__()
    self.store = type(self).make_store()
    self.model: dict[str, bytes] = {}

  @rule(key=_KEYS, data=_VALUES)
  def put(self, key: str, data: bytes) -> None:
    if key in self.model and self.model[key] != data:
      with pytest.raises(StoreConflictError):
        self.store.put(key, data)
    else:
      self.store.put(key, data)
      self.model[key] = data

  @rule(key=_KEYS)
  def get(self, key: str) -> None:
    if key in self.model:
      assert self.store.get(key) == self.model[key]
    else:
      with pytest.raises(StoreNotFoundError):
        self.store.get(key)

  @rule(key=_KEYS)
  def exists(self, key: str) -> None:
    assert self.store.exists(key) == (key in self.model)

  @rule(prefix=_PREFIXES)
  def list(self, prefix: str) -> None:
    assert self.store.list(prefix) == sorted(k for k in self.model if k.startswith(prefix))

  @rule(keys=st.lists(_KEYS, max_size=3))
  def wait_for(self, keys: list[str]) -> None:
    missing = [k for k in dict.fromkeys(keys) if k not in self.model]
    if missing:
      with pytest.raises(StoreTimeoutError) as info:
        self.store.wait_for(keys, timeout=0)
      assert info.value.missing == tuple(missing)
    else:
      self.store.wait_for(keys, timeout=0)

  @invariant()
  def all_records_listed(self) -> None:
    assert self.store.list() == sorted(self.model)


def race_values(process: int, num_keys: int, size: int) -> list[tuple[str, bytes]]:
  """The (key, bytes) sequence process 0 or 1 puts in the concurrency race.

  Even keys get the same bytes from both processes, odd keys different bytes; values are
  `size` random bytes so that a torn record cannot match any candidate.
  """
  out = []
  for i in range(num_keys):
    owner = 2 if i % 2 == 0 else process
    out.append((f"race/k{i:04d}", random.Random(i * 3 + owner).randbytes(size)))
  return out
