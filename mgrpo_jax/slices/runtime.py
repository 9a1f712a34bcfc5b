"""What both slices run on, built once: `open_runtime(config, workdir, role)`.

A slice's loop (`main_slice.py`, `sub_slice.py`) is the step protocol of
docs/ALGORITHM.md; everything it stands on is here: the step's settings, the run's
folders, files and store, the world's questions and tools, the agent's model, train
state, checkpointer and write-ahead cache (in the workdir), its update,
acknowledgements, and the metrics and progress line of a step (written locally; with a
`gs://` workdir copied to it after every written step, `log_mirror.py`). With several
processes, process 0 alone writes (store records, caches, metrics, log lines);
checkpoint saves and restores are collective.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import numpy as np

from mgrpo_jax.config.modes import Mode, parse_mode
from mgrpo_jax.metrics import format_progress, format_step
from mgrpo_jax.sampling.buckets import doubling_lengths
from mgrpo_jax.scale import distributed
from mgrpo_jax.scale.multihost import device_batch, rollout_model
from mgrpo_jax.scale.writers import is_verbose, log, metrics_writer
from mgrpo_jax.slices import step_math
from mgrpo_jax.slices.common import Timer, check_config, metrics_due, open_run_store
from mgrpo_jax.slices.log_mirror import LogMirror
from mgrpo_jax.slices.step_cache import MainStepCache, SubStepCache
from mgrpo_jax.store.folder import Folder, open_folder
from mgrpo_jax.store.protocol import Store
from mgrpo_jax.store.schema import SliceAck
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.batching import TrainBatch, row_buckets
from mgrpo_jax.training.checkpoint import AgentCheckpointer, CheckpointConfig
from mgrpo_jax.training.data import ensure_world
from mgrpo_jax.training.optimizer import learning_rate_schedule
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.train_worlds import training_tasks
from mgrpo_jax.training.update import make_update_fn

_CACHES = {"main": MainStepCache, "sub": SubStepCache}
# (label, metric) of the numbers a step's default console line shows, per slice, where
# the step has them; metrics.jsonl holds them all.
HEADLINE = {"main": (("R_M", "main/reward_mean"), ("correct", "main/correct_mean"),
                     ("format", "main/format_ok_mean"), ("sub-calls", "main/sub_calls_mean")),
            "sub": (("R_S", "sub/reward_mean"), ("calls", "sub/calls"))}


def step_line(role: str, step: int, num_steps: int, scalars: dict[str, float], timer: Timer,
              throughput: dict[str, float], progress: dict[str, float]) -> str:
  """The console line of the `role` slice's step `step` (0-based): its `HEADLINE`
  numbers and wall seconds (`metrics.format_step`); with `--verbose`
  (`writers.is_verbose`) the full line: `progress`, every phase's seconds and the
  throughputs (`metrics.format_progress`)."""
  if is_verbose():
    return format_progress(step + 1, num_steps, progress, timer.seconds, throughput)
  headline = {label: scalars[key] for label, key in HEADLINE[role] if key in scalars}
  return format_step(step + 1, num_steps, headline, timer.elapsed())


def train_lengths(limits: Any) -> tuple[int, ...]:
  """The row lengths T an agent's RL batches are padded to, from its `limits` section:
  max_context alone when `shortest_train_length` is 0 (one compiled update per run),
  else its doublings up to max_context."""
  if not limits.shortest_train_length:
    return (int(limits.max_context),)
  return doubling_lengths(int(limits.shortest_train_length), int(limits.max_context))


@dataclasses.dataclass(frozen=True)
class StepSettings:
  """The numbers of a step both slices read (keys `experiment.*`, `mgrpo.*`, `rewards.*`)."""

  seed: int
  run_id: str
  num_steps: int
  num_queries: int  # B
  num_rollouts: int  # K
  num_slots: int  # D
  staleness: int
  wait_timeout_s: float
  credit: step_math.CreditConfig

  @classmethod
  def from_config(cls, config) -> StepSettings:
    mgrpo = config.mgrpo
    return cls(seed=int(config.experiment.seed), run_id=str(config.experiment.run_id),
               num_steps=int(config.experiment.num_steps),
               num_queries=int(mgrpo.queries_per_step),
               num_rollouts=int(mgrpo.rollouts_per_query),
               num_slots=int(mgrpo.aligned_sub_calls), staleness=int(mgrpo.staleness),
               wait_timeout_s=float(config.store.wait_timeout_s),
               credit=step_math.CreditConfig.from_config(config))


@dataclasses.dataclass
class SliceRuntime:
  """One slice's agent (`role`) and the run around it (module docstring)."""

  role: str
  config: Any
  mode: Mode
  settings: StepSettings
  paths: RunPaths
  store: Store
  files: Folder  # the workdir's replaceable files (caches, the service address, logs)
  world_path: pathlib.Path
  questions: list
  registry: Any
  expert_judge: Any  # r_expert of S's reports, by the question's world
  tokenizer: Any
  trainer: agent_setup.AgentTrainer
  checkpointer: AgentCheckpointer
  cache: MainStepCache | SubStepCache
  writer: Any = None  # the metrics writer, from `start_metrics`
  log_mirror: LogMirror | None = None  # with a gs:// workdir, from `start_metrics`
  _updates: dict[int, Any] = dataclasses.field(default_factory=dict)

  @property
  def layout(self):
    return self.trainer.layout

  @property
  def is_writer(self) -> bool:
    """Whether this process writes the slice's records, caches, metrics and lines."""
    return distributed.is_writer()

  @property
  def pad_id(self) -> int:
    return self.tokenizer.pad_id or 0

  @property
  def buckets(self) -> tuple[int, ...]:
    """The row lengths T the agent's RL batches are padded to (`train_lengths`)."""
    return train_lengths(self.config[self.role].limits)

  @property
  def sub_row_buckets(self) -> tuple[int, ...]:
    """The row counts N of the S batches this agent trains on: a quarter, half, three
    quarters or all of the Q*K*D slots (`batching.row_buckets`), as multiples of its
    micro-batch size, so duplicated calls and empty slots cost no rows."""
    settings = self.settings
    slots = settings.num_queries * settings.num_rollouts * settings.num_slots
    return row_buckets(slots, int(self.config[self.role].optim.micro_batch_size) or 1)

  @property
  def sub_packing(self) -> step_math.Packing:
    """How the S batches this agent trains on are packed: its pad id, `buckets` and
    `sub_row_buckets`."""
    return step_math.Packing(pad_id=self.pad_id, buckets=self.buckets,
                             row_buckets=self.sub_row_buckets)

  def restore(self) -> dict[str, Any] | None:
    """Restores the newest checkpoint into the train state; its metadata, or None."""
    restored = self.checkpointer.restore()
    if restored is None:
      return None
    self.trainer.state, metadata = restored
    return metadata

  def apply_init_checkpoint(self) -> None:
    """Loads `<role>.model.init_checkpoint` (e.g. the warm start's) if one is set."""
    directory = str(self.config[self.role].model.init_checkpoint)
    if directory:
      agent_setup.restore_init_params(self.trainer, directory)

  def resume(self, start: int, ack_version: int | None) -> None:
    """Before step `start`: the ack of step start - 1 again (a crash may have come
    between its checkpoint and its ack; None: none owed), and no older cache."""
    if start > 0 and ack_version is not None:
      self.ack(start - 1, ack_version)
    if self.is_writer:
      self.cache.delete_before(start)

  def sampler_policy(self, version: int):
    """The agent's sampler over its current weights, reporting `version`."""
    return agent_setup.sampler_policy(rollout_model(self.layout, self.trainer.state),
                                      self.tokenizer, self.config[self.role], version=version)

  def update(self, batch: TrainBatch, timer: Timer) -> dict[str, float]:
    """One update of the agent on `batch` (one compiled update per row count)."""
    rows = batch.ids.shape[0]
    if rows not in self._updates:
      self._updates[rows] = make_update_fn(
          self.layout, self.trainer.update_config, rows,
          learning_rate=learning_rate_schedule(self.trainer.optim))
    with timer("update"):
      self.trainer.state, metrics = self._updates[rows](
          self.trainer.state, device_batch(self.layout, batch),
          has_tokens=bool(np.any(batch.loss_mask)))  # every process holds the whole batch
      return {k: float(v) for k, v in metrics.items()}

  def checkpoint(self, timer: Timer, metadata: dict[str, Any]) -> None:
    """A durable checkpoint of the train state (its step's ack promises one)."""
    with timer("checkpoint"):
      self.checkpointer.save(self.trainer.state, force=True, metadata=metadata)
      self.checkpointer.wait_until_finished()

  def put(self, key: str, data: bytes, timer: Timer | None = None) -> None:
    """Process 0: one record into the store (timed as "store" with a timer)."""
    if not self.is_writer:
      return
    if timer is None:
      self.store.put(key, data)
      return
    with timer("store"):
      self.store.put(key, data)

  def ack(self, step: int, version: int, timer: Timer | None = None) -> None:
    """Process 0: this slice's ack of `step`, with its agent's weight `version`."""
    ack = SliceAck(self.settings.run_id, step, self.role, version)
    self.put(ack.key, ack.to_bytes(), timer)

  def retire_cache(self, step: int) -> None:
    """Process 0, after the step's ack: the write-ahead cache files no kept checkpoint
    needs again."""
    if self.is_writer:
      self.cache.retire(step)

  def start_metrics(self) -> None:
    """Opens the slice's metrics writer (metrics.jsonl, TensorBoard, W&B), with a
    `gs://` workdir after fetching the run's logs this machine lacks."""
    if self.paths.remote and self.is_writer:
      self.log_mirror = LogMirror(self.paths.logs(self.role),
                                  self.files.child(self.paths.logs_name(self.role)))
      self.log_mirror.restore()
    self.writer = metrics_writer(self.paths, self.role, self.config)

  def record_before_commit(self, step: int, scalars: dict[str, float], timer: Timer,
                           throughput: dict[str, float]) -> None:
    """The step's metrics so far as a provisional line (metrics.jsonl, mirrored), written
    before the step's checkpoint and ack: a process killed after those and before `report`
    resumes past the step, whose line would otherwise be lost."""
    self._write_metrics(step, dict(scalars), timer, throughput, provisional=True)

  def report(self, step: int, scalars: dict[str, float], timer: Timer,
             throughput: dict[str, float], progress: dict[str, float]) -> None:
    """The step's metrics (with its phase times and throughputs; `logging.every`) and
    its console line (`step_line`)."""
    self._write_metrics(step, scalars, timer, throughput, provisional=False)
    log(step_line(self.role, step, self.settings.num_steps, scalars, timer, throughput,
                  progress))

  def _write_metrics(self, step: int, scalars: dict[str, float], timer: Timer,
                     throughput: dict[str, float], *, provisional: bool) -> None:
    for phase, seconds in timer.seconds.items():
      scalars[f"time/{phase}_s"] = seconds
    scalars.update({f"throughput/{k}_tokens_per_s": v for k, v in throughput.items()})
    if metrics_due(self.config, step):
      self.writer.write(step, scalars, provisional=provisional)
      if self.log_mirror is not None:
        self.log_mirror.sync()

  def close(self) -> None:
    """Closes the metrics writer (copying the logs a last time) and waits for the
    checkpointer's pending saves."""
    if self.writer is not None:
      self.writer.close()
    if self.log_mirror is not None:
      self.log_mirror.sync()
    self.checkpointer.close()


def open_runtime(config, workdir: str, role: str) -> SliceRuntime:
  """Everything the `role` slice's loop needs, in the order the slices always built it."""
  check_config(config)
  paths = RunPaths.from_config(config, workdir)
  store = open_run_store(paths)
  files = open_folder(paths.workdir)
  world_path = ensure_world(paths.local, config.world, log)
  tasks = training_tasks(config, world_path)
  model, tokenizer = agent_setup.build_model(config[role], role, paths.local, config)
  trainer = agent_setup.create_agent_state(model, config[role], role, config)
  checkpointer = AgentCheckpointer(paths.checkpoints(role), trainer.layout,
                                   CheckpointConfig.from_config(config.checkpoint))
  return SliceRuntime(
      role=role, config=config, mode=parse_mode(str(config.experiment.mode)),
      settings=StepSettings.from_config(config), paths=paths, store=store, files=files,
      world_path=world_path, questions=tasks.questions, registry=tasks.registry,
      expert_judge=tasks.expert_judge, tokenizer=tokenizer,
      trainer=trainer, checkpointer=checkpointer,
      cache=_CACHES[role](files.child(paths.cache_name(role)),
                          checkpoints_kept=int(config.checkpoint.keep)))
