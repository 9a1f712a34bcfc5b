"""The dependency rules of docs/ARCHITECTURE.md, checked on every import in the package and
the launch scripts: no import from a lower unit to a higher one, no import cycle between
files, and the launch scripts at the top; and no function there takes more than
MAX_PARAMETERS parameters unless its docstring says why."""

import ast
import pathlib
import re

from tests.support import import_graph

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = "mgrpo_jax"
LAUNCH = ROOT / "launch"

# The most parameters a function may take (self / cls not counted, *args and **kwargs
# counted) unless its docstring gives the reason, "Takes <N> parameters because ...".
MAX_PARAMETERS = 8
_REASON = re.compile(r"Takes (\d+) parameters because")

# unit -> the project units it may import (besides itself). A unit is a top-level
# subpackage or module of the package; `launch` is the launch scripts.
_MODELS = {"models", "text", "sampling", "utils"}
_AGENTS = {"agents", "tools", "tasks", "core", "config"}
ALLOWED = {
    "core": set(),
    "config": {"core"},  # the core's registries are the choices of their keys
    "metrics": set(),
    "utils": set(),
    "store": {"utils"},
    "text": {"utils"},  # utils.gguf_file, the GGUF parser
    "models": {"text", "utils"},
    "sampling": {"models", "text", "utils"},
    "tools": set(),
    "tasks": {"tools", "utils"},  # utils: file locks, derived seeds
    "agents": {"tools", "tasks", "text", "sampling", "models", "core", "utils", "config"},
    "plugins": {"core", "tools"},
    "serving": {"agents", "tools", "tasks", "text", "sampling", "models", "core", "utils",
                "store", "config"},
    # the per-agent machinery: train state, update, checkpoints, data, an agent's set-up
    "training": _MODELS | _AGENTS | {"serving", "plugins"},
    # multi-host slices and the memory planner, over the per-agent machinery
    "scale": _MODELS | {"training", "metrics", "config"},
    "warm_start": _MODELS | _AGENTS | {"training", "scale", "metrics"},
    # plugins: the page's R_M is the run's (gin-bound) reward
    "evaluation": _MODELS | _AGENTS | {"training", "scale", "warm_start", "metrics",
                                       "plugins"},
    # the step protocol of the two slices and the run's stages: composes everything
    "slices": _MODELS | _AGENTS | {"training", "scale", "warm_start", "evaluation", "serving",
                                   "store", "metrics", "plugins"},
}
# the top: a launch script may import any unit; no unit imports a launch script
ALLOWED["launch"] = set(ALLOWED)


def _launch_scripts() -> list[pathlib.Path]:
  scripts = sorted(LAUNCH.glob("*.py"))
  assert scripts, "no launch scripts found in launch/"
  return scripts


def _launch_modules(path: pathlib.Path, stems: set[str]) -> set[str]:
  """The launch scripts (named `stems`) that the file `path` imports: as `launch.x`, or
  from a launch script as `x` (Python puts a script's own folder first on its path)."""
  names = import_graph.imported_names(ROOT, path, lambda name: False)
  return {name for name in names
          if name.split(".")[0] == "launch" or (path.parent == LAUNCH and name in stems)}


def test_every_unit_is_known():
  for path in (ROOT / PACKAGE).iterdir():
    if path.name.startswith("_") or path.name.startswith("."):
      continue
    unit = path.name.removesuffix(".py")
    assert unit in ALLOWED, f"new unit {path.name}: add it to ALLOWED and the docs"


def test_imports_follow_the_dependency_rules():
  files = [*import_graph.package_files(ROOT, PACKAGE),
           *((script, "launch") for script in _launch_scripts())]
  violations = import_graph.unit_violations(ROOT, PACKAGE, ALLOWED, files)
  assert not violations, "\n".join(violations)


def test_no_import_cycle_between_files():
  graph = import_graph.file_graph(ROOT, PACKAGE)
  modules = import_graph.package_modules(ROOT, PACKAGE)
  found = [import_graph.describe_cycle(graph, cycle, modules, ROOT)
           for cycle in import_graph.cycles(graph)]
  assert not found, "\n".join(found)


def test_launch_scripts_import_no_launch_script():
  """Each launch script stands alone (what two share lives in the package), and nothing of
  the package, the configs, benchmarks or tools imports one."""
  sources = [*_launch_scripts(), *(ROOT / PACKAGE).rglob("*.py"),
             *(ROOT / "configs").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
             *(ROOT / "tools").glob("*.py")]
  stems = {script.stem for script in _launch_scripts()}
  found = [f"{path.relative_to(ROOT).as_posix()} imports {', '.join(sorted(imported))}"
           for path in sources if (imported := _launch_modules(path, stems))]
  assert not found, "\n".join(found)


