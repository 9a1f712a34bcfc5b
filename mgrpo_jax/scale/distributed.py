"""Multi-host runs: one JAX process per host of a slice, one global mesh per agent.

On a TPU pod slice each host runs the same launch command; `initialize` joins the
processes into one JAX runtime (`jax.distributed.initialize`), after which
`jax.devices()` lists every chip of the slice and a `jax.sharding.Mesh` over them is
global: jitted programs run SPMD on all hosts at once, each host feeding and reading
only its addressable shards.

  initialize(DistributedConfig(coordinator_address="auto"))      # TPU: detected
  rows = process_rows(batch_sharding, (N, T))                     # this host's rows
  batch = global_batch(local_rows_batch, batch_shardings, N)      # one global array
  if is_writer(): store.put(...)                                  # process 0 writes
  checkpointer.save(...)                                          # every process

Who writes what. Only process 0 writes store records (`mgrpo_jax.store`), metric logs
and checkpoint metadata; `process_zero_only` wraps such a writer. Orbax saves are
collective: every process calls `save` with the same global state (each writes its own
shards) and orbax itself lets one process commit the metadata. After a process-0 write
that others must read, `barrier(name)` makes them wait for it.

Data by process. A batch's rows (B*K rollouts of M, B*K*D sub-trajectories of S) are
split over the mesh's (data, fsdp) axes; `process_rows` says which contiguous rows the
devices of this process hold, so each host runs the rollout controller on those rows
only and `global_batch` assembles the global [N, ...] arrays without any transfer
between hosts. With a batch replicated over the mesh (pure tensor parallelism), every
process holds all rows.

What the trainers use (`slices/main_slice.py`, `slices/sub_slice.py`):
  rollout_queries(sharding, B, K)   the queries this process samples (each on one process)
  allgather_bytes / broadcast_bytes / broadcast_arrays
                                    host data between processes (records, the S batch)
  shard_host_batch(batch, shardings)  global arrays from a batch every process holds,
                                    each process feeding only its rows
  local_replica(params, shardings)  a copy of global parameters on this process's
                                    devices, for a sampler that runs per process
Every one of them is collective where it says so: all processes call it, in the same
order, or the slice hangs.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Sharding

AUTO = "auto"
_R = TypeVar("_R")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistributedConfig:
  """How this process joins its slice (launcher flags `--coordinator_address` etc.).

  Attributes:
    coordinator_address: "" for a single-process run; "auto" to read everything from
      the environment (TPU pod slices, SLURM, ...: `jax.distributed.initialize()`
      without arguments); or "host:port" of process 0's coordinator service.
    num_processes: processes in the slice (explicit mode; 1 otherwise).
    process_id: this process's index in [0, num_processes) (explicit mode).
    initialization_timeout_s: seconds to wait for every process to join.
  """

  coordinator_address: str = ""
  num_processes: int = 1
  process_id: int = 0
  initialization_timeout_s: int = 300

  def __post_init__(self):
    address = self.coordinator_address
    if self.num_processes < 1:
      raise ValueError(f"num_processes must be >= 1, got {self.num_processes}")
    if not 0 <= self.process_id < self.num_processes:
      raise ValueError(f"process_id must be in [0, num_processes={self.num_processes}), "
                       f"got {self.process_id}")
    if self.initialization_timeout_s < 1:
      raise ValueError("initialization_timeout_s must be >= 1, got "
                       f"{self.initialization_timeout_s}")
    if address in ("", AUTO):
      if self.num_processes != 1 or self.process_id != 0:
        raise ValueError(f"num_processes={self.num_processes} and process_id="
                         f"{self.process_id} need an explicit coordinator_address "
                         f"host:port (got {address!r})")
      return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
      raise ValueError(f"coordinator_address must be '', 'auto' or host:port, got {address!r}")

  @property
  def mode(self) -> str:
    """"single" (no coordination), "auto" (from the environment) or "explicit"."""
    if not self.coordinator_address:
      return "single"
    return AUTO if self.coordinator_address == AUTO else "explicit"


def initialize(config: DistributedConfig) -> None:
  """Joins the slice's JAX runtime; call before any other JAX use. Single mode: no-op."""
  if config.mode == "single":
    return
  if config.mode == AUTO:
    jax.distributed.initialize(initialization_timeout=config.initialization_timeout_s)
    return
  jax.distributed.initialize(coordinator_address=config.coordinator_address,
                             num_processes=config.num_processes,
                             process_id=config.process_id,
                             initialization_timeout=config.initialization_timeout_s)


