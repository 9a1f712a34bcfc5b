"""A LocalStore writer killed with SIGKILL mid-put leaves no record or the whole record.

Each repetition forks a writer that puts several multi-MB records in order and kills it
after a random delay. Afterwards the visible records must be exactly the first m of the
sequence, each byte-identical to what was written; a restarted writer re-puts all of
them without a conflict (a partial record would conflict or read back wrong).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import time

from mgrpo_jax.store import LocalStore

REPETITIONS = 50
RECORDS_PER_WRITER = 4
RECORD_SIZE = 2 * 1024 * 1024


def _writer(root: str, keys: list[str], records: list[bytes], conn) -> None:
  store = LocalStore(root)
  conn.send("started")
  for key, data in zip(keys, records, strict=True):
    store.put(key, data)
  conn.send("done")


def _temp_files(folder: str) -> list[str]:
  return [name for _, _, files in os.walk(folder) for name in files if name.startswith(".")]


def test_sigkill_mid_put_never_leaves_partial_record(tmp_path) -> None:
  root = str(tmp_path / "store")
  store = LocalStore(root)
  records = [random.Random(j).randbytes(RECORD_SIZE) for j in range(RECORDS_PER_WRITER)]
  start = time.perf_counter()
  store.put("calibration", records[0])
  put_seconds = time.perf_counter() - start
  context = multiprocessing.get_context("spawn")  # never fork a process running JAX
  rng = random.Random(0)
  reps_with_temp_files = 0
  for rep in range(REPETITIONS):
    keys = [f"crash/r{rep:02d}/k{j}" for j in range(RECORDS_PER_WRITER)]
    parent_conn, child_conn = context.Pipe()
    writer = context.Process(target=_writer, args=(root, keys, records, child_conn))
    writer.start()
    assert parent_conn.poll(30) and parent_conn.recv() == "started"
    time.sleep(rng.uniform(0, RECORDS_PER_WRITER * put_seconds))
    os.kill(writer.pid, signal.SIGKILL)
    writer.join(timeout=30)

    folder = os.path.join(root, "crash", f"r{rep:02d}")
    reps_with_temp_files += bool(_temp_files(folder))
    visible = store.list(f"crash/r{rep:02d}/")
    assert visible == keys[:len(visible)], f"rep {rep}: records out of order: {visible}"
    for key in visible:
      assert store.get(key) == records[keys.index(key)], f"rep {rep}: {key} is partial"
    for key, data in zip(keys, records, strict=True):  # a restarted writer finishes
      store.put(key, data)
      assert store.get(key) == data
    shutil.rmtree(folder)
  # Sanity check of the test itself: some kills landed inside a put.
  assert reps_with_temp_files > 0
