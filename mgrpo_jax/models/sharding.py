"""Logical-axis sharding: map parameter axis names to a (data, fsdp, tensor) device mesh.

Each parameter carries logical names (`embed`, `heads`, `kv`, `mlp`, `vocab`, `norm`,
and `layers` when scanned) in its `out_sharding` metadata. `ModelConfig.sharding_rules`
maps each name to a mesh axis (or None). A dimension stays replicated when its rule
names no axis of the mesh, when its size is not divisible by that axis's size (e.g.
SmolLM2's 3 kv heads on a tensor axis of 4), or when an earlier dimension of the same
parameter already took that axis. Meshes use Auto axis types (`jax.sharding.Mesh`), so
jitted code needs no sharding annotations: XLA propagates them from the inputs.

Activations and the KV cache have their own logical names (`ACTIVATION_RULES`): batch
rows over (data, fsdp), attention heads, kv heads, MLP columns and the vocabulary over
`tensor` (Megatron-style tensor parallelism: column-parallel q/k/v/gate/up, row-parallel
o/down, whose [B, T, D] outputs are replicated over `tensor`). `constrain` pins an
activation inside jitted code to its rule, `kv_cache_shardings` gives the cache's
layout ([L, B, S, K, H]: batch over (data, fsdp), kv heads over tensor). Every function
here also accepts a `jax.sharding.AbstractMesh` (shapes only, no devices), which the
dry-run memory planner uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from mgrpo_jax.models.config import LogicalRules
from mgrpo_jax.models.kv_cache import KVCache

MESH_AXES = ("data", "fsdp", "tensor")

# Logical axis names of activations and of the KV cache (parameters: `DEFAULT_RULES`).
ACTIVATION_RULES: LogicalRules = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("act_embed", None),
    ("act_heads", "tensor"),
    ("act_kv", "tensor"),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
    ("head_dim", None),
    ("layers", None),
)
HIDDEN_AXES = ("batch", "length", "act_embed")          # residual stream [B, T, D]
MLP_AXES = ("batch", "length", "act_mlp")               # SwiGLU hidden [B, T, F]
LOGITS_AXES = ("batch", "length", "act_vocab")          # logits [B, T, V]
KV_CACHE_AXES = ("layers", "batch", "length", "act_kv", "head_dim")  # k, v [L, B, S, K, H]


def make_mesh(shape: Sequence[int], devices: Sequence[jax.Device] | None = None,
              axis_names: Sequence[str] = MESH_AXES) -> Mesh:
  """A mesh of shape (data, fsdp, tensor) over `devices` (default: all)."""
  devices = list(jax.devices() if devices is None else devices)
  size = int(np.prod(shape))
  if size != len(devices):
    raise ValueError(f"mesh shape {tuple(shape)} needs {size} devices, got {len(devices)}")
  return Mesh(np.array(devices).reshape(tuple(shape)), tuple(axis_names))


def logical_to_mesh_spec(logical_axes: Sequence[str | None], shape: Sequence[int],
                         rules: LogicalRules, mesh: Mesh | AbstractMesh) -> PartitionSpec:
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


def activation_sharding(logical_axes: Sequence[str | None], shape: Sequence[int],
                        mesh: Mesh | AbstractMesh,
                        rules: LogicalRules = ACTIVATION_RULES) -> NamedSharding:
  """Sharding of an activation with the given logical axes (e.g. `HIDDEN_AXES`)."""
  return NamedSharding(mesh, logical_to_mesh_spec(logical_axes, shape, rules, mesh))


def constrain(x: jax.Array, logical_axes: Sequence[str | None], mesh: Mesh,
              rules: LogicalRules = ACTIVATION_RULES) -> jax.Array:
  """`with_sharding_constraint` of `x` to its activation rule (inside jitted code)."""
  return jax.lax.with_sharding_constraint(
      x, activation_sharding(logical_axes, x.shape, mesh, rules))


def kv_cache_shardings(cache: KVCache, mesh: Mesh | AbstractMesh,
                       rules: LogicalRules = ACTIVATION_RULES) -> KVCache:
  """NamedShardings of a `KVCache` (or of its `jax.eval_shape`): k, v [L, B, S, K, H]
  by `KV_CACHE_AXES`, start [B] by batch, the write index replicated."""
  kv = activation_sharding(KV_CACHE_AXES, cache.k.shape, mesh, rules)
  start = activation_sharding(("batch",), cache.start.shape, mesh, rules)
  return KVCache(k=kv, v=kv, index=NamedSharding(mesh, PartitionSpec()), start=start)


def shard_kv_cache(cache: KVCache, mesh: Mesh,
                   rules: LogicalRules = ACTIVATION_RULES) -> KVCache:
  """Places a KV cache on `mesh` by the activation rules."""
  return jax.device_put(cache, kv_cache_shardings(cache, mesh, rules))


def constrain_kv_cache(cache: KVCache, mesh: Mesh,
                       rules: LogicalRules = ACTIVATION_RULES) -> KVCache:
  """Pins a KV cache to its rule inside jitted code (e.g. the cache a decode step returns)."""
  return jax.lax.with_sharding_constraint(cache, kv_cache_shardings(cache, mesh, rules))
