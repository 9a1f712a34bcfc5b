"""The Colab demo notebook, executed headless (nbclient) on its shortened schedule.

`notebooks/mgrpo_demo.ipynb` runs with `MGRPO_NOTEBOOK_QUICK=1` (4 RL steps, a small warm
start and evaluation) from the notebooks/ folder, writing its run under a temporary
`MGRPO_NOTEBOOK_WORKDIR`. The kernel is a `python3` kernel spec, written to a temporary
JUPYTER_PATH, that starts this interpreter, so the notebook sees the same installation as
the tests. The checks compare what the notebook showed with the files the run wrote.

The install cell's helpers (the cell tagged `install-helpers`: definitions only) run here
without a kernel: the pip command chosen for each runtime kind and package source, the
runtime detected from device files, the extras read from a wheel or a checkout. The
README's Colab badge and the demo time the notebook quotes are checked against the files.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import pathlib
import re
import sys
import zipfile

import nbformat
import pytest
from nbclient import NotebookClient

from mgrpo_jax.metrics import read_metrics
from mgrpo_jax.metrics.report import summary_table

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "mgrpo_demo.ipynb"
README = ROOT / "README.md"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# The QUICK schedule of the notebook's SCHEDULE cell.
QUICK_STEPS = 4
QUICK_EVAL_QUESTIONS = 4
QUICK_EVAL_SAMPLES = 1
SUMMARY_KEYS = {"num_questions", "num_rollouts", "accuracy", "accuracy_ci95",
                "accuracy_by_type", "format_rate", "sub_calls_mean", "tool_calls_mean",
                "examples"}
EXAMPLE_KEYS = {"question", "gold", "correct", "main", "sub"}


def write_kernel_spec(jupyter_path: pathlib.Path) -> None:
  """A `python3` kernel spec under `jupyter_path` that runs this interpreter's ipykernel."""
  folder = jupyter_path / "kernels" / "python3"
  folder.mkdir(parents=True)
  spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
          "display_name": "Python 3 (tests)", "language": "python"}
  (folder / "kernel.json").write_text(json.dumps(spec))


def text_outputs(notebook) -> str:
  """All stream and text/plain outputs of the executed notebook, concatenated."""
  parts = []
  for cell in notebook.cells:
    for output in cell.get("outputs", []):
      if output.output_type == "stream":
        parts.append(output.text)
      elif "data" in output and "text/plain" in output.data:
        parts.append(output.data["text/plain"])
  return "".join(parts)


def png_outputs(notebook) -> list[bytes]:
  return [base64.b64decode(output.data["image/png"])
          for cell in notebook.cells for output in cell.get("outputs", [])
          if "data" in output and "image/png" in output.data]


