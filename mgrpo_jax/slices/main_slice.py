"""The main slice: M's rollouts, outcomes, M's update (docs/ALGORITHM.md, "The step protocol").

Step t (B queries, K rollouts each):
  1. (decoupled modes) wait for ack_sub(t - 1 - staleness): the sub-agent service then
     holds S weights of version max(0, t - staleness) (its completed steps), and the
     step's delegations ask for exactly that version.
  2. B queries from the checkpointed `QueryStream`.
  3. The step cache `<workdir>/main/cache/step_<t>.json` if present (a restart), else the
     controller's K rollouts per query (key from (seed, t)); scored (answer judge) and
     written to the cache BEFORE anything else leaves the process.
  4. R_M (`plugins.main_rewards`), outcomes(t) into the store (a re-put after a
     restart is byte-identical: a no-op).
  5. A_M over each query's K rollouts, rows padded to T = `limits.max_context` (one
     compiled update for the whole run), one update of M (in shared_policy, M's rows and
     the aligned S rows of the step in ONE batch of the one policy), the step's
     provisional metrics line (`StepLog.record_before_commit`), checkpoint M
     (params, optimizer, step, PRNG, data iterator, policy version), ack_main(t),
     retire the step cache (`step_cache.py`); metrics and a progress line.

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
from collections.abc import Callable

import jax
import numpy as np

from mgrpo_jax.agents.controller import RolloutController
from mgrpo_jax.agents.modes import Agent, make_controller
from mgrpo_jax.agents.scoring import score
from mgrpo_jax.config.modes import Mode
from mgrpo_jax.scale import distributed
from mgrpo_jax.scale.multihost import multi_host, rollout_model
from mgrpo_jax.scale.writers import log
from mgrpo_jax.serving.address import decode_address, service_token
from mgrpo_jax.serving.remote_client import RemoteSubAgentClient
from mgrpo_jax.serving.rpc import ClientSettings
from mgrpo_jax.serving.tls import client_tls
from mgrpo_jax.slices import step_math, step_pages
from mgrpo_jax.slices.common import Timer, describe_steps
from mgrpo_jax.slices.faults import crash_point
from mgrpo_jax.slices.runtime import SliceRuntime, StepSettings, open_runtime
from mgrpo_jax.slices.step_cache import records_from_json, records_to_json
from mgrpo_jax.store.errors import StoreTimeoutError
from mgrpo_jax.store.folder import Folder
from mgrpo_jax.store.schema import MainOutcomes, ack_key
from mgrpo_jax.tasks.judges import AnswerJudge
from mgrpo_jax.tools.web import web_scalars
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.batching import TrainBatch, pack_sequences
from mgrpo_jax.training.data import QueryStream
from mgrpo_jax.training.files import dump_json
from mgrpo_jax.training.judge_setup import judge_scalars
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.update import batch_shardings


class _CrashAfterBatch:
  """Forwards to the remote client; crash point `main:rollout:<t>` after each batch."""

  def __init__(self, inner: RemoteSubAgentClient):
    self.inner = inner
    self.step = 0

  def run(self, requests, seed):
    results = self.inner.run(requests, seed)
    crash_point("main", "rollout", self.step)
    return results


def remote_client(config, paths: RunPaths, files: Folder) -> RemoteSubAgentClient:
  """The client of the sub slice's service (fixed host:port, or the file the sub slice
  published in the workdir's `files`)."""
  serving = config.serving
  if int(serving.port):
    fixed = (str(serving.host), int(serving.port))
    resolve, describe = (lambda: fixed), f"serving.host:port = {fixed[0]}:{fixed[1]}"
  else:
    name = paths.service_address_name()
    describe = f"{files.uri}/{name}"

    def resolve():
      return decode_address(files.read(name), describe)

  return RemoteSubAgentClient(resolve, describe=describe,
                              token=service_token(str(serving.token_env)),
                              settings=ClientSettings.from_config(serving),
                              tls=client_tls(serving),
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
  """A step's records: M's scored, S's scored ones in shared_policy (`sub`), S's as M
  received them (`served`: the step page's, empty after a restart in decoupled modes),
  and the digest of every S call M received (`sub_calls`, {(query id, k, i): digest})."""
  query_ids: list[str]
  main: list
  sub: list
  served: list
  sub_calls: dict[tuple[str, int, int], str]
  stats: dict[str, float]


def _sampled_tokens(records) -> int:
  return int(sum(r.trajectory.num_sampled for r in records))


def run_main_slice(config, mode: Mode, workdir: str) -> None:
  """Runs the main slice to `experiment.num_steps` (module docstring) in `mode`, the
  config's `experiment.mode`."""
  rt = open_runtime(config, mode, workdir, "main")
  settings = rt.settings
  stream = QueryStream(rt.questions, seed=agent_setup.derive_seed(settings.seed, "data"),
                       batch_size=settings.num_queries)
  metadata = rt.restore()
  start = 0
  if metadata is not None:
    stream.set_state(metadata["data_iterator"])
    start = int(metadata["steps_done"])
  else:
    rt.apply_init_checkpoint()
  rt.resume(start, ack_version=start)
  policy = rt.sampler_policy(version=start)
  client = (_CrashAfterBatch(remote_client(config, rt.paths, rt.files)) if mode.decoupled
            else None)
  expert_judge = rt.expert_judge if mode.sub_agent else None
  sampling = _Sampling(
      _controller(rt, policy, client), rt.answer_judge,
      expert_judge if mode.shared else None,
      distributed.rollout_queries(
          batch_shardings(rt.layout, settings.num_queries * settings.num_rollouts).advantages,
          settings.num_queries, settings.num_rollouts) if multi_host() else slice(None))
  rt.step_log.start()
  log(f"main slice: mode={mode.name} {describe_steps(start, settings.num_steps)} "
      f"B={settings.num_queries} K={settings.num_rollouts} store={rt.paths.store_uri}")

  for step in range(start, settings.num_steps):
    timer = Timer()
    if client is not None:
      _wait_for_sub(rt, client, step, timer)
    rollouts = _rollouts(rt, step, stream.next_batch(), sampling, timer)
    outcome = _MainOutcome.of(rollouts, settings)
    record = outcome.record(settings.run_id, step)
    rt.put(record.key, record.to_bytes(), timer)
    crash_point("main", "outcomes", step)
    batch, scalars = _main_batch(rt, step, rollouts, outcome)
    metrics = rt.update(batch, timer)
    policy.sampler.model = rollout_model(rt.layout, rt.trainer.state)
    policy.version = step + 1
    scalars.update(outcome.scalars())
    scalars.update({f"main/update/{k}": v for k, v in metrics.items()})
    scalars.update(rollouts.stats)
    scalars.update(web_scalars(rt.registry))  # the web tools' counts ({} offline)
    scalars.update(judge_scalars(answer=rt.answer_judge, expert=rt.expert_judge))
    throughput = _throughput(rollouts, metrics, timer)  # phases the commit does not touch
    rt.step_log.record_before_commit(step, scalars, timer, throughput)
    rt.checkpoint(timer, {"steps_done": step + 1, "data_iterator": stream.get_state(),
                          "policy_version": step + 1})
    crash_point("main", "checkpoint", step)
    rt.ack(step, step + 1, timer)
    rt.retire_cache(step)
    if rt.is_writer and step_pages.page_due(config, step):
      with timer("page"):
        _write_page(rt, step, rollouts, outcome, expert_judge)
    rt.step_log.report(step, scalars, timer, throughput, {
        "main/reward": scalars["main/reward_mean"], "loss": metrics["loss"],
        "sub_calls": scalars["main/sub_calls_mean"]})
  rt.close()
  if client is not None:
    client.inner.close()
  distributed.barrier("main slice: done")  # no process leaves before process 0's writes
  log("main slice: done")


def _controller(rt: SliceRuntime, policy, client) -> RolloutController:
  """The mode's rollout controller over `policy` (remote S through `client` if any)."""
  main_spec, sub_spec = agent_setup.agent_specs(rt.config, rt.mode)
  rollout_config = agent_setup.rollout_config(rt.config)
  acting = agent_setup.rollout_policy(policy, rt.tokenizer, "main")
  if client is not None:
    return RolloutController(acting, rt.tokenizer, rt.registry, rollout_config,
                             sub_client=client, spec=main_spec)
  return make_controller(rt.mode, Agent(acting, rt.tokenizer), rt.registry, rollout_config,
                         main_spec=main_spec, sub_spec=sub_spec)


def _wait_for_sub(rt: SliceRuntime, client: _CrashAfterBatch, step: int,
                  timer: Timer) -> None:
  """Decoupled modes: S's ack of step t - 1 - staleness, then the step's S version."""
  settings = rt.settings
  client.step = step
  waited = step - 1 - settings.staleness
  with timer("wait_sub"):
    if waited >= 0:
      wait_for_sub_ack(rt.store, ack_key(settings.run_id, waited, "sub"), client.inner,
                       settings.wait_timeout_s)
  client.inner.begin_step(step, max(0, step - settings.staleness))


@dataclasses.dataclass(frozen=True)
class _MainOutcome(step_math.MainStep):
  """A step's [B, K] grid of M's outcomes, R_M and A_M, and the digest of every S call M
  received."""

  sub_calls: dict[tuple[str, int, int], str]

  @classmethod
  def of(cls, rollouts: _Rollouts, settings: StepSettings) -> _MainOutcome:
    main = step_math.MainStep.score(rollouts.main, rollouts.query_ids, settings.num_rollouts,
                                    settings.credit)
    return cls(main.query_ids, main.grid, main.reward, main.advantage, rollouts.sub_calls)

  def record(self, run_id: str, step: int) -> MainOutcomes:
    """outcomes(t), the store record the sub slice trains S from: each rollout names the
    S calls M received by digest."""
    counts = self.grid["num_sub_calls"]
    sub_calls = [[[self.sub_calls[(qid, k, i)] for i in range(counts[q, k])]
                  for k in range(counts.shape[1])] for q, qid in enumerate(self.query_ids)]
    return MainOutcomes.from_arrays(
        run_id, step, self.query_ids, correct=self.grid["correct"] > 0.5,
        main_reward=self.reward, sub_calls=sub_calls, policy_version=step)

  def scalars(self) -> dict[str, float]:
    grid = self.grid
    return {
        "main/reward_mean": float(self.reward.mean()),
        "main/correct_mean": float(grid["correct"].mean()),
        "main/format_ok_mean": float(grid["format_ok"].mean()),
        "main/advantage_abs_mean": float(np.abs(self.advantage).mean()),
        "main/sub_calls_mean": float(grid["num_sub_calls"].mean()),
        "main/sub_calls_max": float(grid["num_sub_calls"].max())}


def _write_page(rt: SliceRuntime, step: int, rollouts: _Rollouts, outcome: _MainOutcome,
                expert_judge) -> None:
  """Step t's trajectory page (`slices.step_pages`)."""
  step_pages.write_step_page(rt.config, rt.paths, rt.mode, step, outcome, rollouts.main,
                             rollouts.served, step_math.Scoring.of(rt.questions, expert_judge))


def _main_batch(rt: SliceRuntime, step: int, rollouts: _Rollouts,
                outcome: _MainOutcome) -> tuple[TrainBatch, dict[str, float]]:
  """M's [N, T] batch (in shared_policy with the step's aligned S rows) and its scalars."""
  batch = pack_sequences([step_math.token_sequence(r.trajectory) for r in rollouts.main],
                         outcome.advantage.reshape(-1), pad_id=rt.pad_id,
                         buckets=rt.buckets)
  scalars = {}
  if rt.mode.shared:
    sub_step = _shared_sub_step(rt, step, rollouts, outcome)
    scalars.update(step_math.sub_step_scalars(sub_step))
    scalars["shared/main_tokens"] = float(batch.loss_mask.sum())
    scalars["shared/sub_tokens"] = float(sub_step.batch.loss_mask.sum(axis=1)
                                         @ sub_step.batch.weights)
    batch = step_math.concat_batches(batch, sub_step.batch, rt.pad_id)
  return batch, scalars


def _throughput(rollouts: _Rollouts, metrics: dict[str, float],
                timer: Timer) -> dict[str, float]:
  """Sampled tokens per second of M (without S's calls) and S, trained ones of the update.
  A step redone from its write-ahead cache sampled nothing: only the update's."""
  seconds = timer.seconds
  throughput = {"update": metrics["num_tokens"] / max(seconds["update"], 1e-9)}
  if rollouts.stats["main/from_cache"]:
    return throughput
  throughput["main"] = rollouts.stats["main/sampled_tokens"] / max(
      seconds.get("rollout", 0.0) - seconds.get("sub_calls", 0.0), 1e-9)
  if rollouts.stats.get("sub/sampled_tokens"):
    throughput["sub"] = rollouts.stats["sub/sampled_tokens"] / max(
        seconds.get("sub_calls", 0.0), 1e-9)
  return throughput


@dataclasses.dataclass(frozen=True)
class _Sampling:
  """How this process samples a step: the mode's rollout controller, the judges that
  score its records (r_expert only where M's slice trains S, shared_policy), and `share`:
  the queries this process samples (all of them with one process)."""

  controller: RolloutController
  answer_judge: AnswerJudge
  expert_judge: Callable[..., float] | None
  share: slice


def _rollouts(rt: SliceRuntime, step: int, queries, sampling: _Sampling,
              timer: Timer) -> _Rollouts:
  """Step t's scored rollouts: from the write-ahead cache, else sampled and cached.

  The records of all processes (each sampled its `sampling.share`) are gathered on every
  process before the cache is written.
  """
  cache, seed = rt.cache, rt.settings.seed
  query_ids = [q.id for q in queries]
  cached = _load_cache(cache, step)
  stats = {}
  if cached is not None:
    cached_ids, main, sub, sub_calls = cached
    served = sub
    if cached_ids != query_ids:
      raise ValueError(f"{cache.describe(step)} holds queries {cached_ids}, but step {step} "
                       f"reads {query_ids}: the data or the seed changed since the crash")
    stats["main/from_cache"] = 1.0
  else:
    mine = queries[sampling.share]
    key = agent_setup.step_key(seed, "rollout", step)
    if multi_host():  # independent sampling streams per process
      key = jax.random.fold_in(key, jax.process_index())
    with timer("rollout"):
      out = sampling.controller.run(mine, rt.settings.num_rollouts, key)
    timer.seconds["sub_calls"] = out.stats.sub_s
    expert_judge = sampling.expert_judge
    with timer("scoring"):
      main, sub = score(out.main, out.sub if expert_judge is not None else [], mine,
                        sampling.answer_judge, expert_judge)
    sub_tokens = _sampled_tokens(out.sub)
    served = list(out.sub)
    sub_calls = {r.key: r.digest() for r in out.sub}
    if multi_host():
      with timer("exchange"):
        main, sub, sub_calls, sub_tokens = _gather_rollouts(
            step, [q.id for q in mine], main, sub, sub_calls, sub_tokens)
    if distributed.is_writer():
      with timer("store"):
        cache.write(step, query_ids, main, sub, sub_calls)
    crash_point("main", "cached", step)
    stats["main/from_cache"] = 0.0
    stats["sub/sampled_tokens"] = float(sub_tokens)
  stats["main/sampled_tokens"] = float(_sampled_tokens(main))
  return _Rollouts(query_ids, main, sub, served, sub_calls, stats)


def _load_cache(cache, step):
  """The step's cached records; with several processes, process 0's cache, broadcast."""
  if not multi_host():
    return cache.load(step)
  payload = cache.read_bytes(step) if distributed.is_writer() else None
  data = distributed.broadcast_bytes(payload)
  return records_from_json(json.loads(data), step, cache.describe(step)) if data else None


def _gather_rollouts(step, query_ids, main, sub, sub_calls, sub_tokens):
  """(M records, S records, S calls' digests, S sampled tokens) of all processes, in
  process order.

  Processes hold contiguous blocks of queries in process order, so the concatenation is
  in the step's (query, rollout[, call]) order, as one process's controller returns it.
  """
  payload = dump_json({**records_to_json(step, query_ids, main, sub, sub_calls),
                       "sub_sampled_tokens": int(sub_tokens)})
  all_main, all_sub, all_calls, all_tokens = [], [], {}, 0
  for part in distributed.allgather_bytes(payload):
    data = json.loads(part)
    _, part_main, part_sub, part_calls = records_from_json(
        data, step, "the multi-host record exchange")
    all_main += part_main
    all_sub += part_sub
    all_calls.update(part_calls)
    all_tokens += int(data["sub_sampled_tokens"])
  return all_main, all_sub, all_calls, all_tokens


def _shared_sub_step(rt: SliceRuntime, step: int, rollouts: _Rollouts,
                     outcome: _MainOutcome) -> step_math.SubStep:
  """shared_policy: the step's S calls aligned to D slots, for the one policy's batch."""
  grid = outcome.grid
  indexed = step_math.index_sub_records(rollouts.sub, rollouts.query_ids,
                                        grid["num_sub_calls"])
  return step_math.aligned_sub_step(
      indexed, outcome.reward, grid["correct"], grid["num_sub_calls"],
      alignment=step_math.SlotAlignment.of_step(rt.config, step),
      credit=rt.settings.credit, packing=rt.sub_packing)
