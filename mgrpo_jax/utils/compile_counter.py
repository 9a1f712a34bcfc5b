"""Count XLA backend compilations, to check that hot paths compile once.

Static shapes are a design rule of this project (alignment fixes the sub-agent's
batch, length buckets fix sequence lengths), so tests and benchmarks assert that
calling a jitted function again with the same shapes compiles nothing new.

Example:
  >>> with CompileCounter() as counter:
  ...   f(x); f(x)
  >>> counter.count
  1
"""

from __future__ import annotations

import threading

from jax import monitoring

_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

_lock = threading.Lock()
_active: list[CompileCounter] = []
_listener_installed = False


def _on_event(name: str, duration_secs: float, **kwargs) -> None:
  del duration_secs, kwargs
  if name != _BACKEND_COMPILE_EVENT:
    return
  with _lock:
    for counter in _active:
      counter.count += 1


def _install_listener() -> None:
  global _listener_installed
  with _lock:
    if not _listener_installed:
      monitoring.register_event_duration_secs_listener(_on_event)
      _listener_installed = True


class CompileCounter:
  """Context manager counting XLA backend compilations inside its scope.

  Counts every compilation in the process (all threads), including those of
  helper ops such as `jnp.ones`; build inputs before entering the scope.
  """

  def __init__(self) -> None:
    self.count = 0

  def __enter__(self) -> CompileCounter:
    _install_listener()
    with _lock:
      _active.append(self)
    return self

  def __exit__(self, *exc) -> None:
    with _lock:
      _active.remove(self)
