"""A run with a `gs://` workdir resumes on a fresh machine: nothing it needs is local.

The run (tests/support/plumbing_config.py through `trainer_harness`, 2 steps) is killed
right after step 1's outcomes are in the store (`MGRPO_FAULT=main:outcomes:1`: the main
slice is SIGKILLed, the sub slice stopped), every local folder of the run is deleted
(the world, tokenizer and compilation caches are rebuilt), and the same command
finishes it: the final checkpoints equal an uninterrupted run's bitwise, and the
metrics of every step are in the workdir.
"""

from __future__ import annotations

import json
import shutil

from mgrpo_jax.store import open_store
from mgrpo_jax.store.schema import outcomes_key
from tests.support import trainer_harness

NUM_STEPS = 2
RUN_ID = "local_demo"


def launch(workdir, machine, fault=None):
  """The run in `workdir`, launched in the folder `machine` (its local root)."""
  machine.mkdir(exist_ok=True)
  return trainer_harness.launch(workdir, f"--config.experiment.num_steps={NUM_STEPS}",
                                fault=fault, cwd=machine, gin_dir=machine.parent,
                                timeout=900)


def test_resume_on_a_fresh_machine_equals_uninterrupted_run(gcs_bucket, tmp_path):
  reference = tmp_path / "reference" / "run"
  result = launch(reference, tmp_path / "reference")
  assert result.returncode == 0, result.stdout[-4000:]

  workdir = f"gs://{gcs_bucket}/runs/resume"
  first, second = tmp_path / "machine_1", tmp_path / "machine_2"
  result = launch(workdir, first, fault="main:outcomes:1")
  assert "exited with status -9" in result.stdout, result.stdout[-3000:]
  assert open_store(f"{workdir}/store").exists(outcomes_key(RUN_ID, 1))
  shutil.rmtree(first)
  result = launch(workdir, second)
  assert result.returncode == 0, result.stdout[-4000:]

  trainer_harness.assert_same_final_checkpoints(reference, workdir)
  objects = open_store(workdir)  # reads any object under the workdir
  for name in ("main", "sub"):
    lines = objects.get(f"logs/{name}/metrics.jsonl").decode().splitlines()
    assert sorted({json.loads(line)["step"] for line in lines}) == list(range(NUM_STEPS))
    assert objects.list(f"logs/{name}/tensorboard/")
  assert not (second / "runs_local" / RUN_ID / "main").exists()
  assert not (second / "runs_local" / RUN_ID / "sub").exists()
