"""The environment of each child of `--slice=all`: disjoint shares of the host's
accelerators for concurrent children, the user's own split kept, found without JAX."""

from __future__ import annotations

import pathlib

import pytest

from mgrpo_jax.slices.child_env import (
  GPU_MEMORY_SHARE,
  TPU_BASE_PORT,
  Accelerators,
  cannot_share,
  child_environments,
  detect_accelerators,
)

BASE = {"PATH": "/usr/bin", "PYTHONUNBUFFERED": "1"}


def _dev(tmp_path: pathlib.Path, *names: str) -> pathlib.Path:
  for name in names:
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).touch()
  return tmp_path


def test_detects_tpu_chips_gpus_and_cpu_from_device_files(tmp_path):
  assert detect_accelerators({}, _dev(tmp_path / "a", "accel1", "accel0", "accel3",
                                      "accel2", "null")) == Accelerators(
                                          "tpu", ("0", "1", "2", "3"))
  assert detect_accelerators({}, _dev(tmp_path / "b", "vfio/0", "vfio/1", "vfio/vfio")
                             ) == Accelerators("tpu", ("0", "1"))
  gpus = _dev(tmp_path / "c", "nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm")
  assert detect_accelerators({}, gpus) == Accelerators("gpu", ("0", "1"))
  assert detect_accelerators({"CUDA_VISIBLE_DEVICES": "1"}, gpus) == Accelerators("gpu", ("1",))
  assert detect_accelerators({"JAX_PLATFORMS": "cpu"}, gpus) == Accelerators("cpu")
  assert detect_accelerators({}, _dev(tmp_path / "d", "null")) == Accelerators("cpu")


def test_two_slices_on_a_tpu_host_get_disjoint_chip_blocks():
  envs = child_environments(Accelerators("tpu", ("0", "1", "2", "3")), ("sub", "main"), BASE)
  assert envs["sub"]["TPU_VISIBLE_CHIPS"] == "0,1" and envs["main"]["TPU_VISIBLE_CHIPS"] == "2,3"
  for i, name in enumerate(("sub", "main")):
    env = envs[name]
    assert env["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,2,1"
    assert env["TPU_PROCESS_BOUNDS"] == "1,1,1"
    assert env["TPU_MESH_CONTROLLER_PORT"] == str(TPU_BASE_PORT + i)
    assert env["TPU_MESH_CONTROLLER_ADDRESS"] == f"localhost:{TPU_BASE_PORT + i}"
    assert env["PATH"] == "/usr/bin"
  eight = child_environments(Accelerators("tpu", tuple(map(str, range(8)))), ("a", "b"), BASE)
  assert eight["b"]["TPU_VISIBLE_CHIPS"] == "4,5,6,7"
  assert eight["b"]["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "2,2,1"


def test_a_tpu_host_that_cannot_be_split_is_refused_naming_the_processes():
  with pytest.raises(ValueError, match="1 chips cannot be split evenly between the 2 "
                                       "processes sub, main"):
    child_environments(Accelerators("tpu", ("0",)), ("sub", "main"), BASE)
  with pytest.raises(ValueError, match="3 chips"):
    child_environments(Accelerators("tpu", ("0", "1", "2")), ("sub", "main"), BASE)


def test_a_host_whose_chips_cannot_be_shared_runs_the_slices_in_one_process():
  """`--slice=all` colocates where `child_environments` would refuse: one or three TPU
  chips, unless the user split them; GPUs (memory shares) and CPUs never need it."""
  for chips, refused in ((1, True), (2, False), (3, True), (4, False), (8, False)):
    tpu = Accelerators("tpu", tuple(map(str, range(chips))))
    assert cannot_share(tpu, 2, BASE) is refused
    assert cannot_share(tpu, 1, BASE) is False
  one_chip = Accelerators("tpu", ("0",))
  assert cannot_share(one_chip, 2, {**BASE, "TPU_VISIBLE_CHIPS": "0"}) is False
  assert cannot_share(Accelerators("gpu", ("0",)), 2, BASE) is False
  assert cannot_share(Accelerators("cpu"), 2, BASE) is False


def test_gpus_are_split_or_a_shared_gpus_memory_is():
  four = child_environments(Accelerators("gpu", ("0", "1", "2", "3")), ("sub", "main"), BASE)
  assert (four["sub"]["CUDA_VISIBLE_DEVICES"], four["main"]["CUDA_VISIBLE_DEVICES"]) == (
      "0,1", "2,3")
  assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in four["main"]
  three = child_environments(Accelerators("gpu", ("0", "1", "2")), ("sub", "main"), BASE)
  assert (three["sub"]["CUDA_VISIBLE_DEVICES"], three["main"]["CUDA_VISIBLE_DEVICES"]) == (
      "0", "1")
  shared = child_environments(Accelerators("gpu", ("0",)), ("sub", "main"), BASE)
  for env in shared.values():
    assert float(env["XLA_PYTHON_CLIENT_MEM_FRACTION"]) == pytest.approx(GPU_MEMORY_SHARE / 2,
                                                                         abs=1e-3)
    assert "CUDA_VISIBLE_DEVICES" not in env


@pytest.mark.parametrize("accelerators, user", [
    (Accelerators("tpu", ("0", "1", "2", "3")), {"TPU_VISIBLE_CHIPS": "0"}),
    (Accelerators("gpu", ("0",)), {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".3"}),
    (Accelerators("gpu", ("0",)), {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
])
def test_the_users_own_split_is_kept(accelerators, user):
  envs = child_environments(accelerators, ("sub", "main"), {**BASE, **user})
  assert envs["sub"] == envs["main"] == {**BASE, **user}


@pytest.mark.parametrize("accelerators", [Accelerators("cpu"), Accelerators("tpu", ("0",)),
                                          Accelerators("gpu", ("0",))])
def test_a_single_child_or_a_cpu_host_gets_the_environment_unchanged(accelerators):
  assert child_environments(accelerators, ("eval",), BASE) == {"eval": BASE}
  assert child_environments(Accelerators("cpu"), ("sub", "main"), BASE) == {
      "sub": BASE, "main": BASE}
