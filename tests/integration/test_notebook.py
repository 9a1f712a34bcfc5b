"""The Colab demo notebook, executed headless (nbclient) on its shortened schedule.

`notebooks/mgrpo_demo.ipynb` runs with `MGRPO_NOTEBOOK_QUICK=1` (1 RL step, a small warm
start and evaluation) from the notebooks/ folder, writing its run under a temporary
`MGRPO_NOTEBOOK_WORKDIR`. The kernel is a `python3` kernel spec, written to a temporary
JUPYTER_PATH, that starts this interpreter, so the notebook sees the same installation as
the tests. The checks compare what the notebook showed with the files the run wrote.
"""

from __future__ import annotations

import base64
import json
import pathlib
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from mgrpo_jax.metrics import read_metrics
from mgrpo_jax.metrics.report import summary_table

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "mgrpo_demo.ipynb"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# The QUICK schedule of the notebook's SCHEDULE cell.
QUICK_STEPS = 1
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
