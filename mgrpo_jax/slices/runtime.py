"""What both slices run on, built once: `open_runtime(config, mode, workdir, role)`.

A slice's loop (`main_slice.py`, `sub_slice.py`) is the step protocol of
docs/ALGORITHM.md; everything it stands on is here: the step's settings, the run's
folders, files and store, the world's questions and tools, the agent's model, train
state, checkpointer and write-ahead cache (in the workdir), its update and
acknowledgements; what it records of each step, its metrics and console line, is its
`StepLog` (`step_log.py`). With several processes, process 0 alone writes (store
records, caches, metrics, log lines); checkpoint saves and restores are collective.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np

from mgrpo_jax.config.modes import Mode
from mgrpo_jax.scale import distributed
from mgrpo_jax.scale.multihost import device_batch, rollout_model
from mgrpo_jax.scale.writers import log
from mgrpo_jax.slices import step_math
from mgrpo_jax.slices.common import Timer, check_config, open_run_store
from mgrpo_jax.slices.step_cache import MainStepCache, SubStepCache
from mgrpo_jax.slices.step_log import StepLog
from mgrpo_jax.store.folder import Folder, open_folder
from mgrpo_jax.store.protocol import Store
from mgrpo_jax.store.schema import SliceAck
from mgrpo_jax.tasks.judges import AnswerJudge, ExpertJudge
from mgrpo_jax.tasks.questions import Question
from mgrpo_jax.tasks.train_worlds import training_tasks
from mgrpo_jax.tasks.world_data import ensure_world
from mgrpo_jax.tasks.world_setup import WorldSetup
from mgrpo_jax.text import Tokenizer
from mgrpo_jax.tools import TaskRoutedRegistry, ToolRegistry
from mgrpo_jax.training import agent_setup
from mgrpo_jax.training.agent_config import AgentSetup
from mgrpo_jax.training.batching import TrainBatch, row_buckets
from mgrpo_jax.training.checkpoint import AgentCheckpointer, CheckpointConfig
from mgrpo_jax.training.judge_setup import run_judges
from mgrpo_jax.training.optimizer import learning_rate_schedule
from mgrpo_jax.training.paths import RunPaths
from mgrpo_jax.training.tokenizer_corpus import TokenizerSetup
from mgrpo_jax.training.train_state import TrainState
from mgrpo_jax.training.update import make_update_fn

_CACHES = {"main": MainStepCache, "sub": SubStepCache}
# An agent's compiled update: (state, batch, *, has_tokens) -> (state, metrics).
_Update = Callable[..., tuple[TrainState, dict[str, jax.Array]]]


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
  config: ml_collections.ConfigDict
  mode: Mode
  setup: AgentSetup  # the agent's settings
  settings: StepSettings
  paths: RunPaths
  store: Store
  files: Folder  # the workdir's replaceable files (caches, the service address, logs)
  world_path: pathlib.Path
  questions: list[Question]
  registry: ToolRegistry | TaskRoutedRegistry
  answer_judge: AnswerJudge  # r_correct of M's answers (`judge_setup.run_judges`)
  expert_judge: ExpertJudge | None  # r_expert of S's reports, by the question's world
  tokenizer: Tokenizer
  trainer: agent_setup.AgentTrainer
  checkpointer: AgentCheckpointer
  cache: MainStepCache | SubStepCache
  step_log: StepLog  # the step's metrics, console line and log mirror
  _updates: dict[int, _Update] = dataclasses.field(default_factory=dict)

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
    """The row lengths T the agent's RL batches are padded to (`AgentSetup.train_lengths`)."""
    return self.setup.train_lengths

  @property
  def sub_row_buckets(self) -> tuple[int, ...]:
    """The row counts N of the S batches this agent trains on: a quarter, half, three
    quarters or all of the Q*K*D slots (`batching.row_buckets`), as multiples of its
    micro-batch size, so duplicated calls and empty slots cost no rows."""
    settings = self.settings
    slots = settings.num_queries * settings.num_rollouts * settings.num_slots
    return row_buckets(slots, self.setup.update.micro_batch_size or 1)

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
    directory = self.setup.model.init_checkpoint
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
                                      self.tokenizer, self.setup.sampling, version=version)

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

  def close(self) -> None:
    """Closes the step log (copying the logs a last time) and waits for the
    checkpointer's pending saves."""
    self.step_log.close()
    self.checkpointer.close()


def open_runtime(config, mode: Mode, workdir: str, role: str) -> SliceRuntime:
  """Everything the `role` slice's loop needs, in the order the slices always built it;
  `mode` is the config's `experiment.mode`, parsed by the caller."""
  check_config(config)
  paths = RunPaths.from_config(config, workdir)
  store = open_run_store(paths)
  files = open_folder(paths.workdir)
  world = WorldSetup.from_config(config)
  world_path = ensure_world(paths.local, world, log)
  tasks = training_tasks(world, world_path,
                         functools.partial(agent_setup.index_tool_registry, config=config))
  setup = AgentSetup.from_config(config, role)
  world_tokenizer = functools.partial(agent_setup.world_tokenizer, paths.local,
                                      TokenizerSetup.from_config(config))
  model, tokenizer = agent_setup.build_model(setup, world_tokenizer)
  judges = run_judges(config, paths.local, tasks.expert_judge, world_tokenizer)
  trainer = agent_setup.create_agent_state(model, setup)
  checkpointer = AgentCheckpointer(paths.checkpoints(role), trainer.layout,
                                   CheckpointConfig.from_config(config.checkpoint))
  return SliceRuntime(
      role=role, config=config, mode=mode, setup=setup,
      settings=StepSettings.from_config(config), paths=paths, store=store, files=files,
      world_path=world_path, questions=tasks.questions, registry=tasks.registry,
      answer_judge=judges.answer, expert_judge=judges.expert, tokenizer=tokenizer,
      trainer=trainer, checkpointer=checkpointer,
      cache=_CACHES[role](files.child(paths.cache_name(role)),
                          checkpoints_kept=int(config.checkpoint.keep)),
      step_log=StepLog(role, config, paths, files))
