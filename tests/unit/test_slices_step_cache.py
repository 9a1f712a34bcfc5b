"""Step caches (atomic, idempotent, exact round trip), the address file, version gating."""

from __future__ import annotations

import math
import os
import stat

import numpy as np
import pytest

from mgrpo_jax.agents.records import END_RESULT, MainRecord, SubRecord, ToolCall, Trajectory
from mgrpo_jax.serving.address import decode_address, encode_address, service_token
from mgrpo_jax.serving.sub_service import WeightVersions
from mgrpo_jax.slices.step_cache import MainStepCache, SubStepCache
from mgrpo_jax.store.folder import LocalFolder
from mgrpo_jax.utils.atomic_files import atomic_write


def _trajectory(seed: int) -> Trajectory:
  rng = np.random.default_rng(seed)
  n = 9
  return Trajectory(ids=rng.integers(0, 1000, n).astype(np.int32),
                    loss_mask=rng.random(n) < 0.5,
                    logprobs=(-rng.random(n) * 7).astype(np.float32),
                    roles=rng.integers(0, 4, n).astype(np.int32),
                    messages=(("system", "s"), ("assistant", "a \u00e9")), policy_version=3,
                    format_ok=True, error="", end=END_RESULT, num_turns=2,
                    tool_calls=(ToolCall(0, "search", '{"query": "x"}', True, 0.25),),
                    final="report", wall_s=1.5)


def _same_trajectory(a: Trajectory, b: Trajectory) -> None:
  for name in ("ids", "loss_mask", "logprobs", "roles"):
    x, y = getattr(a, name), getattr(b, name)
    assert x.dtype == y.dtype
    np.testing.assert_array_equal(x, y)  # bitwise: float32 survives JSON exactly
  assert (a.messages, a.tool_calls, a.final) == (b.messages, b.tool_calls, b.final)


def test_main_cache_round_trip_is_exact(tmp_path):
  cache = MainStepCache(LocalFolder(tmp_path))
  main = [MainRecord("q", k, "main", _trajectory(k), 2, correct=float(k)) for k in range(2)]
  sub = [SubRecord("q", 0, 1, "task", "ctx", "rep", _trajectory(7))]
  assert cache.load(4) is None
  calls = {sub[0].key: sub[0].digest()}
  cache.write(4, ["q"], main, sub, calls)
  ids, main2, sub2, calls2 = cache.load(4)
  assert ids == ["q"] and calls2 == calls
  for a, b in zip(main + sub, main2 + sub2, strict=True):
    _same_trajectory(a.trajectory, b.trajectory)
  assert [r.correct for r in main2] == [0.0, 1.0]
  assert math.isnan(sub2[0].expert)  # unscored fields survive as NaN
  cache.write(5, ["q"], main, [], {})
  cache.delete_before(5)
  assert cache.load(4) is None and cache.load(5) is not None
  cache.retire(5)  # one kept checkpoint (steps_done = 6): step 5 is not redone
  assert cache.load(5) is None and not list(tmp_path.iterdir())


def test_caches_keep_the_steps_a_kept_checkpoint_may_redo(tmp_path):
  main = MainStepCache(LocalFolder(tmp_path / "main"), checkpoints_kept=3)
  sub = SubStepCache(LocalFolder(tmp_path / "sub"), checkpoints_kept=3)
  record = SubRecord("q", 0, 0, "t", "", "r", _trajectory(1))
  for step in range(5):
    main.write(step, ["q"], [], [], {})
    sub.put(step, [(record, (0, 0))])
    main.retire(step)
    sub.retire(step)
  # checkpoints steps_done = 3, 4, 5 are kept: a fallback to 3 redoes steps 3 and 4
  assert [s for s in range(5) if main.load(s) is not None] == [3, 4]
  assert [s for s in range(5) if sub.load(s)] == [3, 4]
  assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["step_00000003",
                                                                   "step_00000004"]


