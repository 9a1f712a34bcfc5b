"""Tools of the deep-research agents: `search` / `visit` (S) and `reason` (M).

`base` defines `ToolResult`, `Tool` and `ToolRegistry` (JSON-argument dispatch by name;
tools never raise). `search` holds the SQLite FTS5 index, `reason` the bounded
evaluator, `web` the search and visit on the web (`tools.backend=web`). This package
imports nothing of the project (standard library only, and trafilatura for the web's
pages): `tasks` and `agents` both build on it.
"""

from __future__ import annotations

import pathlib

from mgrpo_jax.tools.base import (
  TaskRoutedRegistry,
  Tool,
  ToolRegistry,
  ToolResult,
  check_tool,
  validate_args,
)
from mgrpo_jax.tools.reason import DEFAULT_LIMITS, Limits, evaluate, make_reason_tool
from mgrpo_jax.tools.search import (
  SearchIndex,
  build_index,
  make_search_tool,
  make_visit_tool,
)


def default_registry(index: SearchIndex, *, top_n: int = 5, visit_budget: int = 1500,
                     limits: Limits = DEFAULT_LIMITS) -> ToolRegistry:
  """A registry with search, visit and reason over `index`."""
  return ToolRegistry([make_search_tool(index, top_n=top_n),
                       make_visit_tool(index, budget_chars=visit_budget),
                       make_reason_tool(limits)])


def index_registry(index_path: pathlib.Path, *, top_n: int = 5, visit_budget: int = 1500
                   ) -> ToolRegistry:
  """search / visit / reason over the SQLite FTS5 index at `index_path`."""
  return default_registry(SearchIndex.open(index_path), top_n=top_n, visit_budget=visit_budget)


def world_index(world_path: pathlib.Path, world: str = "train_world") -> pathlib.Path:
  """The built search index of `world` ("train_world", "test_world") in a built world
  folder: `<world_path>/index/<world>.sqlite`."""
  if world not in ("train_world", "test_world"):
    raise ValueError(f"world must be 'train_world' or 'test_world', got {world!r}")
  return world_path / "index" / f"{world}.sqlite"


__all__ = ["Limits", "SearchIndex", "TaskRoutedRegistry", "Tool", "ToolRegistry", "ToolResult",
           "build_index", "check_tool", "default_registry", "evaluate", "index_registry",
           "make_reason_tool", "make_search_tool", "make_visit_tool", "validate_args",
           "world_index"]
