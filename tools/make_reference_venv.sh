#!/usr/bin/env bash
# Creates .venv-ref: PyTorch + transformers + peft, used by tools/ and benchmarks/ to
# record reference outputs and to time a peer, and by the integration tests (their
# `reference_python` fixture runs this script) to load exported folders and LoRA adapters.
# Never a runtime dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
exec 9>.venv-ref.lock
flock 9
if [ -x .venv-ref/bin/python ] && .venv-ref/bin/python -c "import torch, transformers, accelerate, gguf, peft" 2>/dev/null; then
  exit 0
fi
python3 -m venv .venv-ref
.venv-ref/bin/pip install -q --no-compile --disable-pip-version-check "torch==2.13.0" transformers accelerate gguf peft numpy
