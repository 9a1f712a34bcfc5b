"""Per-agent training: train state on a mesh, the jitted sharded update, checkpoints.

Each agent (main M, sub-agent S) owns a mesh, an optimizer, a `TrainState` and an
`AgentCheckpointer`; the two never share gradients (paper section 4, Eq. 18-19).

  mesh = create_mesh(MeshConfig.from_config(config.main.mesh))
  optim = OptimizerConfig.from_config(config.main.optim, total_steps=num_steps)
  update_config = UpdateConfig.from_config(config.main)
  state, layout = create_train_state(model, make_optimizer(optim), mesh, seed=seed,
                                     with_reference=update_config.with_reference)
  update = make_update_fn(layout, update_config, num_rows=N,
                          learning_rate=learning_rate_schedule(optim))
  batch = pack_sequences(trajectories, advantages, buckets=...)   # or aligned_batch(...)
  state, metrics = update(state, batch)
  AgentCheckpointer(directory, layout, CheckpointConfig.from_config(config.checkpoint))

Also here: what an agent is built from (`agent_setup`: tokenizer, model, sampler, train
state; `tokenizer_corpus`: the world tokenizer's training text), the query stream over
the world's training questions (`data`; the world itself is built and read in
`mgrpo_jax.tasks`), the run's folder layout (`paths`), records as canonical JSON
(`files`), the compilation cache and the Hugging Face export. The two slices' step
protocol composes these in `mgrpo_jax.slices`.
"""

from mgrpo_jax.training.batching import (
    DEFAULT_LENGTH_BUCKETS,
    TokenSequence,
    TrainBatch,
    aligned_batch,
    pack_sequences,
)
from mgrpo_jax.training.checkpoint import AgentCheckpointer, CheckpointConfig
from mgrpo_jax.training.mesh import MeshConfig, create_mesh, replicated
from mgrpo_jax.training.optimizer import (
    OptimizerConfig,
    learning_rate_schedule,
    make_optimizer,
)
from mgrpo_jax.training.train_state import (
    StateLayout,
    TrainState,
    create_train_state,
    split_rng,
)
from mgrpo_jax.training.update import (
    LossConfig,
    UpdateConfig,
    batch_shardings,
    make_update_fn,
)

__all__ = [
    "DEFAULT_LENGTH_BUCKETS", "AgentCheckpointer", "CheckpointConfig", "LossConfig",
    "MeshConfig", "OptimizerConfig", "StateLayout", "TokenSequence", "TrainBatch",
    "TrainState", "UpdateConfig", "aligned_batch", "batch_shardings", "create_mesh",
    "create_train_state", "learning_rate_schedule", "make_optimizer", "make_update_fn",
    "pack_sequences", "replicated", "split_rng",
]
