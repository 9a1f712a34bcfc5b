"""The unsynchronized arm's FIFO of S calls: order, age, and its write-ahead file."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.agents.records import END_RESULT, SubRecord, Trajectory
from mgrpo_jax.slices import sub_queue
from mgrpo_jax.store.folder import open_folder
from mgrpo_jax.training.files import dump_json


def _record(step: int, index: int) -> SubRecord:
  trajectory = Trajectory(ids=np.arange(5, dtype=np.int32) + index,
                          loss_mask=np.array([0, 0, 1, 1, 1], bool),
                          logprobs=np.array([0, 0, -0.5, -0.25, -1], np.float32),
                          roles=np.zeros(5, np.int32), messages=(), policy_version=step,
                          format_ok=True, error="", end=END_RESULT, num_turns=2,
                          tool_calls=(), final="boss E044", wall_s=0.0)
  return SubRecord(f"q{step}", index % 4, index, "E017 boss", "", "boss E044", trajectory,
                   expert=1.0, main_correct=float(index % 2))


@given(st.lists(st.integers(0, 7), max_size=12), st.integers(0, 10))
def test_take_is_first_in_first_out_and_loses_nothing(made_per_step, count):
  queue, taken_all, step = [], [], 0
  for step, made in enumerate(made_per_step):
    taken, queue = sub_queue.take(queue, count)
    taken_all += taken
    assert all(c.step < step for c in taken)  # never the step's own calls
    queue += [sub_queue.QueuedCall(step, _record(step, i)) for i in range(made)]
  order = [(c.step, c.record.call_index) for c in taken_all + queue]
  assert order == sorted(order) and len(order) == sum(made_per_step)


def test_scalars_measure_age_and_backlog():
  taken = [sub_queue.QueuedCall(1, _record(1, 0)), sub_queue.QueuedCall(3, _record(3, 1))]
  left = [sub_queue.QueuedCall(4, _record(4, 0))]
  assert sub_queue.queue_scalars(taken, left, 5) == {
      "sub/queue_taken": 2.0, "sub/queue_age_mean": 3.0, "sub/queue_backlog": 1.0}


def test_queue_file_round_trips_and_is_retired_with_the_step_caches(tmp_path):
  files = sub_queue.SubCallQueue(open_folder(str(tmp_path)), checkpoints_kept=1)
  assert files.load(0) == []
  with pytest.raises(FileNotFoundError, match="step 3"):
    files.load(3)
  queue = [sub_queue.QueuedCall(s, _record(s, i)) for s, i in ((1, 0), (2, 5))]
  for step in (2, 3):
    files.save(step, queue)
  loaded = files.load(3)
  assert [(c.step, dump_json(c.record.to_dict())) for c in loaded] == [
      (c.step, dump_json(c.record.to_dict())) for c in queue]
  files.retire(2)  # after step 2's checkpoint: the queue at the start of step 3 stays
  assert files.folder.list("step_") == ["step_00000003.json"]
