#!/usr/bin/env bash
# The demo's job for pretrained agents on one accelerator, within a time budget:
# SmolLM2-135M-Instruct as M and as S in the natural-language world
# (configs/smollm2_deep_research.py:gpu_demo): warm start, held-out evaluation, M-GRPO in
# rounds of $ROUND_STEPS steps while the budget lasts, evaluation after RL, the report.
#
#   bash tools/accelerator_demo.sh [workdir [launcher flags...]]
#
# (workdir default: runs/smollm2_gpu_demo; flags such as --config.<key>=<value> go to
# every launch.)
# $DEMO_BUDGET_S (default 540) bounds the wall time: another round starts only when one
# more round, as long as the last, still fits. A round extends the run (num_steps is a
# resumable key), so it resumes from the checkpoints, and the evaluation after RL is
# redone on the newest ones. After each round the report, the evaluations and the logs
# are copied to $OUT when it is set. $PYTHON (default python3) runs the launcher.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORKDIR="${1:-$ROOT/runs/smollm2_gpu_demo}"
FLAGS=("${@:2}")
BUDGET="${DEMO_BUDGET_S:-540}"
ROUND="${ROUND_STEPS:-10}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

started=$(date +%s)
run_to() {  # run_to STEPS: the pipeline up to RL step STEPS, its output also in $OUT
  "$PY" "$ROOT/launch/tpu_run.py" --slice=all --workdir="$WORKDIR" \
    --config="$ROOT/configs/smollm2_deep_research.py:gpu_demo" \
    "${FLAGS[@]}" --config.experiment.num_steps="$1" 2>&1 | tee -a "${OUT:-$WORKDIR}/accelerator_demo.log"
  if [[ -n "${OUT:-}" ]]; then
    cp "$WORKDIR/report/summary.txt" "$OUT/summary.txt"
    tar -C "$WORKDIR" -czf "$OUT/eval_and_logs.tgz" eval logs report warm_start/warm_start.json
  fi
}
seconds_in() {  # seconds_in FILE: the "seconds" a stage's JSON summary records (else 0)
  "$PY" -c 'import json, sys; print(int(json.load(open(sys.argv[1])).get("seconds", 0)))' \
    "$1" 2>/dev/null || echo 0
}

mkdir -p "$WORKDIR"
steps=$ROUND
round_started=$(date +%s)
run_to "$steps"
# The first round also held the warm start and the evaluation before RL.
last=$(( $(date +%s) - round_started - $(seconds_in "$WORKDIR/warm_start/warm_start.json") \
         - $(seconds_in "$WORKDIR/eval/warm_start.json") ))
while (( $(date +%s) - started + last <= BUDGET )); do
  steps=$(( steps + ROUND ))
  round_started=$(date +%s)
  run_to "$steps"
  last=$(( $(date +%s) - round_started ))
done
echo "accelerator_demo: $steps RL steps in $(( $(date +%s) - started )) s"
