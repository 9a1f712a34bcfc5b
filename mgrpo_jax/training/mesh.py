"""One agent's device mesh (axes data, fsdp, tensor) and the shardings of its batches.

Each agent trains on its own mesh (its pod slice; on one machine, its share of the
devices): `data` replicates the parameters and splits the batch, `fsdp` splits both
the batch and the parameters (fully sharded data parallel), `tensor` splits attention
heads and MLP columns (the logical rules of `mgrpo_jax.models.sharding`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mgrpo_jax.models.sharding import MESH_AXES, make_mesh


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshConfig:
  """Mesh axis sizes of one agent (keys `main.mesh.*` / `sub.mesh.*`).

  Attributes:
    data: data-parallel axis size.
    fsdp: fully-sharded data-parallel axis size.
    tensor: tensor-parallel axis size.
  """

  data: int = 1
  fsdp: int = 1
  tensor: int = 1

  def __post_init__(self):
    for name in MESH_AXES:
      if getattr(self, name) < 1:
        raise ValueError(f"mesh.{name} must be >= 1, got {getattr(self, name)}")

  @property
  def shape(self) -> tuple[int, int, int]:
    return (self.data, self.fsdp, self.tensor)

  @property
  def size(self) -> int:
    return self.data * self.fsdp * self.tensor

  @classmethod
  def from_config(cls, mesh: Any) -> MeshConfig:
    """Builds it from a `mesh` ConfigDict section (`config.main.mesh`)."""
    return cls(data=int(mesh["data"]), fsdp=int(mesh["fsdp"]), tensor=int(mesh["tensor"]))


def create_mesh(config: MeshConfig, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """The agent's mesh over `devices` (default: the first `config.size` devices)."""
  if devices is None:
    available = jax.devices()
    if len(available) < config.size:
      raise ValueError(f"mesh {config.shape} (data, fsdp, tensor) needs {config.size} "
                       f"devices, only {len(available)} available")
    devices = available[:config.size]
  return make_mesh(config.shape, devices)


def replicated(mesh: Mesh) -> NamedSharding:
  """A fully replicated sharding on `mesh` (scalars, metrics, PRNG state)."""
  return NamedSharding(mesh, PartitionSpec())
