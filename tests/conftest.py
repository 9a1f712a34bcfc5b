"""Test-wide settings: simulated CPU devices and deterministic hypothesis runs; the
`clean_gin` fixture.

A test process simulates `MGRPO_JAX_TEST_CPU_DEVICES` CPU devices (default 8, what the
sharding tests' meshes span; tests/BUILD gives the Bazel targets without such meshes
one). XLA's CPU client runs every program on a pool of max(cores, devices) threads, so
8 simulated devices on 2 cores run a one-device program 20-30% slower
(tests/unit/test_models_logprobs.py: 88 s against 71 s). The count is set in JAX's
config, not in XLA_FLAGS, so the processes that a test starts do not inherit it. It must
be set before JAX initializes its backend, so this runs first.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", int(os.environ.get("MGRPO_JAX_TEST_CPU_DEVICES", "8")))

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
