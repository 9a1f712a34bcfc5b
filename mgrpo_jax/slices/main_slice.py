"""The main slice: M's rollouts, outcomes, M's update (docs/ALGORITHM.md, "The step protocol").

Step t (B queries, K rollouts each):
  1. (decoupled modes) wait for ack_sub(t - 1 - staleness): the sub-agent service then
     holds S weights of version max(0, t - staleness) (its completed steps), and the
     step's delegations ask for exactly that version.
  2. B queries from the checkpointed `QueryStream`.
  3. The step cache `main/cache/step_<t>.json` if present (a restart), else the
     controller's K rollouts per query (key from (seed, t)); scored (answer judge) and
     written to the cache BEFORE anything else leaves the process.
  4. R_M (`plugins.main_reward_fn`), outcomes(t) into the store (a re-put after a
     restart is byte-identical: a no-op).
  5. A_M over each query's K rollouts, rows padded to T = `limits.max_context` (one
     compiled update for the whole run), one update of M (in shared_policy, M's rows and
     the aligned S rows of the step in ONE batch of the one policy), checkpoint M
     (params, optimizer, step, PRNG, data iterator, policy version), ack_main(t),
     delete the step cache; metrics and a progress line.

Modes: mgrpo / frozen_sub / no_alignment use the remote sub-agent service;
shared_policy runs both roles here with the in-process client (no sub slice);
single_agent has no sub-agent.

Multi-host (several JAX processes, `distributed.py`): every process reads the same B
queries and runs the controller for its own whole query groups
(`distributed.rollout_queries`: the groups whose K rows its devices hold, with a key
folded with its process index), sampling with a copy of M on its own devices. The
scored records of all processes are then exchanged (`allgather_bytes`), so every
process computes the same rewards, advantages and [N, T] batch as one process would,
and feeds only its rows of it to the update (`scale.multihost.device_batch`). Process 0
alone writes the step cache, the store records, metrics and log lines; a restart's
cache is read by process 0 and broadcast. Checkpoint saves and restores are collective.
"""

from __future__ import annotations

import dataclasses
import json
import time

import jax
import numpy as np

from mgrpo_jax.agents.controller import RolloutController
from mgrpo_jax.agents.modes import Agent, make_controller
from mgrpo_jax.agents.scoring import score
from mgrpo_jax.config.modes import parse_mode
from mgrpo_jax.metrics import format_progress
from mgrpo_jax.scale import distributed
from mgrpo_jax.scale.multihost import device_batch, multi_host, rollout_model
from mgrpo_jax.scale.writers import log, metrics_writer
from mgrpo_jax.serving.address import read_address, service_token
from mgrpo_jax.serving.remote_client import RemoteSubAgentClient
from mgrpo_jax.slices import step_math
from mgrpo_jax.slices.common import (
  Timer,
  check_config,
  describe_steps,
  metrics_due,
  open_run_store,
)
from mgrpo_jax.slices.faults import crash_point
from mgrpo_jax.slices.step_cache import MainStepCache, records_from_json, records_to_json
from mgrpo_jax.store.errors import StoreTimeoutError
from mgrpo_jax.store.schema import MainOutcomes, SliceAck, ack_key
from mgrpo_jax.tasks.judges import ExactMatchJudge
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.batching import pack_sequences
from mgrpo_jax.training.checkpoint import AgentCheckpointer, CheckpointConfig
from mgrpo_jax.training.data import QueryStream, ensure_world, load_questions, world_rendering
from mgrpo_jax.training.files import dump_json
from mgrpo_jax.training.optimizer import learning_rate_schedule
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.update import batch_shardings, make_update_fn


class _CrashAfterBatch:
  """Forwards to the remote client; crash point `main:rollout:<t>` after each batch."""

  def __init__(self, inner: RemoteSubAgentClient):
    self.inner = inner
    self.step = 0

  def run(self, requests, seed):
    results = self.inner.run(requests, seed)
    crash_point("main", "rollout", self.step)
    return results


def remote_client(config, paths: RunPaths) -> RemoteSubAgentClient:
  """The client of the sub slice's service (fixed host:port, or the published file)."""
  serving = config.serving
  if int(serving.port):
    fixed = (str(serving.host), int(serving.port))
    resolve, describe = (lambda: fixed), f"serving.host:port = {fixed[0]}:{fixed[1]}"
  else:
    path = paths.service_address()
    resolve, describe = (lambda: read_address(path)), str(path)
  return RemoteSubAgentClient(resolve, describe=describe,
                              token=service_token(str(serving.token_env)),
                              deadline_s=float(serving.deadline_s),
                              call_timeout_s=float(serving.call_timeout_s),
                              ready_timeout_s=float(config.store.wait_timeout_s))


