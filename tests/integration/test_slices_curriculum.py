"""The two-stage curriculum through `launch/tpu_run.py --slice=all` (slices/curriculum.py).

Stage 1 is the plumbing run; stage 2 starts from its final agents, trains on the stage-2
training questions the selection kept (threshold 1: every question, as the untrained
agents fail them all) and is its own run in <workdir>/stage2.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import orbax.checkpoint as ocp

from mgrpo_jax.metrics.writer import read_metrics
from mgrpo_jax.store import open_store
from mgrpo_jax.store.schema import MainOutcomes, outcomes_key
from tests.support import trainer_harness


def _final_params(folder):
  with ocp.CheckpointManager(folder) as manager:
    restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
        state=ocp.args.StandardRestore()))
  return restored.state["params"]


def _init_params(folder):
  with ocp.CheckpointManager(folder) as manager:
    restored = manager.restore(0, args=ocp.args.Composite(params=ocp.args.StandardRestore()))
  return restored.params


def test_stage2_starts_from_stage1_and_trains_on_the_selected_questions(tmp_path):
  workdir = tmp_path / "run"
  result = trainer_harness.launch(
      workdir, "--config.experiment.num_steps=1", "--config.curriculum.stage2_steps=1",
      "--config.curriculum.success_samples=2", "--config.curriculum.success_threshold=0.6",
      "--config.curriculum.stage2_types=multihop,puzzle", timeout=600)
  assert result.returncode == 0, result.stdout[-4000:]
  assert "stage 2: kept" in result.stdout
  bad = trainer_harness.launch(tmp_path / "bad", "--config.curriculum.stage2_steps=2",
                               "--config.curriculum.stage2_types=lookup")
  assert bad.returncode != 0 and "world.question_types='lookup'" in bad.stdout
  assert not (tmp_path / "bad" / "checkpoints").exists()  # refused before stage 1
  selection = json.loads((workdir / "stage2" / "selection.json").read_text())
  rates = selection["rates"]
  assert selection["candidates"] == len(rates) > 0
  assert selection["kept"] == [qid for qid in rates if rates[qid] <= 0.6]
  assert all(r in (0.0, 0.5, 1.0) for r in rates.values())  # 2 samples each
  for role in ("main", "sub"):
    stage1 = _final_params(workdir / "checkpoints" / role)
    init = _init_params(workdir / "stage2" / "init" / role)
    for a, b in zip(jax.tree.leaves(stage1), jax.tree.leaves(init), strict=True):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  stage2 = workdir / "stage2"
  assert [m["step"] for m in read_metrics(stage2 / "logs" / "main" / "metrics.jsonl")] == [0]
  store = open_store(str(stage2 / "store"))
  asked = set()
  for step in (0,):
    key = outcomes_key("local_demo-stage2", step)
    asked |= {q.query_id for q in MainOutcomes.from_bytes(key, store.get(key)).queries}
  assert asked and asked <= set(selection["kept"])
