"""Test-wide settings: 8 simulated CPU devices and deterministic hypothesis runs; the
`clean_gin` fixture.

XLA_FLAGS must be set before JAX initializes its backend, so this runs first.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import gin  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
settings.load_profile("ci")


@pytest.fixture
def clean_gin():
  """No gin bindings when the test starts, none left when it ends."""
  gin.clear_config()
  yield
  gin.clear_config()