def wait_for_sub_ack(store, key: str, client: RemoteSubAgentClient, timeout: float) -> None:
  """Waits for S's ack `key`, failing fast (client deadline) if the service is down."""
  deadline = time.monotonic() + timeout
  while not store.exists(key):
    if time.monotonic() > deadline:
      raise StoreTimeoutError([key], timeout, "the store (the sub slice's acknowledgement)")
    client.status()  # raises ServiceUnavailableError once unreachable past its deadline
    time.sleep(0.1)


@dataclasses.dataclass
class _Rollouts:
  query_ids: list[str]
  main: list
  sub: list
  stats: dict[str, float]


def _sampled_tokens(records) -> int:
  return int(sum(r.trajectory.num_sampled for r in records))


def run_main_slice(config, workdir: str) -> None:
  """Runs the main slice to `experiment.num_steps` (module docstring)."""
  check_config(config)
  paths = RunPaths.from_config(config, workdir)
  mode = parse_mode(str(config.experiment.mode))
  seed, run_id = int(config.experiment.seed), str(config.experiment.run_id)
  num_steps = int(config.experiment.num_steps)
  num_queries = int(config.mgrpo.queries_per_step)
  num_rollouts = int(config.mgrpo.rollouts_per_query)
  staleness = int(config.mgrpo.staleness)
  weights = step_math.RewardWeights.from_config(config.rewards)
  advantage = step_math.AdvantageConfig(std=str(config.mgrpo.advantage_std),
                                        eps=float(config.mgrpo.advantage_eps))
  store = open_run_store(paths)
  world_path = ensure_world(paths.local, config.world)
  questions = load_questions(world_path, config.world, str(config.world.stage))
  registry = agent_setup.tool_registry(world_path, config)
  main_spec, sub_spec = agent_setup.agent_specs(config)
  model, tokenizer = agent_setup.build_model(config.main, "main", paths.local, config)
  trainer = agent_setup.create_agent_state(model, config.main, "main", config)
  layout = trainer.layout
  checkpointer = AgentCheckpointer(paths.checkpoints("main"), layout,
                                   CheckpointConfig.from_config(config.checkpoint))
  stream = QueryStream(questions, seed=agent_setup.derive_seed(seed, "data"),
                       batch_size=num_queries)
  restored = checkpointer.restore()
  start = 0
  if restored is not None:
    trainer.state, metadata = restored
    stream.set_state(metadata["data_iterator"])
    start = int(metadata["steps_done"])
  elif config.main.model.init_checkpoint:
    agent_setup.restore_init_params(trainer, str(config.main.model.init_checkpoint))
  cache = MainStepCache(paths.cache("main"))
  writer_process = distributed.is_writer()
  if start > 0 and writer_process:  # a crash between the checkpoint and the previous ack
    ack = SliceAck(run_id, start - 1, "main", start)
    store.put(ack.key, ack.to_bytes())
  if writer_process:
    cache.delete_before(start)

  policy = agent_setup.sampler_policy(rollout_model(layout, trainer.state), tokenizer,
                                      config.main, version=start)
  rollout_config = agent_setup.rollout_config(config)
  acting = agent_setup.rollout_policy(policy, tokenizer, "main")
  client = None
  expert_judge = None
  if mode.decoupled:
    client = _CrashAfterBatch(remote_client(config, paths))
    controller = RolloutController(acting, tokenizer, registry, rollout_config,
                                   sub_client=client, spec=main_spec)
  else:
    controller = make_controller(mode, Agent(acting, tokenizer), registry, rollout_config,
                                 main_spec=main_spec, sub_spec=sub_spec)
    if mode.shared:
      rendering = world_rendering(config)
      train_world, _ = rendering.split_worlds(
          config.world.size, int(config.world.seed), int(config.world.test_seed))
      expert_judge = rendering.expert_judge(train_world)
  answer_judge = ExactMatchJudge()
  schedule = learning_rate_schedule(trainer.optim)
  updates = {}
  share = (distributed.rollout_queries(
      batch_shardings(layout, num_queries * num_rollouts).advantages, num_queries,
      num_rollouts) if multi_host() else slice(None))
  writer = metrics_writer(paths, "main", config)
  log(f"main slice: mode={mode.name} {describe_steps(start, num_steps)} B={num_queries} "
      f"K={num_rollouts} store={paths.store_uri}")

  for step in range(start, num_steps):
    timer = Timer()
    if client is not None:
      client.step = step
      waited = step - 1 - staleness
      with timer("wait_sub"):
        if waited >= 0:
          wait_for_sub_ack(store, ack_key(run_id, waited, "sub"), client.inner,
                           float(config.store.wait_timeout_s))
      client.inner.begin_step(step, max(0, step - staleness))
    queries = stream.next_batch()
    rollouts = _rollouts(step, queries, cache, controller, num_rollouts, seed, answer_judge,
                         expert_judge, timer, share)
    grid = step_math.main_grid(rollouts.main, rollouts.query_ids, num_rollouts)
    r_main = step_math.main_rewards(grid["format_ok"], grid["correct"], weights)
    a_main = step_math.main_advantages(r_main, advantage)
    outcomes = MainOutcomes.from_arrays(
        run_id, step, rollouts.query_ids, correct=grid["correct"] > 0.5, main_reward=r_main,
        num_sub_calls=grid["num_sub_calls"], policy_version=step)
    if writer_process:
      with timer("store"):
        store.put(outcomes.key, outcomes.to_bytes())
    crash_point("main", "outcomes", step)

    batch = pack_sequences([step_math.token_sequence(r.trajectory) for r in rollouts.main],
                           a_main.reshape(-1), pad_id=tokenizer.pad_id or 0,
                           buckets=(int(config.main.limits.max_context),))
    scalars = {}
    if mode.shared:
      sub_step = _shared_sub_step(rollouts, grid, r_main, config, step, weights, advantage,
                                  tokenizer)
      scalars.update(step_math.sub_step_scalars(sub_step))
      scalars["shared/main_tokens"] = float(batch.loss_mask.sum())
      scalars["shared/sub_tokens"] = float(sub_step.batch.loss_mask.sum())
      batch = step_math.concat_batches(batch, sub_step.batch, tokenizer.pad_id or 0)
    rows = batch.ids.shape[0]
    if rows not in updates:
      updates[rows] = make_update_fn(layout, trainer.update_config, rows,
                                     learning_rate=schedule)
    with timer("update"):
      trainer.state, metrics = updates[rows](trainer.state, device_batch(layout, batch))
      metrics = {k: float(v) for k, v in metrics.items()}
    policy.sampler.model = rollout_model(layout, trainer.state)
    policy.version = step + 1
    with timer("checkpoint"):
      checkpointer.save(trainer.state, force=True, metadata={
          "steps_done": step + 1, "data_iterator": stream.get_state(),
          "policy_version": step + 1})
      checkpointer.wait_until_finished()
    crash_point("main", "checkpoint", step)
    if writer_process:
      with timer("store"):
        ack = SliceAck(run_id, step, "main", step + 1)
        store.put(ack.key, ack.to_bytes())
      cache.delete(step)

    scalars.update({
        "main/reward_mean": float(r_main.mean()), "main/correct_mean":
        float(grid["correct"].mean()), "main/format_ok_mean": float(grid["format_ok"].mean()),
        "main/advantage_abs_mean": float(np.abs(a_main).mean()),
        "main/sub_calls_mean": float(grid["num_sub_calls"].mean()),
        "main/sub_calls_max": float(grid["num_sub_calls"].max())})
    scalars.update({f"main/update/{k}": v for k, v in metrics.items()})
    scalars.update(rollouts.stats)
    throughput = {"main": rollouts.stats["main/sampled_tokens"] / max(
        timer.seconds.get("rollout", 0.0) - timer.seconds.get("sub_calls", 0.0), 1e-9),
                  "update": metrics["num_tokens"] / max(timer.seconds["update"], 1e-9)}
    if rollouts.stats.get("sub/sampled_tokens"):
      throughput["sub"] = rollouts.stats["sub/sampled_tokens"] / max(
          timer.seconds.get("sub_calls", 0.0), 1e-9)
    for phase, seconds in timer.seconds.items():
      scalars[f"time/{phase}_s"] = seconds
    scalars.update({f"throughput/{k}_tokens_per_s": v for k, v in throughput.items()})
    if metrics_due(config, step):
      writer.write(step, scalars)
    log(format_progress(step + 1, num_steps, {
        "main/reward": scalars["main/reward_mean"], "loss": metrics["loss"],
        "sub_calls": scalars["main/sub_calls_mean"]}, timer.seconds, throughput))
  writer.close()
  checkpointer.close()
  if client is not None:
    client.inner.close()
  distributed.barrier("main slice: done")  # no process leaves before process 0's writes
  log("main slice: done")


