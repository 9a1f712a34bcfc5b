"""Test-wide settings: 8 simulated CPU devices and deterministic hypothesis runs.

XLA_FLAGS must be set before JAX initializes its backend, so this runs first.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
settings.load_profile("ci")


def pytest_collection_modifyitems(items):
  """Test files holding a test marked `slow` run first, each file's tests together and
  in their order (a stable sort), so that the parallel workers of `make test` end on
  short tests together instead of one worker finishing a long test alone."""
  slow_files = {item.path for item in items if item.get_closest_marker("slow")}
  items.sort(key=lambda item: item.path not in slow_files)
