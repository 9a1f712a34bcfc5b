#!/usr/bin/env bash
# Accelerator check of mgrpo_jax on one GPU (or TPU) chip: train-step model FLOPs
# utilisation and decode throughput for SmolLM2-135M and a Llama-3.2-1B-shaped model,
# against a bf16 matmul peer measured in the same run (benchmarks/device_check.py).
#
#   bash benchmarks/device_check.sh [--models a,b] [--dtype bfloat16]   # the device run
#   bash benchmarks/device_check.sh --smoke                             # tiny shapes, CPU
#
# The device run makes a venv (default /tmp/mgrpo-device-venv, or $DEVICE_CHECK_VENV)
# that sees the host's Python packages; when that Python has no accelerator JAX it
# installs jax[cuda12] (needs a package index). The table goes to stdout and, when $OUT
# is set, to $OUT/device_check.md with the full log in $OUT/device_check.log. The run is
# bounded by $DEVICE_CHECK_TIMEOUT seconds (default 480). --smoke runs the same Python
# with $PYTHON (default .venv/bin/python, else python3) on CPU, without any install.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRIPT="$ROOT/benchmarks/device_check.py"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [[ " $* " == *" --smoke "* ]]; then
  PY="${PYTHON:-}"
  if [[ -z "$PY" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
  fi
  JAX_PLATFORMS=cpu exec "$PY" "$SCRIPT" "$@"
fi

BASE_PY="${PYTHON:-python3}"
VENV="${DEVICE_CHECK_VENV:-/tmp/mgrpo-device-venv}"
if [[ ! -x "$VENV/bin/python" ]]; then
  "$BASE_PY" -m venv "$VENV"
  # See the host's packages even when $BASE_PY is itself a venv (--system-site-packages
  # would only reach the base interpreter's).
  # addsitedir also runs the host's own .pth files (editable installs, plugins).
  venv_site="$("$VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
  "$BASE_PY" -c 'import site
for d in site.getsitepackages(): print(f"import site; site.addsitedir({d!r})")' \
    >"$venv_site/host-site-packages.pth"
fi
PY="$VENV/bin/python"

has_accelerator() {
  "$PY" - <<'EOF' >/dev/null 2>&1
import jax
raise SystemExit(0 if jax.default_backend() in ("gpu", "tpu") else 1)
EOF
}

if ! has_accelerator; then
  echo "device_check: no accelerator JAX in $BASE_PY; installing jax[cuda12] into $VENV"
  "$PY" -m pip install -q --upgrade "jax[cuda12]" flax optax orbax-checkpoint absl-py
  has_accelerator || { echo "device_check: JAX still sees no GPU/TPU" >&2; exit 1; }
fi
for pair in flax:flax optax:optax orbax.checkpoint:orbax-checkpoint absl:absl-py; do
  "$PY" -c "import ${pair%%:*}" 2>/dev/null || "$PY" -m pip install -q "${pair#*:}"
done

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi

args=("$@")
log=/dev/null
if [[ -n "${OUT:-}" ]]; then
  args+=(--out "$OUT/device_check.md")
  log="$OUT/device_check.log"
fi
PYTHONUNBUFFERED=1 timeout "${DEVICE_CHECK_TIMEOUT:-480}" "$PY" "$SCRIPT" "${args[@]}" 2>&1 \
  | tee "$log"
