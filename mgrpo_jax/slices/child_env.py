"""Each child process's share of the host's accelerators, set in its environment.

`--slice=all` starts its stages as child processes of one host, some at the same time
(the two agents' warm starts, the two slices of the RL stage), while the parent itself
runs on the CPU backend only (`launch/tpu_run.py`), so it never holds a device. A JAX
process takes every device it sees, so concurrent children are given disjoint shares:

- TPU: a chip belongs to one process at a time. The host's chips are split into
  contiguous, equal blocks, one per process (`TPU_VISIBLE_CHIPS`, the block's shape in
  `TPU_CHIPS_PER_PROCESS_BOUNDS`, `TPU_PROCESS_BOUNDS=1,1,1`: processes that do not
  communicate), each with its own mesh controller port. A host with fewer chips than
  processes, or a count that does not split evenly (one chip, three), cannot be shared
  (`cannot_share`): `--slice=all` then runs the RL slices in one process
  (`colocated.py`) and the warm starts one after the other.
- GPU: with at least as many GPUs as processes (those of `CUDA_VISIBLE_DEVICES` where
  set), `CUDA_VISIBLE_DEVICES` splits them in contiguous, equal blocks (a remainder is
  left unused); with fewer (one GPU shared by both slices), each process preallocates
  its share of the memory (`XLA_PYTHON_CLIENT_MEM_FRACTION` = `GPU_MEMORY_SHARE` /
  processes) instead of JAX's default 75% each.
- CPU: nothing to split.

An explicit choice of the user wins: `TPU_VISIBLE_CHIPS` (or `TPU_VISIBLE_DEVICES`) set,
or, on a shared GPU, `XLA_PYTHON_CLIENT_MEM_FRACTION` set or preallocation turned off
(`XLA_PYTHON_CLIENT_PREALLOCATE=false`) leave the environment as it is. A single child
(an evaluation stage) gets the environment unchanged: the whole host.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from collections.abc import Mapping, Sequence

# The fraction of a shared GPU's memory the processes preallocate together; the rest is
# left to the CUDA context of each process and to cuDNN/cuBLAS workspaces.
GPU_MEMORY_SHARE = 0.9
# Chips per process -> TPU_CHIPS_PER_PROCESS_BOUNDS (x, y, z) of a TPU host's 2D chips.
_TPU_BLOCKS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}
# Mesh controller ports of the children: one each, from this one up.
TPU_BASE_PORT = 8476


@dataclasses.dataclass(frozen=True)
class Accelerators:
  """The host's accelerators: `platform` "tpu", "gpu" or "cpu", and their ids."""

  platform: str
  ids: tuple[str, ...] = ()


def _numbered(folder: pathlib.Path, pattern: str) -> tuple[str, ...]:
  if not folder.is_dir():
    return ()
  found = [m.group(1) for p in folder.iterdir() if (m := re.fullmatch(pattern, p.name))]
  return tuple(str(i) for i in sorted(int(n) for n in found))


def detect_accelerators(env: Mapping[str, str] = os.environ,
                        dev: pathlib.Path = pathlib.Path("/dev")) -> Accelerators:
  """The host's accelerators, found without starting a JAX backend.

  TPU chips are the `/dev/accel<N>` (TPU v4, v5e, v6e) or `/dev/vfio/<N>` (v5p)
  devices; GPUs the `/dev/nvidia<N>` ones, or `CUDA_VISIBLE_DEVICES` where set.
  `JAX_PLATFORMS=cpu` means CPU whatever the host has.
  """
  platforms = env.get("JAX_PLATFORMS", "").lower()
  if platforms.split(",")[0] == "cpu":
    return Accelerators("cpu")
  chips = _numbered(dev, r"accel(\d+)") or _numbered(dev / "vfio", r"(\d+)")
  if chips:
    return Accelerators("tpu", chips)
  gpus = _numbered(dev, r"nvidia(\d+)")
  if gpus:
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return Accelerators("gpu", tuple(v for v in visible.split(",") if v)
                        if visible is not None else gpus)
  return Accelerators("cpu")


def _blocks(ids: Sequence[str], count: int) -> list[tuple[str, ...]]:
  size = len(ids) // count
  return [tuple(ids[i * size:(i + 1) * size]) for i in range(count)]


def _user_split(env: Mapping[str, str]) -> bool:
  return "TPU_VISIBLE_CHIPS" in env or "TPU_VISIBLE_DEVICES" in env


def _tpu_splits(num_chips: int, processes: int) -> bool:
  per_process = num_chips // processes
  return per_process > 0 and num_chips % processes == 0 and per_process in _TPU_BLOCKS


def cannot_share(accelerators: Accelerators, processes: int, env: Mapping[str, str]) -> bool:
  """Whether `processes` concurrent children cannot each get a share: a TPU host whose
  chips do not split evenly between them (one chip, three), unless the user split them."""
  return (processes > 1 and accelerators.platform == "tpu" and not _user_split(env)
          and not _tpu_splits(len(accelerators.ids), processes))


def _tpu_shares(ids: Sequence[str], names: Sequence[str], env: Mapping[str, str]
                ) -> dict[str, dict[str, str]]:
  if _user_split(env):
    return {}
  per_process = len(ids) // len(names)
  if not _tpu_splits(len(ids), len(names)):
    raise ValueError(f"a TPU host with {len(ids)} chips cannot be split evenly between the "
                     f"{len(names)} processes {', '.join(names)} (one process per chip): "
                     "run them one at a time or in one process (serving.colocate), set "
                     "TPU_VISIBLE_CHIPS for each, or run the slices on separate hosts")
  return {name: {"TPU_VISIBLE_CHIPS": ",".join(block),
                 "TPU_CHIPS_PER_PROCESS_BOUNDS": _TPU_BLOCKS[per_process],
                 "TPU_PROCESS_BOUNDS": "1,1,1",
                 "TPU_MESH_CONTROLLER_ADDRESS": f"localhost:{TPU_BASE_PORT + i}",
                 "TPU_MESH_CONTROLLER_PORT": str(TPU_BASE_PORT + i)}
          for i, (name, block) in enumerate(zip(names, _blocks(ids, len(names)), strict=True))}


def _gpu_shares(ids: Sequence[str], names: Sequence[str], env: Mapping[str, str]
                ) -> dict[str, dict[str, str]]:
  if len(ids) >= len(names):
    return {name: {"CUDA_VISIBLE_DEVICES": ",".join(block)}
            for name, block in zip(names, _blocks(ids, len(names)), strict=True)}
  if ("XLA_PYTHON_CLIENT_MEM_FRACTION" in env
      or env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() in ("false", "0")):
    return {}
  fraction = f"{GPU_MEMORY_SHARE / len(names):.3f}"
  return {name: {"XLA_PYTHON_CLIENT_MEM_FRACTION": fraction} for name in names}


def child_environments(accelerators: Accelerators, names: Sequence[str],
                       env: Mapping[str, str]) -> dict[str, dict[str, str]]:
  """{child name: its environment}: `env` plus its share of `accelerators` (module
  docstring) when several children run at once; a split the user chose in `env` is kept.

  Raises:
    ValueError: a TPU host whose chips cannot be split between the children.
  """
  shares: dict[str, dict[str, str]] = {}
  if len(names) > 1 and accelerators.platform == "tpu":
    shares = _tpu_shares(accelerators.ids, names, env)
  elif len(names) > 1 and accelerators.platform == "gpu":
    shares = _gpu_shares(accelerators.ids, names, env)
  return {name: {**env, **shares.get(name, {})} for name in names}