def long_signatures(path: pathlib.Path, root: pathlib.Path) -> list[str]:
  """'file:line name takes N parameters' of each function (lambdas and nested ones
  included) of the file `path` with more than MAX_PARAMETERS parameters and no reason in
  its docstring naming that count, in line order."""
  found = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
      continue
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                             *(a for a in (args.vararg, args.kwarg) if a is not None))]
    if names[:1] in (["self"], ["cls"]):
      names = names[1:]
    docstring = "" if isinstance(node, ast.Lambda) else ast.get_docstring(node) or ""
    reason = _REASON.search(docstring)
    if len(names) > MAX_PARAMETERS and not (reason and int(reason[1]) == len(names)):
      found.append((node.lineno, f"{path.relative_to(root).as_posix()}:{node.lineno} "
                                 f"{getattr(node, 'name', 'lambda')} takes {len(names)} "
                                 "parameters"))
  return [line for _, line in sorted(found)]


def test_no_function_takes_more_than_max_parameters_without_a_reason():
  """Values that travel together are one object (a frozen dataclass: `core.losses.Surrogate`,
  `slices.step_math.CreditConfig`, ...); a function that needs more says why."""
  files = [*(ROOT / PACKAGE).rglob("*.py"), *_launch_scripts()]
  found = [line for path in sorted(files) for line in long_signatures(path, ROOT)]
  assert not found, "\n".join(found)


# The checkers on planted code, so that a broken checker fails here.


_PLANTED_SIGNATURES = '''def plain(a0, a1, a2, a3, a4, a5, a6, a7, a8):
  pass
class C:
  def method(self, a0, *a1, a2, a3, a4, a5, a6, a7, **a8):
    pass
  def eight(self, a0, a1, a2, a3, a4, a5, a6, a7):
    pass
def reasoned(a0, a1, a2, a3, a4, a5, a6, a7, a8):
  """Takes 9 parameters because it mirrors X."""
def stale(a0, a1, a2, a3, a4, a5, a6, a7, a8):
  """Takes 8 parameters because it mirrors X."""
f = lambda a0, a1, a2, a3, a4, a5, a6, a7, a8: 0
'''


def test_signature_checker_counts_parameters_and_reads_the_reason(tmp_path):
  (tmp_path / "m.py").write_text(_PLANTED_SIGNATURES)
  assert long_signatures(tmp_path / "m.py", tmp_path) == [
      "m.py:1 plain takes 9 parameters", "m.py:4 method takes 9 parameters",
      "m.py:10 stale takes 9 parameters", "m.py:12 lambda takes 9 parameters"]


def _plant(root: pathlib.Path, files: dict[str, str]) -> None:
  """Writes `files` (path below `root` -> source) and empty `__init__.py`s above them."""
  for name, source in files.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    for folder in path.relative_to(root).parents[:-1]:
      (root / folder / "__init__.py").touch()
    path.write_text(source)


_PLANTED_ALLOWED = {"low": set(), "high": {"low"}}


def test_checker_finds_an_upward_import(tmp_path):
  _plant(tmp_path, {"pkg/low/a.py": "def f():\n  from pkg.high import b\n",
                    "pkg/high/b.py": "import pkg.low.a\n"})
  violations = import_graph.unit_violations(
      tmp_path, "pkg", _PLANTED_ALLOWED, import_graph.package_files(tmp_path, "pkg"))
  assert violations == ["pkg/low/a.py (low) imports high"]


def test_checker_finds_an_upward_relative_import(tmp_path):
  _plant(tmp_path, {"pkg/low/a.py": "from ..high import b\n", "pkg/high/b.py": ""})
  violations = import_graph.unit_violations(
      tmp_path, "pkg", _PLANTED_ALLOWED, import_graph.package_files(tmp_path, "pkg"))
  assert violations == ["pkg/low/a.py (low) imports high"]


def test_checker_finds_a_cycle_in_every_import_form(tmp_path):
  _plant(tmp_path, {
      "pkg/low/a.py": "import pkg.low.b\n",
      "pkg/low/b.py": "from pkg.low import c\n",
      "pkg/low/c.py": "def f():\n  from . import a\n",
      "pkg/low/d.py": "from pkg.low import a\n",  # into the cycle, not part of it
  })
  graph = import_graph.file_graph(tmp_path, "pkg")
  assert import_graph.cycles(graph) == [["pkg.low.a", "pkg.low.b", "pkg.low.c"]]
  message = import_graph.describe_cycle(graph, import_graph.cycles(graph)[0],
                                        import_graph.package_modules(tmp_path, "pkg"),
                                        tmp_path)
  assert message.splitlines() == [
      "import cycle among pkg/low/a.py, pkg/low/b.py, pkg/low/c.py:",
      "  pkg/low/a.py imports pkg/low/b.py",
      "  pkg/low/b.py imports pkg/low/c.py",
      "  pkg/low/c.py imports pkg/low/a.py",
  ]


def test_checker_counts_a_package_init_only_where_it_is_named(tmp_path):
  _plant(tmp_path, {
      "pkg/__init__.py": "from pkg.a import f\n",  # re-exports: not a cycle with a.py
      "pkg/a.py": "from pkg.b import g\ndef f():\n  pass\n",
      "pkg/b.py": "def g():\n  pass\n",
  })
  assert import_graph.cycles(import_graph.file_graph(tmp_path, "pkg")) == []
  (tmp_path / "pkg" / "b.py").write_text("from pkg import f\n")  # the name, from __init__
  assert import_graph.cycles(import_graph.file_graph(tmp_path, "pkg")) == [
      ["pkg", "pkg.a", "pkg.b"]]
