"""Two processes race 500 write-once puts each over the same keys, on both backends.

Even keys get identical bytes from both processes (both puts succeed), odd keys get
different bytes (exactly one process wins, the other gets StoreConflictError). Each
process visits the keys in its own shuffled order, so both win some keys. Afterwards
every key holds exactly one complete candidate value.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
from pathlib import Path

import pytest

from mgrpo_jax.store import StoreConflictError, open_store
from tests.support.store_contract import race_values

NUM_KEYS = 500
VALUE_SIZE = 4096


def _racer(uri: str, process: int, barrier, result_path: str) -> None:
  store = open_store(uri)
  outcomes = {}
  barrier.wait(timeout=60)
  values = race_values(process, NUM_KEYS, VALUE_SIZE)
  random.Random(process).shuffle(values)
  for key, data in values:
    try:
      store.put(key, data)
      outcomes[key] = "ok"
    except StoreConflictError as e:
      outcomes[key] = "conflict" if e.key == key and key in str(e) else f"bad error: {e}"
  Path(result_path).write_text(json.dumps(outcomes))


@pytest.mark.parametrize("backend", ["local", "gcs"])
def test_two_processes_race_puts(backend: str, tmp_path, request: pytest.FixtureRequest
                                 ) -> None:
  if backend == "local":
    uri = str(tmp_path / "store")
  else:
    uri = f"gs://{request.getfixturevalue('gcs_bucket')}/race"
  context = multiprocessing.get_context("spawn")
  barrier = context.Barrier(2)
  results = [tmp_path / f"result{p}.json" for p in range(2)]
  racers = [context.Process(target=_racer, args=(uri, p, barrier, str(results[p])))
            for p in range(2)]
  for racer in racers:
    racer.start()
  for racer in racers:
    racer.join(timeout=120)
    assert racer.exitcode == 0, f"racer exited with {racer.exitcode}"

  outcomes = [json.loads(path.read_text()) for path in results]
  candidates = [dict(race_values(p, NUM_KEYS, VALUE_SIZE)) for p in range(2)]
  store = open_store(uri)
  assert len(store.list("race/")) == NUM_KEYS
  conflicts = [0, 0]
  for i, key in enumerate(sorted(candidates[0])):
    stored = store.get(key)
    pair = (outcomes[0][key], outcomes[1][key])
    if i % 2 == 0:
      assert pair == ("ok", "ok"), key
      assert stored == candidates[0][key] == candidates[1][key]
    else:
      assert sorted(pair) == ["conflict", "ok"], (key, pair)
      winner = pair.index("ok")
      assert stored == candidates[winner][key], f"{key}: not the winner's bytes"
      conflicts[1 - winner] += 1
  assert sum(conflicts) == NUM_KEYS // 2
  assert min(conflicts) > 0, f"one process never lost a race: {conflicts}"
  if backend == "local":
    leftovers = [n for _, _, files in os.walk(uri) for n in files if n.startswith(".")]
    assert leftovers == []
