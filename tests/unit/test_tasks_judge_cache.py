"""The model judges' reply cache (`tasks/judge_cache.py`): keys, entries, atomic writes and
corrupt entries that name their file."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.tasks.judge_cache import JudgeCache, JudgeCacheError, cache_key

_PARTS = st.dictionaries(st.text(max_size=8), st.text(max_size=20) | st.integers(),
                         max_size=5)


@given(_PARTS)
def test_the_key_does_not_depend_on_the_order_of_the_parts(parts):
  assert cache_key(parts) == cache_key(dict(reversed(list(parts.items()))))


@given(_PARTS, st.text(max_size=8), st.text(max_size=20))
def test_the_key_changes_with_any_value(parts, name, value):
  changed = {**parts, name: value}
  assert (cache_key(changed) == cache_key(parts)) == (changed == parts)


def test_a_stored_reply_is_read_back_and_a_missing_one_is_none(tmp_path):
  cache = JudgeCache(tmp_path)
  key = cache_key({"item": 1})
  assert cache.get(key) is None
  cache.put(key, "the prompt", "VERDICT: correct")
  assert cache.get(key) == "VERDICT: correct"
  entry = json.loads(cache.path(key).read_text())
  assert entry == {"key": key, "prompt": "the prompt", "output": "VERDICT: correct"}
  assert cache.path(key).parent.name == key[:2]


@pytest.mark.parametrize("content,problem", [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not an object with a string 'output'"),
    (b'{"key": "KEY", "output": 3}', "not an object with a string 'output'"),
    (b'{"key": "other", "output": "VERDICT: 0"}', "it holds key 'other'"),
])
def test_a_corrupt_entry_is_an_error_naming_its_file(tmp_path, content, problem):
  cache = JudgeCache(tmp_path)
  key = cache_key({"item": 2})
  cache.path(key).parent.mkdir(parents=True)
  cache.path(key).write_bytes(content.replace(b"KEY", key.encode()))
  with pytest.raises(JudgeCacheError) as error:
    cache.get(key)
  assert str(cache.path(key)) in str(error.value) and problem in str(error.value)


def test_concurrent_writers_leave_one_whole_entry(tmp_path):
  cache = JudgeCache(tmp_path)
  key = cache_key({"item": 3})
  reply = "reasoning " * 2000 + "\nVERDICT: incorrect"
  threads = [threading.Thread(target=cache.put, args=(key, "p", reply)) for _ in range(8)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert cache.get(key) == reply
  assert [p.name for p in cache.path(key).parent.iterdir()] == [f"{key}.json"]
