#!/bin/sh
# Runs the repository's .venv interpreter (made by `make venv`), else python3 on PATH.
# Bazel runs this from runfiles, where it is a symlink into the source tree.
here="$(dirname "$(readlink -f "$0")")"
ws="$(cd "$here/../.." && pwd)"
if [ -x "$ws/.venv/bin/python3" ]; then
  exec "$ws/.venv/bin/python3" "$@"
fi
exec python3 "$@"