def _rollouts(step, queries, cache, controller, num_rollouts, seed, answer_judge,
              expert_judge, timer, share: slice) -> _Rollouts:
  """Step t's scored rollouts: from the write-ahead cache, else sampled and cached.

  `share`: the queries this process samples (all of them with one process); the records
  of all processes are gathered on every process before the cache is written.
  """
  query_ids = [q.id for q in queries]
  cached = _load_cache(cache, step)
  stats = {}
  if cached is not None:
    cached_ids, main, sub = cached
    if cached_ids != query_ids:
      raise ValueError(f"{cache.path(step)} holds queries {cached_ids}, but step {step} "
                       f"reads {query_ids}: the data or the seed changed since the crash")
    stats["main/from_cache"] = 1.0
  else:
    mine = queries[share]
    key = agent_setup.step_key(seed, "rollout", step)
    if multi_host():  # independent sampling streams per process
      key = jax.random.fold_in(key, jax.process_index())
    with timer("rollout"):
      out = controller.run(mine, num_rollouts, key)
    timer.seconds["sub_calls"] = out.stats.sub_s
    with timer("scoring"):
      main, sub = score(out.main, out.sub if expert_judge is not None else [], mine,
                        answer_judge, expert_judge)
    sub_tokens = _sampled_tokens(out.sub)
    if multi_host():
      with timer("exchange"):
        main, sub, sub_tokens = _gather_rollouts(step, [q.id for q in mine], main, sub,
                                                 sub_tokens)
    if distributed.is_writer():
      with timer("store"):
        cache.write(step, query_ids, main, sub)
    crash_point("main", "cached", step)
    stats["main/from_cache"] = 0.0
    stats["sub/sampled_tokens"] = float(sub_tokens)
  stats["main/sampled_tokens"] = float(_sampled_tokens(main))
  return _Rollouts(query_ids, main, sub, stats)


