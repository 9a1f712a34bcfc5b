"""Logical-axis sharding: map parameter axis names to a (data, fsdp, tensor) device mesh.

Each parameter carries logical names (`embed`, `heads`, `kv`, `mlp`, `vocab`, `norm`,
and `layers` when scanned) in its `out_sharding` metadata. `ModelConfig.sharding_rules`
maps each name to a mesh axis (or None). A dimension stays replicated when its rule
names no axis of the mesh, when its size is not divisible by that axis's size (e.g.
SmolLM2's 3 kv heads on a tensor axis of 4), or when an earlier dimension of the same
parameter already took that axis. Meshes use Auto axis types (`jax.sharding.Mesh`), so
jitted code needs no sharding annotations: XLA propagates them from the inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mgrpo_jax.models.config import LogicalRules

MESH_AXES = ("data", "fsdp", "tensor")


def make_mesh(shape: Sequence[int], devices: Sequence[jax.Device] | None = None,
              axis_names: Sequence[str] = MESH_AXES) -> Mesh:
  """A mesh of shape (data, fsdp, tensor) over `devices` (default: all)."""
  devices = list(jax.devices() if devices is None else devices)
  size = int(np.prod(shape))
  if size != len(devices):
    raise ValueError(f"mesh shape {tuple(shape)} needs {size} devices, got {len(devices)}")
  return Mesh(np.array(devices).reshape(tuple(shape)), tuple(axis_names))


def logical_to_mesh_spec(logical_axes: Sequence[str | None], shape: Sequence[int],
                         rules: LogicalRules, mesh: Mesh) -> PartitionSpec:
  """PartitionSpec for one array with the given logical axis names and shape."""
  table = dict(rules)
  used: set[str] = set()
  spec = []
  for name, dim in zip(logical_axes, shape, strict=True):
    target = table.get(name) if name is not None else None
    axes = (target,) if isinstance(target, str) else tuple(target or ())
    axes = tuple(a for a in axes if a in mesh.shape and a not in used)
    size = int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
    if not axes or dim % size:
      spec.append(None)
      continue
    used.update(axes)
    spec.append(axes[0] if len(axes) == 1 else axes)
  return PartitionSpec(*spec)


def param_shardings(model: nnx.Module, mesh: Mesh, rules: LogicalRules) -> nnx.State:
  """NamedShardings for `nnx.state(model)`, built from each parameter's logical axes."""
  state = nnx.state(model)

  def one(variable):
    axes = variable.get_metadata().get("out_sharding")
    shape = variable.get_value().shape
    axes = axes if axes is not None else (None,) * len(shape)
    return variable.replace(NamedSharding(mesh, logical_to_mesh_spec(axes, shape, rules, mesh)))

  return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def shard_model(model: nnx.Module, mesh: Mesh, rules: LogicalRules | None = None) -> nnx.Module:
  """Places `model`'s parameters on `mesh` as its logical rules say (in place); returns it."""
  rules = model.config.sharding_rules if rules is None else rules
  shardings = param_shardings(model, mesh, rules)
  nnx.update(model, jax.device_put(nnx.state(model), shardings))
  return model


def batch_sharding(mesh: Mesh, batch_size: int, ndim: int = 2) -> NamedSharding:
  """Sharding of a [B, ...] input: B split over (data, fsdp) when divisible."""
  axes = tuple(a for a in ("data", "fsdp") if a in mesh.shape)
  size = int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
  lead = axes if axes and batch_size % size == 0 else None
  return NamedSharding(mesh, PartitionSpec(lead, *([None] * (ndim - 1))))
