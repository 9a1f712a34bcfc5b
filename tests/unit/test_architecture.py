"""The dependency rules of docs/ARCHITECTURE.md, checked on every import in the package."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "mgrpo_jax"

# unit -> the project units it may import (besides itself). A unit is a top-level
# subpackage or module.
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
    "tasks": {"tools"},
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


def _unit(parts: list[str]) -> str:
  return parts[0].removesuffix(".py")


def _imported_units(path: pathlib.Path) -> set[str]:
  units = set()
  for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
    names = []
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    for name in names:
      parts = name.split(".")
      if parts[0] == "mgrpo_jax" and len(parts) > 1 and parts[1] != "__version__":
        units.add(_unit(parts[1:]))
  return units


def test_every_unit_is_known():
  for path in PACKAGE.iterdir():
    if path.name.startswith("_") or path.name.startswith("."):
      continue
    assert _unit([path.name]) in ALLOWED, f"new unit {path.name}: add it to ALLOWED and the docs"


def test_imports_follow_the_dependency_rules():
  violations = []
  for path in sorted(PACKAGE.rglob("*.py")):
    parts = list(path.relative_to(PACKAGE).parts)
    if parts == ["__init__.py"]:
      continue
    unit = _unit(parts)
    allowed = ALLOWED[unit]
    for imported in _imported_units(path) - {unit}:
      if imported not in allowed:
        violations.append(f"{path.relative_to(PACKAGE.parent)} ({unit}) imports {imported}")
  assert not violations, "\n".join(violations)
