"""The sub slice: the sub-agent service and S's trainer (docs/ALGORITHM.md, "The step protocol").

On start: restore S's latest checkpoint (its metadata `steps_done` = v, S's weight
version), publish versions max(0, v - staleness)..v to the service (older ones from
their checkpoints), start the service and publish its address.

Step t:
  1. wait for outcomes(t) in the store (correct_M, R_M, d_k per rollout);
  2. load the step's S records from the service's cache; every rollout (q, k) must have
     exactly its d_k calls (a missing one is an error naming (q, k, i));
  3. r_expert (the rendering's expert judge, question looked up by id), R_S
     (`plugins.sub_reward_fn`, correct_M from the outcomes);
  4. alignment to D slots (key from (seed, t)) and per-query advantages, or the
     arrival-order grouping of no_alignment (`step_math`);
  5. update S (not in frozen_sub), checkpoint S (params, optimizer, step, PRNG,
     steps_done), put ack_sub(t) with S's weight version (updates done), THEN publish
     version t + 1 to the service, delete the step's cache.

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

from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.metrics import format_progress
from mgrpo_jax.scale import distributed
from mgrpo_jax.scale.multihost import device_batch, multi_host, rollout_model, servable_params
from mgrpo_jax.scale.writers import log, metrics_writer
from mgrpo_jax.serving.address import encode_address, service_token
from mgrpo_jax.serving.sub_service import RequestGate, SubAgentService, WeightVersions
from mgrpo_jax.slices import step_math
from mgrpo_jax.slices.common import (
  Timer,
  check_config,
  describe_steps,
  metrics_due,
  open_run_store,
)
from mgrpo_jax.slices.faults import crash_point
from mgrpo_jax.slices.step_cache import SubStepCache
from mgrpo_jax.store.schema import MainOutcomes, SliceAck, ack_key, outcomes_key
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.batching import TrainBatch
from mgrpo_jax.training.checkpoint import AgentCheckpointer, CheckpointConfig
from mgrpo_jax.training.data import ensure_world, load_questions, world_rendering
from mgrpo_jax.training.files import atomic_write
from mgrpo_jax.training.optimizer import learning_rate_schedule
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.update import make_update_fn


def _acked_steps(store, run_id: str, num_steps: int) -> int:
  """Steps 0.. with an ack_sub in the store (frozen_sub's progress)."""
  done = 0
  while done < num_steps and store.exists(ack_key(run_id, done, "sub")):
    done += 1
  return done


def score_sub_records(indexed, query_ids, correct, questions_by_id, judge):
  """Records with r_expert (0 without a report) and correct_M of their rollout filled in."""
  out = {}
  for (q, k, i), record in indexed.items():
    report = record.trajectory.final
    expert = (float(judge(questions_by_id[query_ids[q]], record.subtask, report))
              if report is not None else 0.0)
    out[(q, k, i)] = dataclasses.replace(record, expert=expert,
                                         main_correct=float(correct[q, k]))
  return out


def run_sub_slice(config, workdir: str) -> None:
  """Runs the sub slice to `experiment.num_steps` (module docstring)."""
  mode = parse_mode(str(config.experiment.mode))
  if not mode.decoupled:
    log(f"sub slice: mode={mode.name} has no separate sub-agent slice; nothing to do")
    return
  check_config(config)
  paths = RunPaths.from_config(config, workdir)
  seed, run_id = int(config.experiment.seed), str(config.experiment.run_id)
  num_steps = int(config.experiment.num_steps)
  num_rollouts = int(config.mgrpo.rollouts_per_query)
  num_slots = int(config.mgrpo.aligned_sub_calls)
  staleness = int(config.mgrpo.staleness)
  trains = mode.sub_trained
  weights = step_math.RewardWeights.from_config(config.rewards)
  advantage = step_math.AdvantageConfig(std=str(config.mgrpo.advantage_std),
                                        eps=float(config.mgrpo.advantage_eps))
  store = open_run_store(paths)
  world_path = ensure_world(paths.local, config.world)
  questions = {q.id: q for q in load_questions(world_path, config.world,
                                               str(config.world.stage))}
  rendering = world_rendering(config)
  train_world, _ = rendering.split_worlds(config.world.size, int(config.world.seed),
                                          int(config.world.test_seed))
  judge = rendering.expert_judge(train_world)
  registry = agent_setup.tool_registry(world_path, config)
  model, tokenizer = agent_setup.build_model(config.sub, "sub", paths.local, config)
  trainer = agent_setup.create_agent_state(model, config.sub, "sub", config)
  layout = trainer.layout
  if config.sub.model.init_checkpoint:
    agent_setup.restore_init_params(trainer, str(config.sub.model.init_checkpoint))
  initial_params = servable_params(layout, trainer.state)
  checkpointer = AgentCheckpointer(paths.checkpoints("sub"), layout,
                                   CheckpointConfig.from_config(config.checkpoint))
  restored = checkpointer.restore()
  if restored is not None:
    trainer.state, metadata = restored
  if trains:
    start = 0 if restored is None else int(metadata["steps_done"])
  else:
    start = int(distributed.broadcast_bytes(  # process 0's reading for all processes
        str(_acked_steps(store, run_id, num_steps)).encode()))
    if restored is None:
      checkpointer.save(trainer.state, force=True, metadata={"steps_done": 0})
      checkpointer.wait_until_finished()

  versions = WeightVersions(keep=staleness + 1)
  for version in range(max(0, start - staleness), start + 1):
    if not trains or version == 0:
      params = initial_params
    elif version == start:
      params = servable_params(layout, trainer.state)
    else:
      params = servable_params(layout, checkpointer.restore(version)[0])
    versions.publish(version, params)
  cache = SubStepCache(paths.cache("sub"))
  writer_process = distributed.is_writer()
  if start > 0 and trains and writer_process:  # a crash between checkpoint and ack(start-1)
    ack = SliceAck(run_id, start - 1, "sub", int(trainer.state.step))
    store.put(ack.key, ack.to_bytes())
  if writer_process:
    cache.delete_before(start)

  policy = agent_setup.sampler_policy(rollout_model(layout, trainer.state), tokenizer,
                                      config.sub, version=start)
  server = None
  if writer_process:
    service = SubAgentService(
        policy, layout.graphdef, tokenizer, registry, agent_setup.rollout_config(config),
        versions, cache.put, after_persist=lambda step: crash_point("sub", "served", step),
        spec=agent_setup.agent_specs(config)[1],
        rollout_policy=agent_setup.rollout_policy(policy, tokenizer, "sub"),
        gate=RequestGate(num_steps, staleness, frozenset(questions), num_rollouts,
                         int(config.mgrpo.max_sub_calls)))
    server = service.server(host=str(config.serving.host), port=int(config.serving.port),
                            token=service_token(str(config.serving.token_env))).start()
    atomic_write(paths.service_address(), encode_address(server.address))
    host, port = server.address
    log(f"sub slice: mode={mode.name} serving S on {host}:{port}, "
        f"{describe_steps(start, num_steps)}")

  buckets = (int(config.sub.limits.max_context),)  # one T: one compiled update per run
  schedule = learning_rate_schedule(trainer.optim)
  update = make_update_fn(layout, trainer.update_config,
                          int(config.mgrpo.queries_per_step) * num_rollouts * num_slots,
                          learning_rate=schedule) if trains else None
  writer = metrics_writer(paths, "sub", config)

  def prepare(step: int, timer: Timer) -> step_math.SubStep:
    """Process 0: step t's S records scored, aligned and packed (module docstring)."""
    key = outcomes_key(run_id, step)
    with timer("store"):
      outcomes = MainOutcomes.from_bytes(key, store.get(key))
    arrays = outcomes.to_arrays()
    query_ids = [q.query_id for q in outcomes.queries]
    with timer("load"):
      arrived = cache.load(step)
    crash_point("sub", "loaded", step)
    with timer("scoring"):
      indexed = step_math.index_sub_records([r for _, r in arrived], query_ids,
                                            arrays["num_sub_calls"])
      scored = score_sub_records(indexed, query_ids, arrays["correct"], questions, judge)
    position = {qid: q for q, qid in enumerate(query_ids)}
    if not mode.aligned:
      keys = [(position[r.query_id], r.rollout_index, r.call_index) for _, r in arrived]
      ordered = [(k, scored[k]) for k in keys]
      return step_math.arrival_sub_step(
          ordered, arrays["correct"], num_queries=len(query_ids),
          group_size=num_rollouts * num_slots, weights=weights, advantage=advantage,
          pad_id=tokenizer.pad_id or 0, buckets=buckets)
    return step_math.aligned_sub_step(
        scored, arrays["main_reward"], arrays["correct"], arrays["num_sub_calls"],
        num_slots=num_slots, key=agent_setup.step_key(seed, "align", step),
        mode=str(config.mgrpo.alignment), weights=weights, advantage=advantage,
        pad_id=tokenizer.pad_id or 0, buckets=buckets)

  try:
    for step in range(start, num_steps):
      timer = Timer()
      with timer("wait_outcomes"):
        store.wait_for([outcomes_key(run_id, step)],
                       timeout=float(config.store.wait_timeout_s))
      sub_step = prepare(step, timer) if writer_process else None
      scalars = step_math.sub_step_scalars(sub_step) if writer_process else {}
      if update is not None:
        batch = sub_step.batch if writer_process else None
        if multi_host():
          with timer("broadcast"):
            batch = _broadcast_batch(batch)
        with timer("update"):
          trainer.state, metrics = update(trainer.state, device_batch(layout, batch))
          metrics = {k: float(v) for k, v in metrics.items()}
        scalars.update({f"sub/update/{k}": v for k, v in metrics.items()})
        with timer("checkpoint"):
          checkpointer.save(trainer.state, force=True, metadata={"steps_done": step + 1})
          checkpointer.wait_until_finished()
      crash_point("sub", "checkpoint", step)
      if writer_process:
        with timer("store"):
          ack = SliceAck(run_id, step, "sub", int(trainer.state.step))
          store.put(ack.key, ack.to_bytes())
      versions.publish(step + 1, servable_params(layout, trainer.state) if trains
                       else initial_params)
      if not writer_process:
        continue
      cache.delete(step)
      for phase, seconds in timer.seconds.items():
        scalars[f"time/{phase}_s"] = seconds
      throughput = {}
      if update is not None:
        throughput["update"] = metrics["num_tokens"] / max(timer.seconds["update"], 1e-9)
        scalars["throughput/update_tokens_per_s"] = throughput["update"]
      if metrics_due(config, step):
        writer.write(step, scalars)
      log(format_progress(step + 1, num_steps, {
          "sub/reward": scalars["sub/reward_mean"], "calls": scalars["sub/calls"],
          **({"loss": metrics["loss"]} if update is not None else {})},
          timer.seconds, throughput))
  finally:
    if server is not None:
      server.stop()
    writer.close()
    checkpointer.close()
  distributed.barrier("sub slice: done")
  log("sub slice: done")


def _broadcast_batch(batch: TrainBatch | None) -> TrainBatch:
  """Process 0's [N, T] batch on every process (others pass None)."""
  names = [f.name for f in dataclasses.fields(TrainBatch)]
  arrays = distributed.broadcast_arrays(
      None if batch is None else {name: getattr(batch, name) for name in names})
  return TrainBatch(**{name: np.asarray(arrays[name]) for name in names})