def test_atomic_write_leaves_old_content_on_failure(tmp_path):
  path = tmp_path / "f.json"
  atomic_write(path, b"old")


  with pytest.raises(TypeError):
    atomic_write(path, object())  # fails while writing: nothing replaced, no temp left
  assert path.read_bytes() == b"old"
  assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_sub_cache_orders_by_arrival_and_rewrites_idempotently(tmp_path):
  cache = SubStepCache(LocalFolder(tmp_path))
  records = [SubRecord("q/1", k, i, "t", "", "r", _trajectory(10 * k + i))
             for k in range(2) for i in range(2)]
  arrivals = [(1, 0), (0, 1), (1, 1), (0, 0)]
  cache.put(3, list(zip(records, arrivals, strict=True)))
  cache.put(3, [(records[0], (1, 0))])  # the same call served again
  (tmp_path / "step_00000003" / ".x.json.tmp").write_bytes(b"{")  # an interrupted write is ignored
  loaded = cache.load(3)
  assert [a for a, _ in loaded] == sorted(arrivals)
  assert [r.key for _, r in loaded] == [records[i].key for i in (3, 1, 0, 2)]
  _same_trajectory(loaded[2][1].trajectory, records[0].trajectory)
  cache.delete_before(4)
  assert cache.load(3) == []


def test_address_file_and_token(tmp_path, monkeypatch):
  assert decode_address(None, "service.json") is None
  assert decode_address(encode_address(("127.0.0.1", 4321)), "f") == ("127.0.0.1", 4321)
  with pytest.raises(ValueError, match="service.json: needs fields host and port"):
    decode_address(b'{"host": "h"}', "service.json")
  with pytest.raises(ValueError, match="service.json: not a service address file"):
    decode_address(b'{"host', "service.json")
  assert service_token("") is None
  monkeypatch.delenv("MGRPO_TEST_TOKEN", raising=False)
  with pytest.raises(ValueError, match="MGRPO_TEST_TOKEN"):
    service_token("MGRPO_TEST_TOKEN")
  monkeypatch.setenv("MGRPO_TEST_TOKEN", "s3cret")
  assert service_token("MGRPO_TEST_TOKEN") == "s3cret"


def test_weight_versions_gate_and_evict():
  versions = WeightVersions(keep=2)
  assert versions.get(0) is None and versions.current == -1
  versions.publish(0, "w0")
  versions.publish(1, "w1")
  assert versions.get(1) == "w1" and versions.get(0) == "w0"
  assert versions.get(2) is None  # not ready: the caller retries
  versions.publish(2, "w2")
  with pytest.raises(LookupError, match="version 0"):
    versions.get(0)
  with pytest.raises(ValueError, match="not newer"):
    versions.publish(2, "again")
  assert versions.current == 2


@pytest.mark.parametrize("query_id", [".hidden", "..", "a/.b", "%2E", "q 1"])
def test_sub_cache_keeps_query_ids_that_look_like_temporary_files(tmp_path, query_id):
  cache = SubStepCache(LocalFolder(tmp_path))
  record = SubRecord(query_id, 1, 0, "t", "", "r", _trajectory(5))
  cache.put(2, [(record, (0, 0))])
  names = [p.name for p in (tmp_path / "step_00000002").iterdir()]
  assert len(names) == 1 and not names[0].startswith(".")
  loaded = cache.load(2)
  assert [r.key for _, r in loaded] == [(query_id, 1, 0)]
  _same_trajectory(loaded[0][1].trajectory, record.trajectory)


def test_atomic_write_fsyncs_the_folder_after_the_rename(tmp_path, monkeypatch):
  synced = []
  real_fsync = os.fsync

  def recording_fsync(fd):
    synced.append((stat.S_ISDIR(os.fstat(fd).st_mode), os.path.exists(tmp_path / "f.json")))
    real_fsync(fd)

  monkeypatch.setattr(os, "fsync", recording_fsync)
  atomic_write(tmp_path / "f.json", b"new")
  # the file's data (before the rename), then its folder (after the rename)
  assert synced == [(False, False), (True, True)]


def test_sub_cache_finds_the_stored_calls_of_a_step(tmp_path):
  cache = SubStepCache(LocalFolder(tmp_path))
  records = [SubRecord(".q/x", 0, i, "t", "", "r", _trajectory(i)) for i in range(3)]
  cache.put(2, [(records[0], (0, 0)), (records[2], (1, 0))])
  stored = cache.stored(2, [r.key for r in records])
  assert sorted(stored) == [records[0].key, records[2].key]
  assert stored[records[2].key][0] == (1, 0)
  assert stored[records[2].key][1].digest() == records[2].digest()
  assert cache.stored(3, [r.key for r in records]) == {}
