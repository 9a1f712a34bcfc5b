"""A small thread-safe name -> function registry for pluggable core options.

Used for loss aggregations (`losses.AGGREGATIONS`), alignment modes (`alignment.MODES`)
and R_S presets (`rewards.SUB_REWARDS`). Names are static options of jitted functions
or a run's config values, so a name is bound once: registering an existing name again
is an error (a silent rebinding would be invisible to functions already compiled for
that name, and would change what a recorded config means).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Registry:
  """Maps option names to functions; `kind` names the option in error messages."""

  def __init__(self, kind: str) -> None:
    self._kind = kind
    self._items: dict[str, Callable[..., Any]] = {}
    self._lock = threading.Lock()

  def register(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Returns a decorator that registers a function under `name`."""
    if not isinstance(name, str) or not name:
      raise ValueError(f"{self._kind} name must be a non-empty string, got {name!r}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
      with self._lock:
        if name in self._items:
          raise ValueError(f"{self._kind} {name!r} is already registered")
        self._items[name] = fn
      return fn

    return decorator

  def get(self, name: str) -> Callable[..., Any]:
    """Returns the function registered as `name`; unknown names list the known ones."""
    with self._lock:
      fn = self._items.get(name)
      known = sorted(self._items)
    if fn is None:
      raise ValueError(f"unknown {self._kind} {name!r}; known: {known}")
    return fn

  def names(self) -> list[str]:
    with self._lock:
      return sorted(self._items)

  def __contains__(self, name: object) -> bool:
    with self._lock:
      return name in self._items
