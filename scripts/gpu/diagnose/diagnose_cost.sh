#!/usr/bin/env bash
# Where a candidate's seconds go on the lent machine, beside the same figures on a development machine: the
# machine's own speed (scripts/gpu/diagnose/machine_speed.py), then the 16-candidate draw of bench/scaling.py (per job 2,
# 8 jobs) graded at 1 job and at 16 jobs with every check's duration kept. After
# `SCALING_PHASE=local SCALING_STEPS=none bash scripts/gpu/run_scaling.sh` in the same call (it installs the wheels
# and builds the bases); carry [".whl", ".gpu"]. Writes $OUT/cost-diagnosis.txt and $OUT/cost-j{1,16}.json.
set -o pipefail
PY=${PY:-python3}
export GRADER_CACHE=${GRADER_CACHE:-/tmp/scaling/cache} PYTHONUNBUFFERED=1
LOG=$OUT/cost-diagnosis.txt
$PY scripts/gpu/diagnose/machine_speed.py --repeat 3 > "$LOG" 2>&1
$PY - <<'PYEOF'
import sys; sys.path[:0] = ["bench", "."]
from pathlib import Path
from corpus import DEFAULT_BUNDLE, build_corpus, write_corpus
from scaling import nested_subsets
tasks = ["fp8-moe-lora", "int8-kv-rounding", "minimax-qk-norm", "xpu-kv-cache-dtypes"]
write_corpus(Path("/tmp/cost-corpus"), nested_subsets(build_corpus(200, 0, DEFAULT_BUNDLE, tasks), 2, [8], 0)[8])
PYEOF
for jobs in ${COST_JOBS:-1 16}; do
  start=$(date +%s)
  timeout -k 10 "${COST_LIMIT:-240}" $PY grade.py /tmp/cost-corpus --out "/tmp/cost-out-$jobs" --no-cache --gpu off \
    --jobs "$jobs" > "/tmp/cost-grade-$jobs.log" 2>&1
  echo "jobs $jobs: rc=$? wall $(( $(date +%s) - start )) s" >> "$LOG"
  cp "/tmp/cost-out-$jobs/results.json" "$OUT/cost-j$jobs.json" 2>/dev/null
  grep -v '^progress' "/tmp/cost-grade-$jobs.log" | tail -25 >> "$LOG"
done
$PY scripts/gpu/diagnose/machine_speed.py --repeat 1 2>&1 | grep throttling >> "$LOG"