def is_writer() -> bool:
  """True on process 0, the only one that writes store records, logs and metadata."""
  return jax.process_index() == 0


def process_zero_only(fn: Callable[..., _R]) -> Callable[..., _R | None]:
  """Decorator: runs `fn` on process 0; other processes skip it and get None."""

  @functools.wraps(fn)
  def wrapper(*args: Any, **kwargs: Any) -> _R | None:
    return fn(*args, **kwargs) if is_writer() else None

  return wrapper


def barrier(name: str) -> None:
  """Blocks until every process reaches the barrier `name` (no-op with one process)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def process_rows(sharding: Sharding, global_shape: tuple[int, ...],
                 process_index: int | None = None) -> slice:
  """The rows [start, stop) of a `global_shape` array that a process's devices hold.

  Args:
    sharding: the array's sharding on the (global) mesh, e.g. `batch_sharding(...)`.
    global_shape: [N, ...], the global array's shape.
    process_index: the process (default: this one).

  Returns:
    A slice of the N rows; all N rows when the leading axis is not sharded.

  Raises:
    ValueError: when the process's rows are not one contiguous block (a mesh whose
      device order interleaves processes along the batch axes).
  """
  num_rows = global_shape[0]
  me = jax.process_index() if process_index is None else process_index
  blocks = set()
  for device, index in sharding.devices_indices_map(tuple(global_shape)).items():
    if device.process_index == me:
      blocks.add(index[0].indices(num_rows)[:2])
  if not blocks:
    raise ValueError(f"sharding {sharding} has no device of process {me}")
  ordered = sorted(blocks)
  for (_, stop), (start, _) in zip(ordered, ordered[1:], strict=False):
    if start != stop:
      raise ValueError(f"process {me} holds rows {ordered} of {num_rows}: not contiguous; "
                       "order the mesh's devices by process along the batch axes")
  return slice(ordered[0][0], ordered[-1][1])


def process_queries(sharding: Sharding, num_queries: int, rollouts_per_query: int) -> slice:
  """Queries [start, stop) whose K rollouts are this process's rows of the [B*K] batch.

  Row r of M's batch is rollout r % K of query r // K; group-relative advantages need
  all K rollouts of a query on one process, so the process's rows must be whole groups.

  Args:
    sharding: the sharding of a per-row [B*K] array on the global mesh (e.g.
      `batch_shardings(layout, B * K).advantages`).
    num_queries: B.
    rollouts_per_query: K.

  Raises:
    ValueError: when a process's rows split a group of K rollouts.
  """
  rows = process_rows(sharding, (num_queries * rollouts_per_query,))
  k = rollouts_per_query
  if rows.start % k or rows.stop % k:
    raise ValueError(f"process {jax.process_index()} holds rollouts [{rows.start}, "
                     f"{rows.stop}), which split the groups of K={k}; use B*K/processes "
                     "divisible by K")
  return slice(rows.start // k, rows.stop // k)


def global_batch(local: Any, shardings: Any, num_rows: int) -> Any:
  """Global [num_rows, ...] arrays from this process's rows (`process_rows`) of each leaf.

  Args:
    local: a pytree of host arrays holding this process's rows of each leaf.
    shardings: a matching pytree of shardings on the global mesh.
    num_rows: N, rows of the global batch.

  Returns:
    The pytree of global `jax.Array`s (no data moves between hosts).
  """

  def one(x, sharding):
    x = np.asarray(x)
    return jax.make_array_from_process_local_data(sharding, x, (num_rows,) + x.shape[1:])

  return jax.tree.map(one, local, shardings)


def assign_queries(rows_by_process: Sequence[slice], process: int,
                   rollouts_per_query: int) -> slice:
  """The queries [start, stop) that `process` rolls out, from every process's rows.

  Pure rule behind `rollout_queries`: a process's queries are those whose K rollouts
  are its rows; processes holding the same rows share those queries out in contiguous
  blocks, in process order, so each query is rolled out by exactly one process.

  Args:
    rows_by_process: the rows [start, stop) of the [B*K] batch each process holds.
    process: the process asking.
    rollouts_per_query: K.

  Raises:
    ValueError: when the rows split a group of K rollouts, or when a process would get
      no query (more processes hold the same rows than those rows hold queries).
  """
  k = rollouts_per_query
  rows = rows_by_process[process]
  if rows.start % k or rows.stop % k:
    raise ValueError(f"process {process} holds rollouts [{rows.start}, {rows.stop}), which "
                     f"split the groups of K={k}; use B*K/processes divisible by K")
  holders = [p for p, other in enumerate(rows_by_process) if other == rows]
  first, count = rows.start // k, (rows.stop - rows.start) // k
  if count < len(holders):
    raise ValueError(f"queries [{first}, {first + count}) are held by processes {holders}: "
                     "fewer queries than processes; shard the batch over the processes or "
                     f"use more queries per step")
  part = holders.index(process)
  return slice(first + count * part // len(holders), first + count * (part + 1) // len(holders))


def rollout_queries(sharding: Sharding, num_queries: int, rollouts_per_query: int) -> slice:
  """The queries this process runs rollouts for, each query on one process (collective-free).

  Args:
    sharding: the sharding of a per-row [B*K] array on the global mesh.
    num_queries: B.
    rollouts_per_query: K.

  Raises:
    ValueError: as `assign_queries`.
  """
  shape = (num_queries * rollouts_per_query,)
  rows = [process_rows(sharding, shape, p) for p in range(jax.process_count())]
  return assign_queries(rows, jax.process_index(), rollouts_per_query)


def allgather_bytes(payload: bytes) -> list[bytes]:
  """Every process's `payload`, in process order (collective: all processes call it)."""
  if jax.process_count() == 1:
    return [payload]
  data = np.frombuffer(payload, np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.int32(data.size))).reshape(-1)
  padded = np.zeros(max(int(sizes.max()), 1), np.uint8)
  padded[:data.size] = data
  gathered = np.asarray(multihost_utils.process_allgather(padded))
  return [gathered[p, :int(size)].tobytes() for p, size in enumerate(sizes)]


