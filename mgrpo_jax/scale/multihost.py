"""A slice over several JAX processes: what it samples with and what its updates read.

A slice's samplers read a copy of the parameters on their own process's devices
(`rollout_model`), and its updates read global batches fed by rows (`device_batch`).
With one process every helper here is what it was without them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mgrpo_jax.models.sharding import param_shardings
from mgrpo_jax.scale import distributed
from mgrpo_jax.training.batching import TrainBatch
from mgrpo_jax.training.mesh import MeshConfig, create_mesh
from mgrpo_jax.training.train_state import StateLayout, TrainState
from mgrpo_jax.training.update import batch_shardings


def multi_host() -> bool:
  """Whether this slice runs as several JAX processes (`distributed.initialize`)."""
  return jax.process_count() > 1


def servable_params(layout: StateLayout, state: TrainState) -> Any:
  """Parameters a sampler of this process can read, safe from the next (donating) update:
  the whole model's (`nnx.merge(layout.graphdef, ...)` rebuilds it), with LoRA the
  adapters and the frozen base.

  One process: a copy of `state.params` in place (with LoRA: of the adapters; the base's
  arrays are shared, no update donates them). Several: a replica on this process's
  devices, tensor-parallel over them by the model's rules (collective: every process
  calls it at the same point).
  """
  if not multi_host():
    return layout.full_params(jax.tree.map(jnp.copy, state.params))
  model = layout.model(state)
  local_mesh = create_mesh(MeshConfig(tensor=jax.local_device_count()), jax.local_devices())
  shardings = param_shardings(model, local_mesh, model.config.sharding_rules)
  return distributed.local_replica(layout.full_params(state.params), shardings)


def rollout_model(layout: StateLayout, state: TrainState) -> nnx.Module:
  """The model this process samples rollouts with (collective with several processes).

  One process: the train state's model itself (its buffers are read in place). Several:
  the model over `servable_params`.
  """
  if not multi_host():
    return layout.model(state)
  return nnx.merge(layout.graphdef, servable_params(layout, state))


def device_batch(layout: StateLayout, batch: TrainBatch) -> Any:
  """What the update takes: the host batch itself, or (several processes, each holding
  the whole [N, T] batch) global arrays to which each process feeds only its rows."""
  if not multi_host():
    return batch
  return distributed.shard_host_batch(batch, batch_shardings(layout, batch.ids.shape[0]))
