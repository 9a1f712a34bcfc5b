"""The machine records of a run (`metrics/machine.py`): cpuinfo parsing, records, labels."""

import json

import jax
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.metrics import machine
from mgrpo_jax.store.folder import LocalFolder

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw amx_tile

processor\t: 1
model name\t: Another CPU
flags\t\t: fpu sse4_2
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd sve i8mm bf16
CPU implementer\t: 0x41
"""


def _description(**changes):
  """A describe() dict of a 2-core AVX-512 CPU machine, with fields replaced."""
  description = {"python": "3.11.2",
                 "packages": {"jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8",
                              "optax": "0.2.8", "orbax-checkpoint": "0.12.8", "numpy": "2.4.6"},
                 "backend": "cpu", "devices": ["cpu"], "device_count": 1,
                 "cpu": {"arch": "x86_64", "model": "Intel(R) Xeon(R) Processor",
                         "isa": ["sse4_2", "avx", "avx2", "fma", "avx512f"], "cores": 2}}
  for key, value in changes.items():
    node = description
    *parents, last = key.split(".")
    for part in parents:
      node = node[part]
    node[last] = value
  return description


def test_cpuinfo_gives_the_first_processor_s_model_and_isa_in_a_fixed_order():
  assert machine.cpu_from_cpuinfo(X86) == {
      "model": "Intel(R) Xeon(R) Processor",
      "isa": ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "amx_tile"]}
  assert machine.cpu_from_cpuinfo(ARM) == {"model": "", "isa": ["asimd", "sve", "bf16", "i8mm"]}
  assert machine.cpu_from_cpuinfo("") == {"model": "", "isa": []}


@given(st.text(alphabet=st.characters(blacklist_characters=":\n\r\x0b\x0c\x1c\x1d\x1e\x85"
                                      "\u2028\u2029", blacklist_categories=("Cs",)),
               min_size=1).map(str.strip).filter(bool),
       st.sets(st.sampled_from(machine.ISA_FEATURES)),
       st.sets(st.sampled_from(("fpu", "vme", "ht", "lm", "nx"))))
def test_cpuinfo_recovers_any_model_and_feature_set(model, isa, other):
  flags = " ".join(sorted(isa | other))
  text = f"processor\t: 0\nmodel name\t: {model}\nflags\t\t: {flags}\n\nprocessor\t: 1\n"
  parsed = machine.cpu_from_cpuinfo(text)
  assert parsed["model"] == model
  assert parsed["isa"] == [f for f in machine.ISA_FEATURES if f in isa]


def test_describe_names_this_process_s_backend_and_jax():
  description = machine.describe()
  json.dumps(description)  # JSON-ready
  assert description["backend"] == jax.default_backend()
  assert description["packages"]["jax"] == jax.__version__
  assert description["device_count"] == len(jax.devices()) >= 1
  assert description["cpu"]["cores"] >= 1
  assert set(description["cpu"]["isa"]) <= set(machine.ISA_FEATURES)


def test_labels_name_the_cpu_and_its_vector_isa_or_the_accelerators():
  assert machine.label(_description()) == (
      "cpu: Intel(R) Xeon(R) Processor x86_64 (avx2 avx512f), 2 cores; jax 0.10.2")
  gpu = _description(backend="gpu", devices=["NVIDIA H200"], device_count=1)
  assert machine.label(gpu) == "gpu: NVIDIA H200 x1; jax 0.10.2"


def test_a_role_s_record_grows_only_when_the_numerics_change(tmp_path):
  folder = LocalFolder(tmp_path)
  path = tmp_path / "machines" / "main_rl.json"
  assert machine.record(folder, "main_rl", _description()) == []
  assert len(json.loads(path.read_text())) == 1
  # Another Python or flax (the same compiled programs): the same machine for the numbers.
  same = _description(python="3.12.1", **{"packages.flax": "0.13.0", "cpu.cores": 16})
  assert machine.record(folder, "main_rl", same) == []
  assert json.loads(path.read_text()) == [_description()]
  other = _description(**{"cpu.isa": ["sse4_2", "avx", "avx2", "fma"], "packages.jaxlib": "0.11.0"})
  assert machine.record(folder, "main_rl", other) == ["cpu.isa", "packages.jaxlib"]
  assert json.loads(path.read_text()) == [_description(), other]
  assert machine.record(folder, "main_rl", other) == []  # compared with the last one
  assert len(json.loads(path.read_text())) == 2


def test_a_damaged_record_is_named_and_kept(tmp_path):
  path = tmp_path / "machines" / "sub_rl.json"
  path.parent.mkdir()
  path.write_text('{"not": "a list"}')
  with pytest.raises(ValueError, match=r"machines/sub_rl\.json: not a list"):
    machine.record(LocalFolder(tmp_path), "sub_rl", _description())
  path.write_text("[{")
  with pytest.raises(ValueError, match=r"machines/sub_rl\.json: not JSON"):
    machine.read_labels(LocalFolder(tmp_path))
  assert path.read_text() == "[{"


def test_the_report_line_names_one_machine_or_each_with_its_roles(tmp_path):
  folder = LocalFolder(tmp_path)
  assert machine.read_labels(folder) == {} and machine.computed_on({}) == ""
  for role in ("main_warm_start", "sub_rl", "main_rl"):
    machine.record(folder, role, _description())
  one = machine.label(_description())
  assert machine.read_labels(folder) == {"main_rl": [one], "main_warm_start": [one],
                                         "sub_rl": [one]}
  assert machine.computed_on(machine.read_labels(folder)) == f"computed on: {one}"
  gpu = _description(backend="gpu", devices=["NVIDIA H200"])
  machine.record(folder, "main_rl", gpu)  # resumed on a GPU
  assert machine.computed_on(machine.read_labels(folder)) == (
      "computed on several machines (float results differ between them): "
      f"{one} (main_rl, main_warm_start, sub_rl); gpu: NVIDIA H200 x1; jax 0.10.2 (main_rl)")