def broadcast_bytes(payload: bytes | None) -> bytes:
  """Process 0's `payload` on every process (collective; others may pass None)."""
  if jax.process_count() == 1:
    return payload if payload is not None else b""
  data = np.frombuffer(payload if is_writer() and payload is not None else b"", np.uint8)
  size = int(multihost_utils.broadcast_one_to_all(np.int32(data.size)))
  buffer = np.zeros(max(size, 1), np.uint8)
  buffer[:data.size] = data
  return np.asarray(multihost_utils.broadcast_one_to_all(buffer))[:size].tobytes()


def shard_host_batch(full: Any, shardings: Any) -> Any:
  """Global arrays from a host batch that every process holds in full.

  Each process feeds only its rows (`process_rows` of each leaf's sharding) to
  `jax.make_array_from_process_local_data`; the rest of its copy is not transferred.

  Args:
    full: a pytree of host arrays [N, ...], identical on every process.
    shardings: a matching pytree of shardings on the global mesh.
  """

  def one(x, sharding):
    x = np.asarray(x)
    rows = process_rows(sharding, x.shape)
    return jax.make_array_from_process_local_data(sharding, x[rows], x.shape)

  return jax.tree.map(one, full, shardings)


def local_replica(tree: Any, shardings: Any) -> Any:
  """A copy of global arrays placed on this process's devices (collective).

  Every process gathers the full value of each leaf (`process_allgather`) and puts it
  with `shardings`, a matching pytree of shardings over its local devices: what a
  per-process sampler reads, since a jitted program over non-addressable arrays would
  need every process to feed it the same inputs.
  """
  gathered = multihost_utils.process_allgather(tree, tiled=True)
  return jax.device_put(gathered, shardings)


def broadcast_arrays(arrays: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
  """Process 0's named host arrays on every process (collective; others pass None)."""
  buffer = io.BytesIO()
  if is_writer() and arrays is not None:
    np.savez(buffer, **arrays)
  with np.load(io.BytesIO(broadcast_bytes(buffer.getvalue())), allow_pickle=False) as data:
    return {name: data[name] for name in data.files}
