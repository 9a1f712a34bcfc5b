"""The import checker of tests/unit/test_architecture.py: units, their imports, file cycles.

Every import statement of a file counts, at any depth: a function's lazy import makes
its file depend on the imported one as much as a top-level import does. `import a.b`
names `a.b`; `from a import b` names `a.b` when that is a module of the tree, else `a`;
relative imports are resolved against the importing file's package. A package's
`__init__.py` is not counted as imported by an import of one of its modules (Python runs
it first, but a package that re-exports its modules would otherwise be in a cycle with
each of them).
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Callable, Iterable, Iterator, Mapping


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
  """The dotted name of the file `path` below `root` (a package's `__init__.py`: the package)."""
  parts = list(path.relative_to(root).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def package_modules(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
  """Every module of `package` (a folder below `root`) by its dotted name."""
  return {module_name(root, path): path for path in sorted((root / package).rglob("*.py"))}


def imported_names(root: pathlib.Path, path: pathlib.Path,
                   is_module: Callable[[str], bool]) -> set[str]:
  """The module names the import statements of `path` name (see the module docstring)."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = _from_base(root, path, node)
      for alias in node.names:
        full = f"{base}.{alias.name}"
        names.add(full if is_module(full) else base)
  return names


def _from_base(root: pathlib.Path, path: pathlib.Path, node: ast.ImportFrom) -> str:
  """The module a `from ... import` statement imports from, relative forms resolved."""
  if node.level == 0:
    return node.module
  package = module_name(root, path).split(".")
  if path.name != "__init__.py":
    package.pop()
  base = package[:len(package) - (node.level - 1)]
  return ".".join(base + ([node.module] if node.module else []))


def file_graph(root: pathlib.Path, package: str) -> dict[str, set[str]]:
  """module -> the modules of `package` it imports (itself excluded)."""
  modules = package_modules(root, package)
  graph = {}
  for name, path in modules.items():
    imported = imported_names(root, path, modules.__contains__)
    graph[name] = {m for m in imported if m in modules and m != name}
  return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module, each sorted."""
  reach = {node: _reachable(graph, node) for node in graph}
  components = {frozenset(other for other in reach[node] if node in reach[other])
                for node in graph}
  return sorted(sorted(c) for c in components if len(c) > 1)


def _reachable(graph: Mapping[str, set[str]], start: str) -> set[str]:
  """The modules reachable from `start` by one import or more."""
  seen, stack = set(), list(graph[start])
  while stack:
    node = stack.pop()
    if node not in seen:
      seen.add(node)
      stack.extend(graph.get(node, ()))
  return seen


def describe_cycle(graph: Mapping[str, set[str]], component: list[str],
                   modules: Mapping[str, pathlib.Path], root: pathlib.Path) -> str:
  """One line per file of the cycle, naming the cycle's files it imports."""
  def file(module: str) -> str:
    return modules[module].relative_to(root).as_posix()

  lines = [f"import cycle among {', '.join(file(m) for m in component)}:"]
  for module in component:
    inside = sorted(graph[module] & set(component))
    lines.append(f"  {file(module)} imports {', '.join(file(m) for m in inside)}")
  return "\n".join(lines)


def unit_violations(root: pathlib.Path, package: str, allowed: Mapping[str, set[str]],
                    files: Iterable[tuple[pathlib.Path, str]]) -> list[str]:
  """`file (unit) imports unit` for each import of `package`'s units that `allowed` forbids.

  `files` gives (file, its unit); a unit may import itself and the units in
  `allowed[unit]`; a package's unit is its top-level subpackage or module.
  """
  modules = package_modules(root, package)
  violations = []
  for path, unit in files:
    for name in sorted(imported_names(root, path, modules.__contains__)):
      imported = package_unit(package, name)
      if imported and imported != unit and imported not in allowed[unit]:
        violations.append(f"{path.relative_to(root).as_posix()} ({unit}) imports {imported}")
  return violations


def package_unit(package: str, name: str) -> str | None:
  """The unit of `package` the module name `name` is in; None outside its units."""
  parts = name.split(".")
  if parts[0] != package or len(parts) == 1 or parts[1] == "__version__":
    return None
  return parts[1]


def package_files(root: pathlib.Path, package: str) -> Iterator[tuple[pathlib.Path, str]]:
  """(file, unit) for every file of `package` but its own `__init__.py`."""
  for path in sorted((root / package).rglob("*.py")):
    parts = path.relative_to(root / package).parts
    if parts != ("__init__.py",):
      yield path, parts[0].removesuffix(".py")
