#!/usr/bin/env bash
# Creates .venv-ref: PyTorch + transformers, used by tools/ and benchmarks/ to record
# reference outputs and to time a peer, and by tests/integration/test_training_export_hf.py (its
# `reference_python` fixture runs this script) to load exported folders. Never a runtime
# dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
exec 9>.venv-ref.lock
flock 9
if [ -x .venv-ref/bin/python ] && .venv-ref/bin/python -c "import torch, transformers, accelerate, gguf" 2>/dev/null; then
  exit 0
fi
python3 -m venv .venv-ref
.venv-ref/bin/pip install -q --no-compile --disable-pip-version-check "torch==2.13.0" transformers accelerate gguf numpy
