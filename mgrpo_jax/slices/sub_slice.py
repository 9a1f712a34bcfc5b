"""The sub slice: the sub-agent service and S's trainer (docs/ALGORITHM.md, "The step protocol").

On start: restore S's latest checkpoint (its metadata `steps_done` = v, S's weight
version), publish versions max(0, v - staleness)..v to the service (older ones from
their checkpoints), start the service and publish its address.

Step t:
  1. wait for outcomes(t) in the store (correct_M, R_M, d_k per rollout);
  2. load the step's S records from the service's cache and keep those the outcomes name
     with the digest of what M received (`step_math.received_calls`; any other record,
     such as a call M never made, is counted as `sub/ignored_calls` and not trained on);
     every rollout (q, k) must have exactly its d_k calls (a missing one is an error
     naming (q, k, i));
  3. r_expert (the rendering's expert judge, question looked up by id), R_S
     (`plugins.sub_reward_fn`, correct_M from the outcomes);
  4. alignment to D slots (key from (seed, t)) and per-query advantages, or the
     arrival-order grouping of no_alignment (`step_math`), or (unsynchronized) the
     front of S's FIFO, which the step's calls then join (`sub_queue.py`);
  5. update S (not in frozen_sub), the step's provisional metrics line, checkpoint S
     (params, optimizer, step, PRNG, steps_done), put ack_sub(t) with S's weight version
     (updates done), THEN publish version t + 1 to the service, retire the step's cache
     (`step_cache.py`).

frozen_sub: S is never updated (its weights stay bit-identical); the service still
advances its version each step and the slice still acks; its progress after a restart
is read from its acks in the store. shared_policy and single_agent have no sub slice:
it logs that and returns at once.

Multi-host (several JAX processes, `distributed.py`): process 0 runs the service (its
sampler reads a replica of S on process 0's devices: the other hosts' chips only train),
loads the step's records from its cache and computes the step's batch, which it
broadcasts; every process then feeds its rows of it to the update, and checkpoint saves
and restores are collective. Process 0 alone writes acks, the service address, metrics
and log lines. Every process polls the store for outcomes(t) itself, so no collective
is left waiting while the main slice rolls out.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mgrpo_jax.agents.records import SubRecord
from mgrpo_jax.agents.scoring import score_sub
from mgrpo_jax.agents.sub_client import InProcessSubAgentClient
from mgrpo_jax.config.modes import Mode
from mgrpo_jax.scale import distributed
from mgrpo_jax.scale.multihost import multi_host, servable_params
from mgrpo_jax.scale.writers import log
from mgrpo_jax.serving.address import encode_address, service_token
from mgrpo_jax.serving.rpc import ServerLimits
from mgrpo_jax.serving.sub_service import RequestGate, SubAgentService, WeightVersions
from mgrpo_jax.serving.tls import server_tls
from mgrpo_jax.slices import step_math, sub_queue
from mgrpo_jax.slices.common import Timer, describe_steps
from mgrpo_jax.slices.faults import crash_point
from mgrpo_jax.slices.runtime import SliceRuntime, open_runtime
from mgrpo_jax.slices.sub_queue import QueuedCall, SubCallQueue
from mgrpo_jax.store.schema import MainOutcomes, ack_key, outcomes_key
from mgrpo_jax.tools.web import web_scalars
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.batching import TrainBatch
from mgrpo_jax.training.judge_setup import judge_scalars


def _acked_steps(store, run_id: str, num_steps: int) -> int:
  """Steps 0.. with an ack_sub in the store (frozen_sub's progress)."""
  done = 0
  while done < num_steps and store.exists(ack_key(run_id, done, "sub")):
    done += 1
  return done


def score_sub_records(indexed, query_ids, correct, questions_by_id, judge):
  """Records with r_expert (0 without a report; the judge asked once for all of them,
  `agents.scoring.score_sub`) and correct_M of their rollout ([Q, K] `correct`) filled in."""
  keys = list(indexed)
  correct_of = {(query_ids[q], k): float(correct[q, k]) for q, k, _ in keys}
  scored = score_sub([indexed[key] for key in keys], questions_by_id, correct_of, judge)
  return dict(zip(keys, scored, strict=True))


def run_sub_slice(config, mode: Mode, workdir: str) -> None:
  """Runs the sub slice to `experiment.num_steps` (module docstring) in `mode`, the
  config's `experiment.mode`."""
  if not mode.decoupled:
    log(f"sub slice: mode={mode.name} has no separate sub-agent slice; nothing to do")
    return
  rt = open_runtime(config, mode, workdir, "sub")
  settings, trains = rt.settings, mode.sub_trained
  scoring = step_math.Scoring.of(rt.questions, rt.expert_judge)
  rt.apply_init_checkpoint()
  initial_params = servable_params(rt.layout, rt.trainer.state)
  start = _start(rt, rt.restore())
  versions = _published_versions(rt, start, initial_params)
  rt.resume(start, ack_version=int(rt.trainer.state.step) if trains else None)
  policy = rt.sampler_policy(version=start)  # collective with several processes
  server = _serve(rt, policy, versions, start) if rt.is_writer else None
  queue = _open_queue(rt, start) if mode.queued and rt.is_writer else None
  rt.step_log.start()
  try:
    for step in range(start, settings.num_steps):
      timer = Timer()
      with timer("wait_outcomes"):
        rt.store.wait_for([outcomes_key(settings.run_id, step)],
                          timeout=settings.wait_timeout_s)
      sub_step, ignored = (_prepare(rt, scoring, step, timer, queue) if rt.is_writer
                           else (None, 0))
      scalars = ({**step_math.sub_step_scalars(sub_step), "sub/ignored_calls": float(ignored),
                  **judge_scalars(expert=rt.expert_judge)} if rt.is_writer else {})
      if queue is not None:
        scalars.update(queue.scalars)
      if rt.is_writer:  # the service's web tools' counts ({} offline)
        scalars.update(web_scalars(rt.registry))
      metrics = _train(rt, sub_step, timer) if trains else None
      if metrics is not None:
        scalars.update({f"sub/update/{k}": v for k, v in metrics.items()})
      throughput = {} if metrics is None or not rt.is_writer else {
          "update": metrics["num_tokens"] / max(timer.seconds["update"], 1e-9)}
      rt.step_log.record_before_commit(step, scalars, timer, throughput)
      if trains:
        rt.checkpoint(timer, {"steps_done": step + 1})
      crash_point("sub", "checkpoint", step)
      rt.ack(step, int(rt.trainer.state.step), timer)
      versions.publish(step + 1, servable_params(rt.layout, rt.trainer.state) if trains
                       else initial_params)
      if not rt.is_writer:
        continue
      rt.retire_cache(step)
      if queue is not None:
        queue.files.retire(step)
      rt.step_log.report(step, scalars, timer, throughput, {
          "sub/reward": scalars["sub/reward_mean"], "calls": scalars["sub/calls"],
          **({"loss": metrics["loss"]} if metrics is not None else {})})
  finally:
    if server is not None:
      server.stop()
    rt.close()
  distributed.barrier("sub slice: done")
  log("sub slice: done")


def _start(rt: SliceRuntime, metadata: dict | None) -> int:
  """The first step to run: S's `steps_done`, or (frozen_sub) the steps acknowledged,
  with a checkpoint of the initial weights on a fresh start."""
  if rt.mode.sub_trained:
    return 0 if metadata is None else int(metadata["steps_done"])
  start = int(distributed.broadcast_bytes(  # process 0's reading for all processes
      str(_acked_steps(rt.store, rt.settings.run_id, rt.settings.num_steps)).encode()))
  if metadata is None:
    rt.checkpointer.save(rt.trainer.state, force=True, metadata={"steps_done": 0})
    rt.checkpointer.wait_until_finished()
  return start


def _published_versions(rt: SliceRuntime, start: int, initial_params) -> WeightVersions:
  """S's weight versions max(0, start - staleness)..start, older ones from checkpoints."""
  staleness, trains = rt.settings.staleness, rt.mode.sub_trained
  versions = WeightVersions(keep=staleness + 1)
  for version in range(max(0, start - staleness), start + 1):
    if not trains or version == 0:
      params = initial_params
    elif version == start:
      params = servable_params(rt.layout, rt.trainer.state)
    else:
      params = servable_params(rt.layout, rt.checkpointer.restore(version)[0])
    versions.publish(version, params)
  return versions


def _serve(rt: SliceRuntime, policy, versions: WeightVersions, start: int):
  """Process 0: starts the sub-agent service of `policy` and publishes its address;
  returns the server."""
  config, settings = rt.config, rt.settings
  rollout_config = agent_setup.rollout_config(config)
  gate = RequestGate(
      settings.num_steps, settings.staleness, frozenset(q.id for q in rt.questions),
      settings.num_rollouts, rollout_config.max_sub_calls,
      max_tasks=settings.num_queries * settings.num_rollouts,
      max_batches=rollout_config.main.max_turns, max_chars=rollout_config.max_argument_chars)
  client = InProcessSubAgentClient(agent_setup.rollout_policy(policy, rt.tokenizer, "sub"),
                                   rt.tokenizer, rt.registry, rollout_config,
                                   spec=agent_setup.agent_specs(config, rt.mode)[1])
  service = SubAgentService(policy, rt.layout.graphdef, client, versions, rt.cache, gate,
                            after_persist=lambda step: crash_point("sub", "served", step))
  serving = config.serving
  server = service.server(host=str(serving.host), port=int(serving.port),
                          token=service_token(str(serving.token_env)),
                          limits=ServerLimits.from_config(serving),
                          tls=server_tls(serving)).start()
  rt.files.write(rt.paths.service_address_name(), encode_address(server.address))
  host, port = server.address
  log(f"sub slice: mode={rt.mode.name} serving S on {host}:{port}, "
      f"{describe_steps(start, settings.num_steps)}")
  return server


@dataclasses.dataclass
class _Queue:
  """The unsynchronized arm's FIFO (`sub_queue.py`): its calls at the start of the
  current step, its files, and the last step's queue metrics."""

  calls: list[QueuedCall]
  files: SubCallQueue
  scalars: dict[str, float] = dataclasses.field(default_factory=dict)


def _open_queue(rt: SliceRuntime, start: int) -> _Queue:
  """Process 0: the queue at the start of step `start`, from its file."""
  files = SubCallQueue(rt.files.child(rt.paths.queue_name()),
                       checkpoints_kept=int(rt.config.checkpoint.keep))
  return _Queue(files.load(start), files)


def _queued_step(rt: SliceRuntime, queue: _Queue, step: int,
                 arrived: list[tuple[tuple[int, int, int], SubRecord]]) -> step_math.SubStep:
  """Process 0: the unsynchronized arm's step t: S's batch from the front of the queue,
  then step t's scored calls (`arrived`, in arrival order) join it, and the queue at the
  start of t + 1 is written before the step's checkpoint."""
  settings, mgrpo = rt.settings, rt.config.mgrpo
  count = int(mgrpo.queue_calls) or settings.num_queries * settings.num_rollouts
  group = int(mgrpo.queue_group) or settings.num_rollouts
  taken, rest = sub_queue.take(queue.calls, count)
  queue.calls = rest + [QueuedCall(step, record) for _, record in arrived]
  queue.files.save(step + 1, queue.calls)
  queue.scalars = sub_queue.queue_scalars(taken, queue.calls, step)
  return step_math.queued_sub_step(
      [c.record for c in taken], [record for _, record in arrived],
      num_rows=group * -(-count // group), group_size=group, credit=settings.credit,
      packing=rt.sub_packing)


def _prepare(rt: SliceRuntime, scoring: step_math.Scoring, step: int, timer: Timer,
             queue: _Queue | None) -> tuple[step_math.SubStep, int]:
  """Process 0: step t's S records that M received, scored, aligned and packed, and the
  number of other records in the step's cache (module docstring)."""
  settings = rt.settings
  key = outcomes_key(settings.run_id, step)
  with timer("store"):
    outcomes = MainOutcomes.from_bytes(key, rt.store.get(key))
  arrays = outcomes.to_arrays()
  query_ids = [q.query_id for q in outcomes.queries]
  with timer("load"):
    arrived = rt.cache.load(step)
  crash_point("sub", "loaded", step)
  arrived, ignored = step_math.received_calls(arrived, query_ids,
                                              outcomes.sub_call_digests())
  if ignored:
    log(f"sub slice: step {step}: {ignored} stored S record(s) that M did not receive are "
        "not trained on")
  with timer("scoring"):
    indexed = step_math.index_sub_records([r for _, r in arrived], query_ids,
                                          arrays["num_sub_calls"])
    scored = score_sub_records(indexed, query_ids, arrays["correct"], scoring.questions,
                               scoring.judge)
  if not rt.mode.aligned:
    position = {qid: q for q, qid in enumerate(query_ids)}
    keys = [(position[r.query_id], r.rollout_index, r.call_index) for _, r in arrived]
    if queue is not None:
      return _queued_step(rt, queue, step, [(k, scored[k]) for k in keys]), ignored
    return step_math.arrival_sub_step(
        [(k, scored[k]) for k in keys], arrays["correct"], num_queries=len(query_ids),
        group_size=settings.num_rollouts * settings.num_slots, credit=settings.credit,
        packing=rt.sub_packing), ignored
  return step_math.aligned_sub_step(
      scored, arrays["main_reward"], arrays["correct"], arrays["num_sub_calls"],
      alignment=step_math.SlotAlignment.of_step(rt.config, step), credit=settings.credit,
      packing=rt.sub_packing), ignored


def _train(rt: SliceRuntime, sub_step: step_math.SubStep | None, timer: Timer
           ) -> dict[str, float]:
  """S's update on the step's batch (process 0's, broadcast)."""
  batch = sub_step.batch if rt.is_writer else None
  if multi_host():
    with timer("broadcast"):
      batch = _broadcast_batch(batch)
  return rt.update(batch, timer)


def _broadcast_batch(batch: TrainBatch | None) -> TrainBatch:
  """Process 0's [N, T] batch on every process (others pass None)."""
  names = [f.name for f in dataclasses.fields(TrainBatch)]
  arrays = distributed.broadcast_arrays(
      None if batch is None else {name: getattr(batch, name) for name in names})
  return TrainBatch(**{name: np.asarray(arrays[name]) for name in names})