def _load_cache(cache, step):
  """The step's cached records; with several processes, process 0's cache, broadcast."""
  if not multi_host():
    return cache.load(step)
  path = cache.path(step)
  payload = path.read_bytes() if distributed.is_writer() and path.exists() else None
  data = distributed.broadcast_bytes(payload)
  return records_from_json(json.loads(data), step, str(path)) if data else None


def _gather_rollouts(step, query_ids, main, sub, sub_tokens):
  """(M records, S records, S sampled tokens) of all processes, in process order.

  Processes hold contiguous blocks of queries in process order, so the concatenation is
  in the step's (query, rollout[, call]) order, as one process's controller returns it.
  """
  payload = dump_json({**records_to_json(step, query_ids, main, sub),
                       "sub_sampled_tokens": int(sub_tokens)})
  all_main, all_sub, all_tokens = [], [], 0
  for part in distributed.allgather_bytes(payload):
    data = json.loads(part)
    _, part_main, part_sub = records_from_json(data, step, "the multi-host record exchange")
    all_main += part_main
    all_sub += part_sub
    all_tokens += int(data["sub_sampled_tokens"])
  return all_main, all_sub, all_tokens


def _shared_sub_step(rollouts, grid, r_main, config, step, weights, advantage, tokenizer):
  """shared_policy: the step's S calls aligned to D slots, for the one policy's batch."""
  indexed = step_math.index_sub_records(rollouts.sub, rollouts.query_ids,
                                        grid["num_sub_calls"])
  return step_math.aligned_sub_step(
      indexed, r_main, grid["correct"], grid["num_sub_calls"],
      num_slots=int(config.mgrpo.aligned_sub_calls),
      key=agent_setup.step_key(int(config.experiment.seed), "align", step),
      mode=str(config.mgrpo.alignment), weights=weights, advantage=advantage,
      pad_id=tokenizer.pad_id or 0, buckets=(int(config.main.limits.max_context),))