def test_committed_notebook_is_valid_with_outputs_cleared():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(notebook)
  assert notebook.nbformat == 4
  assert notebook.metadata.kernelspec.name == "python3"
  code_cells = [c for c in notebook.cells if c.cell_type == "code"]
  assert code_cells, "the notebook has no code cells"
  for cell in code_cells:
    assert cell.outputs == [] and cell.execution_count is None, f"cell {cell.id} has outputs"


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory):
  """(executed notebook, run folder): one headless run shared by the checks below."""
  tmp = tmp_path_factory.mktemp("notebook")
  workdir = tmp / "run"
  write_kernel_spec(tmp / "jupyter")
  with pytest.MonkeyPatch.context() as env:
    env.setenv("MGRPO_NOTEBOOK_QUICK", "1")
    env.setenv("MGRPO_NOTEBOOK_WORKDIR", str(workdir))
    env.setenv("JUPYTER_PATH", str(tmp / "jupyter"))
    env.setenv("JUPYTER_RUNTIME_DIR", str(tmp / "runtime"))
    env.setenv("IPYTHONDIR", str(tmp / "ipython"))
    # The notebook runs on the host's devices, as a user's would (not the 8 simulated
    # CPU devices of tests/conftest.py).
    env.delenv("XLA_FLAGS", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, kernel_name="python3", timeout=600,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
  return notebook, workdir


@pytest.mark.slow
def test_notebook_runs_without_errors_on_this_interpreter(executed):
  notebook, _ = executed
  errors = [output for cell in notebook.cells for output in cell.get("outputs", [])
            if output.output_type == "error"]
  assert not errors, errors
  text = text_outputs(notebook)
  assert f"Python: {sys.executable}\n" in text
  assert f"repository: {ROOT}\n" in text
  assert "JAX backend: " in text
  helpers = install_helpers()
  device_files = [f for pattern in helpers["DEVICE_FILES"] for f in glob.glob(pattern)]
  assert f"runtime: {helpers['runtime_kind'](device_files, os.environ)}\n" in text


@pytest.mark.slow
def test_notebook_shows_the_summary_table_of_the_run(executed):
  notebook, workdir = executed
  before = json.loads((workdir / "eval" / "warm_start.json").read_text())
  after = json.loads((workdir / "eval" / "final.json").read_text())
  table = summary_table(before, after)
  assert "held-out accuracy" in table and "after RL" in table
  assert table in text_outputs(notebook)


@pytest.mark.slow
def test_notebook_shows_the_run_plots_and_its_own(executed):
  notebook, workdir = executed
  files = [(workdir / "report" / name).read_bytes() for name in ("rewards.png", "accuracy.png")]
  for data in files:
    assert data.startswith(PNG_MAGIC)
  shown = png_outputs(notebook)
  assert shown[:2] == files
  assert len(shown) == 3  # + the matplotlib figure drawn from metrics.jsonl
  assert shown[2].startswith(PNG_MAGIC)


@pytest.mark.slow
def test_run_wrote_the_quick_schedule(executed):
  _, workdir = executed
  for agent in ("main", "sub"):
    rows = read_metrics(workdir / "logs" / agent / "metrics.jsonl")
    assert [row["step"] for row in rows] == list(range(QUICK_STEPS)), agent
    assert all(f"{agent}/reward_mean" in row for row in rows), agent
  for label in ("warm_start", "final"):
    summary = json.loads((workdir / "eval" / f"{label}.json").read_text())
    assert SUMMARY_KEYS <= summary.keys(), label
    assert summary["num_questions"] == QUICK_EVAL_QUESTIONS
    assert summary["num_rollouts"] == QUICK_EVAL_QUESTIONS * QUICK_EVAL_SAMPLES
    assert 0.0 <= summary["accuracy"] <= 1.0
    assert summary["examples"] and all(EXAMPLE_KEYS <= e.keys() for e in summary["examples"])


@pytest.mark.slow
def test_notebook_prints_an_example_trajectory(executed):
  notebook, workdir = executed
  examples = json.loads((workdir / "eval" / "final.json").read_text())["examples"]
  shown = next((e for e in examples if e["sub"]), examples[0])
  text = text_outputs(notebook)
  assert f"Question: {shown['question']}\n" in text
  assert shown["main"] in text
  assert "===== S, the sub-agent" in text


def install_helpers() -> dict:
  """The namespace of the notebook's `install-helpers` cell (it defines, installs nothing)."""
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  (cell,) = [c for c in notebook.cells if "install-helpers" in c.metadata.get("tags", [])]
  namespace: dict = {}
  exec(compile(cell.source, "install-helpers", "exec"), namespace)
  return namespace


def test_install_source_is_the_first_code_cells_setting_left_empty():
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  first = next(c for c in notebook.cells if c.cell_type == "code")
  assert "install-helpers" in first.metadata.tags
  assert 'INSTALL_SOURCE = ""  # @param {type:"string"}' in first.source.splitlines()
  assert install_helpers()["INSTALL_SOURCE"] == ""


@pytest.mark.parametrize("kind, extras, expected", [
    ("gpu", {"cuda", "tpu"}, ["-e", "/src/mgrpo[cuda]"]),
    ("gpu", {"tpu"}, ["-e", "/src/mgrpo", "jax[cuda12]"]),
    ("tpu", {"cuda", "tpu"}, ["-e", "/src/mgrpo[tpu]"]),
    ("tpu", set(), ["-e", "/src/mgrpo", "jax[tpu]"]),
    ("cpu", {"cuda", "tpu"}, ["-e", "/src/mgrpo"]),
])
def test_install_command_of_a_checkout_per_runtime(kind, extras, expected):
  command = install_helpers()["install_command"](kind, "/src/mgrpo", extras, python="py")
  assert command == ["py", "-m", "pip", "install", "-q", *expected]


@pytest.mark.parametrize("kind, extras, expected", [
    ("gpu", {"cuda"}, ["dist/m-0.1-py3-none-any.whl[cuda]"]),
    ("gpu", set(), ["dist/m-0.1-py3-none-any.whl", "jax[cuda12]"]),
    ("tpu", {"tpu"}, ["dist/m-0.1-py3-none-any.whl[tpu]"]),
    ("cpu", {"tpu"}, ["dist/m-0.1-py3-none-any.whl"]),
])
def test_install_command_of_a_wheel_per_runtime(kind, extras, expected):
  command = install_helpers()["install_command"](kind, "dist/m-0.1-py3-none-any.whl", extras,
                                                 python="py")
  assert command == ["py", "-m", "pip", "install", "-q", *expected]


def test_install_command_rejects_an_unknown_runtime_naming_it():
  with pytest.raises(ValueError, match=r"runtime kind must be one of .*'cpu'.*got 'npu'"):
    install_helpers()["install_command"]("npu", "/src/mgrpo", set())


@pytest.mark.parametrize("device_files, environ, expected", [
    (["/dev/nvidia0", "/dev/nvidia1"], {}, "gpu"),
    (["/dev/accel0"], {}, "tpu"),
    (["/dev/vfio/0"], {}, "tpu"),
    ([], {"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, "tpu"),
    ([], {"COLAB_TPU_ADDR": "10.0.0.2:8470"}, "tpu"),
    ([], {}, "cpu"),
])
def test_runtime_kind_from_device_files_and_environment(device_files, environ, expected):
  assert install_helpers()["runtime_kind"](device_files, environ) == expected


def test_this_checkout_installs_its_own_cuda_and_tpu_extras():
  helpers = install_helpers()
  extras = helpers["package_extras"](str(ROOT))
  assert {"cuda", "tpu", "wandb", "dev"} <= extras
  assert helpers["install_command"]("gpu", str(ROOT), extras, python="py")[-1] == f"{ROOT}[cuda]"
  assert helpers["install_command"]("tpu", str(ROOT), extras, python="py")[-1] == f"{ROOT}[tpu]"


def test_package_extras_of_a_wheel_come_from_its_metadata(tmp_path):
  wheel = tmp_path / "m-0.1-py3-none-any.whl"
  with zipfile.ZipFile(wheel, "w") as archive:
    archive.writestr("m/__init__.py", "")
    archive.writestr("m-0.1.dist-info/METADATA",
                     "Metadata-Version: 2.1\nName: m\nVersion: 0.1\nProvides-Extra: cuda\n"
                     "Provides-Extra: dev\nRequires-Dist: jax[cuda12]; extra == \"cuda\"\n")
  assert install_helpers()["package_extras"](str(wheel)) == {"cuda", "dev"}


def test_notebook_quotes_the_readmes_demo_time():
  readme = " ".join(README.read_text().split())
  (demo,) = re.findall(r"on 2 CPU cores, in (\d+ minutes \d+ seconds)", readme)
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  text = " ".join(" ".join(c.source for c in notebook.cells).split())
  quoted = re.findall(r"\d+ minutes?(?: \d+ seconds?)?", text)
  assert quoted == [demo]


def test_readme_colab_badge_opens_this_notebook():
  readme = README.read_text()
  links = re.findall(r"\]\((https://colab\.research\.google\.com/github/[^)\s]+)\)", readme)
  assert links, "the README has no Colab badge"
  for link in links:
    owner, repo, branch, path = re.fullmatch(
        r"https://colab\.research\.google\.com/github/([^/]+)/([^/]+)/blob/([^/]+)/(.+)",
        link).groups()
    assert (owner, repo, branch) == ("OWNER", "REPO", "main")
    assert (ROOT / path).resolve() == NOTEBOOK
  assert "`OWNER/REPO`" in readme  # the placeholder is explained
