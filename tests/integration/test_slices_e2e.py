"""Two-process training through `launch/tpu_run.py --slice=all`, and exact resume after SIGKILL.

The slices run the tiny models of tests/support/plumbing_config.py with a policy mix
(`trainer_policy_mix.ThinkingOracle`: model-sampled thinking, oracle actions) so that M
delegates, S reports and rewards and advantages are not all 0. The resumed runs are
killed and restarted with the same command each time; their final checkpoints must
equal the uninterrupted run's bitwise:
- a local workdir, killed at named points of the step protocol (`MGRPO_FAULT`: during
  M's rollouts, after outcomes, during S's update);
- a `gs://` workdir on the GCS emulator, restarted each time on a fresh machine (every
  local folder deleted: the world, tokenizer and compilation caches are rebuilt): first
  killed right after a step's outcomes are in the store, then one slice, drawn at random,
  at a random time in the next step. Its metrics of every step are in the workdir.
(tools/fault_soak.py is the long version: 20 steps, many kills, an emulator restart.)
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import threading
import time

import grpc
import jax
import pytest

from mgrpo_jax.metrics.machine import label as machine_label
from mgrpo_jax.metrics.writer import read_metrics
from mgrpo_jax.serving import messages, request_parts
from mgrpo_jax.serving.address import decode_address
from mgrpo_jax.serving.proto import sub_agent_pb2 as pb
from mgrpo_jax.serving.rpc import RpcClient, RpcError
from mgrpo_jax.slices.step_cache import SubStepCache
from mgrpo_jax.store import open_store
from mgrpo_jax.store.folder import LocalFolder
from mgrpo_jax.store.schema import MainOutcomes, SliceAck, ack_key, outcomes_key
from tests.support import trainer_harness

NUM_STEPS = 3
RUN_ID = "local_demo"


def launch(workdir, *extra, fault=None, machine=None, shared_cache=True):
  """The run in `workdir` to its end, with `extra` flags; a `gs://` run keeps its local
  folder in `machine`."""
  return trainer_harness.launch(workdir, f"--config.experiment.num_steps={NUM_STEPS}", *extra,
                                fault=fault, cwd=machine or trainer_harness.ROOT,
                                gin_dir=machine, shared_cache=shared_cache,
                                timeout=600)  # a hang guard, not a time limit


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("reference") / "run"
  result = launch(workdir, shared_cache=False)  # the default cache (checked below)
  assert result.returncode == 0, result.stdout[-4000:]
  # The programs it compiled, shared with this session's later launches of the same config.
  trainer_harness.share_compiled_programs(workdir.parent / "jax_cache")
  return workdir, result.stdout


def test_two_slices_complete_every_step(reference):
  workdir, output = reference
  store = open_store(str(workdir / "store"))
  delegations = 0
  query_ids = []
  for step in range(NUM_STEPS):
    outcomes = MainOutcomes.from_bytes(outcomes_key(RUN_ID, step),
                                       store.get(outcomes_key(RUN_ID, step)))
    assert outcomes.shape == (1, 3)
    delegations += int(outcomes.to_arrays()["num_sub_calls"].sum())
    query_ids += [q.query_id for q in outcomes.queries]
    for name in ("main", "sub"):
      ack = SliceAck.from_bytes(ack_key(RUN_ID, step, name),
                                store.get(ack_key(RUN_ID, step, name)))
      assert ack.weight_version == step + 1
  assert delegations > 0
  # Two of the eight training worlds were asked (`world.train_worlds`: world 1's ids are
  # `train-w1-...`), their tool calls routed by question on both sides of the socket.
  assert any(i.startswith("train-w1-") for i in query_ids), query_ids
  assert any(not i.startswith("train-w") for i in query_ids), query_ids
  for role in ("main", "sub"):
    step, arrays = trainer_harness.checkpoint_arrays(workdir, role)
    assert step == NUM_STEPS and int(arrays["/step"]) == NUM_STEPS
  main = read_metrics(workdir / "logs" / "main" / "metrics.jsonl")
  sub = read_metrics(workdir / "logs" / "sub" / "metrics.jsonl")
  assert [m["step"] for m in main] == [m["step"] for m in sub] == list(range(NUM_STEPS))
  for record in main:
    for phase in ("rollout", "sub_calls", "scoring", "store", "update", "checkpoint"):
      assert record[f"time/{phase}_s"] >= 0
    assert record["throughput/main_tokens_per_s"] > 0
  for record in sub:
    for name in ("sub/update/loss", "sub/update/grad_norm", "sub/advantage_std",
                 "sub/reward_mean"):
      assert math.isfinite(record[name])
  assert any(m["sub/advantage_abs_mean"] > 0 for m in sub)
  assert any(m["main/advantage_abs_mean"] > 0 for m in main)
  assert "[main] step 3/3" in output and "[sub] step 3/3" in output
  # Step 0's trajectory page (`logging.trajectory_every` = 10): the query's K rollouts with
  # A_M, every S call with R_S and either A_S and its slots or its drop.
  assert sorted(p.name for p in (workdir / "report").glob("rl_step_*")) == [
      "rl_step_00000.html"]
  page = (workdir / "report" / "rl_step_00000.html").read_text()
  calls = int(MainOutcomes.from_bytes(outcomes_key(RUN_ID, 0), store.get(
      outcomes_key(RUN_ID, 0))).to_arrays()["num_sub_calls"].sum())
  assert page.count('<article class="rollout') == page.count('"advantage">A_M ') == 3
  assert page.count('data-call="') == page.count('"reward">R_S ') == calls
  assert page.count('"advantage">A_S ') + page.count('"alignment">dropped (') == calls
  # The caches of the steps after the oldest of the 3 kept checkpoints (steps_done 1..3).
  assert sorted(p.name for p in (workdir / "main" / "cache").glob("step_*")) == [
      "step_00000001.json", "step_00000002.json"]
  assert {p.name for p in (workdir / "sub" / "cache").glob("step_*")} <= {
      "step_00000001", "step_00000002"}
  # The persistent compilation cache beside the run holds the slices' compiled programs.
  assert any(p.name.startswith("jit_") for p in (workdir.parent / "jax_cache").iterdir())
  # Each slice recorded the machine it computed on, and the report's table ends with it.
  for role in ("main_rl", "sub_rl"):
    (recorded,) = json.loads((workdir / "machines" / f"{role}.json").read_text())
    assert recorded == dict(recorded, backend="cpu", devices=["cpu"])
    assert recorded["packages"]["jax"] == jax.__version__
  last_line = (workdir / "report" / "summary.txt").read_text().splitlines()[-1]
  assert last_line == f"computed on: {machine_label(recorded)}"
  assert last_line in output  # the parent prints the table


def _same_outcomes(reference_workdir, workdir) -> bool:
  ours, theirs = open_store(f"{workdir}/store"), open_store(f"{reference_workdir}/store")
  return all(ours.get(outcomes_key(RUN_ID, step)) == theirs.get(outcomes_key(RUN_ID, step))
             for step in range(NUM_STEPS))


def test_both_slices_in_one_process_equal_the_two_process_run(reference, tmp_path):
  """`serving.colocate` (automatic on a host of one TPU chip): the RL stage is one child,
  `--slice=both`, whose two threads run the slices on this process's one CPU device,
  through the store and loopback gRPC; the run equals the two-process run bitwise."""
  workdir = tmp_path / "run"
  result = launch(workdir, "--config.serving.colocate=true")
  assert result.returncode == 0, result.stdout[-4000:]
  assert "[rl] [main] step 3/3" in result.stdout and "[rl] [sub] step 3/3" in result.stdout
  assert sorted(p.name for p in (workdir / "launch").glob("*.pid")) == ["rl.pid"]
  for role in ("main_rl", "sub_rl"):
    (recorded,) = json.loads((workdir / "machines" / f"{role}.json").read_text())
    assert recorded["devices"] == ["cpu"]
  trainer_harness.assert_same_final_checkpoints(reference[0], workdir)
  assert _same_outcomes(reference[0], workdir)


def _raw_call(address, parts) -> grpc.StatusCode:
  """The status of a RunSubtasks call streaming `parts` (bytes) as its parts."""
  with grpc.insecure_channel(f"{address[0]}:{address[1]}", options=[
      ("grpc.max_send_message_length", -1)]) as channel:
    call = channel.stream_unary(f"/{messages.SERVICE}/RunSubtasks", request_serializer=None)
    try:
      call(iter(parts), timeout=60)
    except grpc.RpcError as e:
      return e.code()
  return grpc.StatusCode.OK


def _attack(workdir, reference_workdir, report: dict) -> None:
  """A hostile caller on the run's service (loopback: no token): every malformed request
  kind, then a well-formed call M never makes in step 2, then that call again with
  another sub-task. Records what each got in `report`."""
  address_file = workdir / "sub" / "service.json"
  while not address_file.exists():
    time.sleep(0.1)
  address = decode_address(address_file.read_bytes(), str(address_file))
  client = RpcClient(messages.SERVICE, address)
  reference = open_store(f"{reference_workdir}/store")
  queries = [MainOutcomes.from_bytes(outcomes_key(RUN_ID, t), reference.get(
      outcomes_key(RUN_ID, t))).queries[0].query_id for t in range(NUM_STEPS)]
  query = next(q for q in queries if q != queries[2])  # not step 2's question

  def task(**fields):
    return pb.SubTask(**{"query_id": query, "subtask": "Find the boss of x.", **fields})

  def parts(request: pb.RunSubtasksRequest) -> list[bytes]:
    return [part.SerializeToString() for part in request_parts.parts(request, 64 << 10)]

  announce = pb.RunSubtasksPart(header=pb.RunSubtasksHeader(num_tasks=1 << 19))
  attacks = {
      "wrong types": [b"\x0a\x03\x0a\x01x", b"\x12\x02\x12\x00"],
      "out-of-range rollout": parts(pb.RunSubtasksRequest(tasks=[task(rollout_index=3)])),
      "out-of-range call": parts(pb.RunSubtasksRequest(tasks=[task(call_index=4)])),
      "unknown query": parts(pb.RunSubtasksRequest(tasks=[task(query_id="nope")])),
      "64 MiB part": [b"\x12\x00" * (32 << 20)],
      "1 MiB of empty tasks": [announce.SerializeToString()] + [b"\x12\x00"] * (1 << 19),
  }
  for kind, request in attacks.items():
    report[kind] = (_raw_call(address, request), client.call(
        "Status", pb.StatusRequest(), pb.StatusReply).version >= 0)
  never_made = pb.RunSubtasksRequest(step=2, version=2, seed=5, tasks=[task(call_index=3)])
  while (reply := client.call("RunSubtasks", never_made, pb.RunSubtasksReply,
                              parts=request_parts.parts)).status:
    time.sleep(0.1)  # NOT_READY until S has trained step 1
  report["never made"] = reply.results[0].task.query_id
  other = pb.RunSubtasksRequest(step=2, version=2, seed=5,
                                tasks=[task(call_index=3, subtask="Something else.")])
  try:
    client.call("RunSubtasks", other, pb.RunSubtasksReply, parts=request_parts.parts)
  except RpcError as e:
    report["duplicate with other content"] = str(e)


def test_hostile_calls_during_a_run_change_nothing_it_trains(reference, tmp_path):
  """Malformed requests of every kind get an error and leave the service serving; a
  well-formed call M never made is stored but never trained on (counted as
  `sub/ignored_calls`); the same key with another sub-task is refused and the stored
  record stays. The run ends bitwise equal to the undisturbed one."""
  workdir = tmp_path / "run"
  report = {}
  attacker = threading.Thread(target=_attack, args=(workdir, reference[0], report),
                              daemon=True)
  attacker.start()
  result = launch(workdir)
  attacker.join(60)
  assert result.returncode == 0, result.stdout[-4000:]
  invalid, too_large = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED
  assert report.pop("64 MiB part") == (too_large, True)
  assert report.pop("never made") and "stored with another sub-task" in report.pop(
      "duplicate with other content")
  assert report == {kind: (invalid, True) for kind in (
      "wrong types", "out-of-range rollout", "out-of-range call", "unknown query",
      "1 MiB of empty tasks")}
  trainer_harness.assert_same_final_checkpoints(reference[0], workdir)
  assert _same_outcomes(reference[0], workdir)
  sub = read_metrics(workdir / "logs" / "sub" / "metrics.jsonl")
  assert [m["sub/ignored_calls"] for m in sub] == [0.0, 0.0, 1.0]
  (stored,) = [r for _, r in SubStepCache(LocalFolder(workdir / "sub" / "cache")).load(2)
               if r.call_index == 3]
  assert stored.subtask == "Find the boss of x."


def test_resume_after_sigkill_equals_uninterrupted_run(reference, tmp_path):
  workdir = tmp_path / "run"
  store = open_store(str(workdir / "store"))
  for fault in ("main:outcomes:0", "sub:loaded:1", "main:rollout:2"):
    result = launch(workdir, fault=fault)
    assert result.returncode != 0, f"fault {fault} did not fire:\n{result.stdout[-3000:]}"
    assert "exited with status -9" in result.stdout, result.stdout[-3000:]
  assert store.exists(outcomes_key(RUN_ID, 1)) and not store.exists(ack_key(RUN_ID, 2, "main"))
  result = launch(workdir)
  assert result.returncode == 0, result.stdout[-4000:]
  trainer_harness.assert_same_final_checkpoints(reference[0], workdir)
  assert _same_outcomes(reference[0], workdir)
  # Step 0 was redone from its write-ahead cache: no sampling throughput from it (was:
  # tokens over a rollout time of ~0, 1e12 tokens/s).
  main = read_metrics(workdir / "logs" / "main" / "metrics.jsonl")
  assert main[0]["main/from_cache"] == 1.0
  for record in main:
    assert ("throughput/main_tokens_per_s" in record) == (record["main/from_cache"] == 0.0)


def test_a_kill_after_a_steps_checkpoint_keeps_the_steps_metrics_line(reference, tmp_path):
  workdir = tmp_path / "run"
  for fault in ("main:checkpoint:0", "sub:checkpoint:1"):  # committed, not yet reported
    result = launch(workdir, fault=fault)
    assert "exited with status -9" in result.stdout, result.stdout[-3000:]
  result = launch(workdir)
  assert result.returncode == 0, result.stdout[-4000:]
  trainer_harness.assert_same_final_checkpoints(reference[0], workdir)
  main = read_metrics(workdir / "logs" / "main" / "metrics.jsonl")
  sub = read_metrics(workdir / "logs" / "sub" / "metrics.jsonl")
  assert [m["step"] for m in main] == [m["step"] for m in sub] == list(range(NUM_STEPS))
  # The killed steps kept their provisional lines, written before the checkpoint.
  assert "time/checkpoint_s" not in main[0] and "time/checkpoint_s" in main[1]
  assert "time/checkpoint_s" not in sub[1] and "time/checkpoint_s" in sub[2]
  assert math.isfinite(main[0]["main/update/loss"])  # the step's scalars, not a stub


def _kill_one_slice_mid_step(workdir, machine, victim: str, rng: random.Random) -> int:
  """Starts the run in `machine`; once it acknowledges a step of its own, SIGKILLs
  `victim`'s process 0-3 s later. Returns the parent's status."""
  before = trainer_harness.acked_steps(workdir, NUM_STEPS, RUN_ID, slices=("main",))
  parent = trainer_harness.start(workdir, f"--config.experiment.num_steps={NUM_STEPS}",
                                 slice_name="all", cwd=machine, gin_dir=machine)
  while parent.poll() is None and trainer_harness.acked_steps(
      workdir, NUM_STEPS, RUN_ID, slices=("main",)) == before:
    time.sleep(0.2)
  time.sleep(rng.uniform(0.0, 3.0))
  pid_file = machine / "runs_local" / RUN_ID / "launch" / f"{victim}.pid"
  if parent.poll() is None:
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
  output = parent.communicate(timeout=300)[0]
  assert parent.returncode != 0, f"the run ended before the kill:\n{output[-3000:]}"
  return parent.returncode


def test_gs_run_resumes_on_fresh_machines_after_kills(reference, gcs_bucket, tmp_path):
  workdir = f"gs://{gcs_bucket}/runs/resume"
  machines = [tmp_path / f"machine_{i}" for i in range(3)]
  for machine in machines:
    machine.mkdir()
  result = launch(workdir, fault="main:outcomes:0", machine=machines[0])
  assert "exited with status -9" in result.stdout, result.stdout[-3000:]
  assert open_store(f"{workdir}/store").exists(outcomes_key(RUN_ID, 0))
  shutil.rmtree(machines[0])
  rng = random.Random(20261204)
  _kill_one_slice_mid_step(workdir, machines[1], rng.choice(["main", "sub"]), rng)
  shutil.rmtree(machines[1])
  result = launch(workdir, machine=machines[2])
  assert result.returncode == 0, result.stdout[-4000:]

  trainer_harness.assert_same_final_checkpoints(reference[0], workdir)
  objects = open_store(workdir)  # reads any object under the workdir
  for name in ("main", "sub"):
    lines = objects.get(f"logs/{name}/metrics.jsonl").decode().splitlines()
    assert sorted({json.loads(line)["step"] for line in lines}) == list(range(NUM_STEPS))
    assert objects.list(f"logs/{name}/tensorboard/")
  # Three launches on one machine type: one record per role, in the gs:// workdir.
  for role in ("main_rl", "sub_rl"):
    assert len(json.loads(objects.get(f"machines/{role}.json"))) == 1
  assert not (machines[2] / "runs_local" / RUN_ID / "main").exists()
  assert not (machines[2] / "runs_local" / RUN_ID / "sub").exists()


def test_the_evaluation_runs_in_its_own_child_process(reference):
  """A rerun with the evaluation on: RL is done, so only the `eval_after` stage runs, as
  a `[eval]` child (`--slice=all --stage=eval_after`); the parent computes nothing."""
  workdir, _ = reference
  result = trainer_harness.launch(
      workdir, f"--config.experiment.num_steps={NUM_STEPS}", "--config.eval.enabled=True",
      "--config.eval.num_questions=4", "--config.eval.samples=1",
      "--config.eval.viewer_questions=0")
  assert result.returncode == 0, result.stdout[-4000:]
  assert "[eval] eval final: accuracy" in result.stdout
  assert (workdir / "eval" / "final.json").exists()
  assert (workdir / "launch" / "eval.pid").exists()
  assert "held-out accuracy" in result.stdout  # the report's table, from the child's summary
  (recorded,) = json.loads((workdir / "machines" / "all_eval_after.json").read_text())
  assert f"computed on: {machine_label(recorded)}" in result.stdout  # one machine, every role
