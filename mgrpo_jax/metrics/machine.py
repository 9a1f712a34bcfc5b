"""The machine and software each process of a run computes on, recorded in its workdir.

A run's numbers are reproducible to the digit only where they were computed. Two runs
of one config on one machine give the same table; on another machine the same code and
config gave other digits: the demo's seed 0 went 0.525 -> 0.805 held-out accuracy on one
2-core machine and 0.520 -> 0.780 on another (docs/RESULTS.md), because a float that
rounds otherwise flips a sampled token, and RL compounds it. XLA compiles each program
for the host (its instruction sets and the kernels it picks for them) and the result
depends on the jax/jaxlib version, so both are recorded; which of them differed between
those two machines was not isolated.

So every computing process (`launch/tpu_run.py`: a slice's warm start or RL, an
evaluation) records where it ran under `<workdir>/machines/<role>.json`, a list of
`describe()` dicts, one more whenever a launch of that role (a resume) runs on a machine
whose `numerics(...)` differ from the last; the report (`report/summary.txt`) and
`launch/compare.py` name the machines, so numbers from different ones are not compared
as if they were one run's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import platform
from collections.abc import Mapping, Sequence
from typing import Any

MACHINES_FOLDER = "machines"
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
# The packages whose version changes the compiled programs (the others change the
# Python around them).
NUMERIC_PACKAGES = ("jax", "jaxlib")
# CPU features that change which vector kernels XLA emits (x86 `flags`, Arm `Features`
# of /proc/cpuinfo).
ISA_FEATURES = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                "amx_int8", "asimd", "sve", "sve2", "bf16", "i8mm")
_CPUINFO = pathlib.Path("/proc/cpuinfo")


def cpu_from_cpuinfo(text: str) -> dict[str, Any]:
  """The first processor's model name and its `ISA_FEATURES` in /proc/cpuinfo `text`.

  Returns:
    {"model": str ("" when absent), "isa": [feature, ...] in `ISA_FEATURES` order}.
  """
  model, features = "", set()
  for line in text.splitlines():
    name, sep, value = line.partition(":")
    if not sep:
      if model or features:
        break  # the end of the first processor's block
      continue
    name = name.strip().lower()
    if name in ("model name", "cpu model") and not model:
      model = value.strip()
    elif name in ("flags", "features") and not features:
      features = set(value.split())
  return {"model": model, "isa": [f for f in ISA_FEATURES if f in features]}


def _package_version(name: str) -> str:
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return ""


def describe() -> dict[str, Any]:
  """This process's machine and software: JSON-ready, with the JAX backend initialized.

  Returns:
    {"python", "packages": {name: version ("" if absent)}, "backend" (jax's default),
     "devices": sorted device kinds, "device_count", "cpu": {"arch", "model", "isa",
     "cores"}}.
  """
  import jax

  cpu = cpu_from_cpuinfo(_CPUINFO.read_text()) if _CPUINFO.is_file() else {
      "model": platform.processor(), "isa": []}
  devices = jax.devices()
  return {
      "python": platform.python_version(),
      "packages": {name: _package_version(name) for name in PACKAGES},
      "backend": jax.default_backend(),
      "devices": sorted({str(d.device_kind) for d in devices}),
      "device_count": len(devices),
      "cpu": {"arch": platform.machine(), "model": cpu["model"] or platform.processor(),
              "isa": cpu["isa"], "cores": os.cpu_count() or 0},
  }


def numerics(description: Mapping[str, Any]) -> dict[str, Any]:
  """The part of a `describe()` dict that decides float results (module docstring)."""
  cpu = description.get("cpu", {})
  packages = description.get("packages", {})
  return {"packages": {p: packages.get(p, "") for p in NUMERIC_PACKAGES},
          "backend": description.get("backend", ""), "devices": description.get("devices", []),
          "cpu": {"arch": cpu.get("arch", ""), "model": cpu.get("model", ""),
                  "isa": cpu.get("isa", [])}}


def label(description: Mapping[str, Any]) -> str:
  """One line naming a machine, e.g. `cpu: Intel(R) Xeon(R) Processor x86_64 (avx2 avx512f),
  2 cores; jax 0.10.2`, or `gpu: NVIDIA H200 x1; jax 0.10.2`."""
  cpu = description.get("cpu", {})
  jax_version = description.get("packages", {}).get("jax", "")
  if description.get("backend") == "cpu":
    isa = [f for f in ("avx2", "avx512f", "amx_bf16", "sve") if f in cpu.get("isa", [])]
    where = (f"cpu: {cpu.get('model') or 'unknown'} {cpu.get('arch', '')}".rstrip()
             + (f" ({' '.join(isa)})" if isa else "") + f", {cpu.get('cores', 0)} cores")
  else:
    where = (f"{description.get('backend', '?')}: {', '.join(description.get('devices', []))}"
             f" x{description.get('device_count', 0)}")
  return f"{where}; jax {jax_version}"


def record(folder, role: str, description: Mapping[str, Any]) -> list[str]:
  """Adds `description` to `<folder>/machines/<role>.json` unless its numerics equal the
  last one's there.

  Args:
    folder: the run's workdir as a `store.folder.Folder` (local or gs://; `metrics` does
      not import the store).
    role: the process's part of the run, e.g. "main_rl", "sub_warm_start", "all_eval_after".
    description: `describe()` of this process.

  Returns:
    The numerics fields (dotted) in which this machine differs from the one that last ran
    `role`; empty for a first launch or the same machine.

  Raises:
    ValueError: naming the file, when it holds something other than a list of
      descriptions (it is left as it is).
  """
  name = f"{MACHINES_FOLDER}/{role}.json"
  data = folder.read(name)
  history = [] if data is None else _history(data, f"{folder.uri.rstrip('/')}/{name}")
  changed = _differences(numerics(history[-1]), numerics(description)) if history else []
  if not history or changed:
    folder.write(name, json.dumps(history + [dict(description)], indent=1).encode())
  return changed


def _history(data: bytes, where: str) -> list[dict[str, Any]]:
  try:
    history = json.loads(data)
  except ValueError as e:
    raise ValueError(f"{where}: not JSON ({e}); move it away to record this machine") from None
  if not isinstance(history, list) or not all(isinstance(d, dict) for d in history):
    raise ValueError(f"{where}: not a list of machine descriptions; move it away to record "
                     "this machine")
  return history


def _differences(before: Mapping[str, Any], now: Mapping[str, Any], prefix: str = ""
                 ) -> list[str]:
  out = []
  for key in sorted(before.keys() | now.keys()):
    a, b = before.get(key), now.get(key)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      out += _differences(a, b, f"{prefix}{key}.")
    elif a != b:
      out.append(f"{prefix}{key}")
  return out


def read_labels(folder) -> dict[str, list[str]]:
  """`{role: [label of each recorded machine, oldest first]}` under a run's workdir (a
  `store.folder.Folder`, local or gs://); empty when it has none (e.g. a run of an
  older version)."""
  prefix = f"{MACHINES_FOLDER}/"
  return _labels((name.removeprefix(prefix), folder.read(name) or b"[]",
                  f"{folder.uri.rstrip('/')}/{name}")
                 for name in folder.list(prefix) if name.endswith(".json"))


def read_labels_at(run: pathlib.Path) -> dict[str, list[str]]:
  """`read_labels` of a local run folder."""
  return _labels((path.name, path.read_bytes(), str(path))
                 for path in sorted(pathlib.Path(run, MACHINES_FOLDER).glob("*.json")))


def _labels(files) -> dict[str, list[str]]:
  """`files`: (file name, its bytes, where it is for errors) per role."""
  return {name.removesuffix(".json"): [label(d) for d in _history(data, where)]
          for name, data, where in files}


def owners_by_machine(labels_of: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
  """`{machine label: [owner, ...]}` from `{owner: [machine label, ...]}` (an owner is a
  role of a run, or a run), in first-seen order, each owner once per machine."""
  owners: dict[str, list[str]] = {}
  for owner, machines in labels_of.items():
    for machine in machines:
      names = owners.setdefault(machine, [])
      if owner not in names:
        names.append(owner)
  return owners


def computed_on(labels: Mapping[str, Sequence[str]]) -> str:
  """The report's line: `computed on: <label>` when every role ran on one machine, else
  each machine followed by the roles that ran on it; "" without records."""
  roles_of = owners_by_machine(labels)
  if not roles_of:
    return ""
  if len(roles_of) == 1:
    return f"computed on: {next(iter(roles_of))}"
  return "computed on several machines (float results differ between them): " + "; ".join(
      f"{machine} ({', '.join(roles)})" for machine, roles in roles_of.items())
