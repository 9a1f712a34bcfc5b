"""Modes through `launch/tpu_run.py --slice=all`: frozen_sub, shared_policy, unsynchronized.

frozen_sub: S is served and acknowledged every step but never updated: its checkpoint
equals a fresh seeded init of S bitwise, and its acks report 0 updates. shared_policy:
no sub slice (it exits at once), one policy whose update batch holds M's rows and the
aligned S rows of the step (the update's token count is the sum of both).
unsynchronized: S trains on the front of a FIFO of earlier steps' calls, carried across
steps and across a restart in its write-ahead file.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from mgrpo_jax.config import apply_overrides
from mgrpo_jax.metrics.writer import read_metrics
from mgrpo_jax.slices import sub_queue
from mgrpo_jax.store import open_store
from mgrpo_jax.store.folder import open_folder
from mgrpo_jax.store.schema import SliceAck, ack_key
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup
from tests.support import plumbing_config as demo
from tests.support import trainer_harness

RUN_ID = "local_demo"


def _params(workdir, role):
  with ocp.CheckpointManager(workdir / "checkpoints" / role) as manager:
    restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
        state=ocp.args.StandardRestore()))
  return restored.state["params"], int(restored.state["step"])


def _named(tree) -> dict[str, np.ndarray]:
  """{"layers/0/attn/k_proj/kernel": array}: leaf paths without NNX's "value" wrapper."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    parts = [str(getattr(p, "key", getattr(p, "idx", p))) for p in path]
    out["/".join(part for part in parts if part != "value")] = np.asarray(leaf)
  return out


def test_frozen_sub_keeps_s_weights_bit_identical(tmp_path):
  workdir = tmp_path / "run"
  result = trainer_harness.launch(workdir, "--config.experiment.num_steps=2",
                                  "--config.experiment.mode=frozen_sub")
  assert result.returncode == 0, result.stdout[-4000:]
  store = open_store(str(workdir / "store"))
  for step in range(2):
    ack = SliceAck.from_bytes(ack_key(RUN_ID, step, "sub"),
                              store.get(ack_key(RUN_ID, step, "sub")))
    assert ack.weight_version == 0
  params, step = _params(workdir, "sub")
  assert step == 0
  # The seeded init of S, rebuilt independently from the run's tokenizer and config.
  config = demo.get_config()
  apply_overrides(config, {"experiment.mode": "frozen_sub"})
  root = RunPaths.from_config(config, str(workdir)).local
  model, _ = agent_setup.build_model(AgentSetup.from_config(config, "sub"),
                                     functools.partial(agent_setup.world_tokenizer, root,
                                                       TokenizerSetup.from_config(config)))
  fresh = _named(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
  saved = _named(params)
  assert sorted(fresh) == sorted(saved) and len(fresh) > 5
  for name, value in fresh.items():
    np.testing.assert_array_equal(saved[name], value, err_msg=name)
  _, main_step = _params(workdir, "main")
  assert main_step == 2


def test_shared_policy_trains_one_policy_on_both_roles(tmp_path):
  workdir = tmp_path / "run"
  result = trainer_harness.launch(workdir, "--config.experiment.num_steps=2",
                                  "--config.experiment.mode=shared_policy")
  assert result.returncode == 0, result.stdout[-4000:]
  assert "no separate sub-agent slice" in result.stdout
  assert not (workdir / "checkpoints" / "sub").exists()
  _, step = _params(workdir, "main")
  assert step == 2
  metrics = read_metrics(workdir / "logs" / "main" / "metrics.jsonl")
  assert len(metrics) == 2
  for m in metrics:
    assert m["main/update/num_tokens"] == m["shared/main_tokens"] + m["shared/sub_tokens"]
  assert any(m["shared/sub_tokens"] > 0 for m in metrics)


def test_unsynchronized_trains_s_from_a_fifo_of_earlier_steps_calls(tmp_path):
  """Two calls a step leave the queue: step 0 trains on nothing (no earlier calls), each
  later step on the two oldest, and the backlog is every call made minus those taken.
  Extending the run resumes from the queue file and keeps the same accounting."""
  workdir = tmp_path / "run"
  overrides = ("--config.experiment.mode=unsynchronized", "--config.mgrpo.queue_calls=2",
               "--config.mgrpo.queue_group=2")
  for steps in (2, 3):
    result = trainer_harness.launch(workdir, f"--config.experiment.num_steps={steps}",
                                    *overrides, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:]
  lines = read_metrics(workdir / "logs" / "sub" / "metrics.jsonl")
  assert [m["step"] for m in lines] == [0, 1, 2]
  backlog = 0.0
  for m in lines:
    assert m["sub/queue_taken"] == min(2.0, backlog)
    assert m["sub/valid_slots"] == m["sub/queue_taken"]
    assert (m["sub/queue_age_mean"] >= 1.0) == (m["sub/queue_taken"] > 0)
    backlog = m["sub/queue_backlog"]
  queue = sub_queue.SubCallQueue(open_folder(str(workdir / "sub" / "queue"))).load(3)
  assert len(queue) == backlog and [c.step for c in queue] == sorted(c.step for c in queue)
  assert all(0 <= c.record.expert <= 1 and c.record.main_correct in (0.0, 1.0) for c in queue)
  _, step = _params(workdir, "sub")
  assert step == 3
