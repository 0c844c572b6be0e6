#!/usr/bin/env bash
# Where a Ray run's time goes on the lent machine: one run of bench/scaling.py's 16-job draw on the Ray backend,
# with a progress line every 5 s, memory and process counts every 5 s, each result's completion time (the store's
# files) and what Ray's raylet logged about killing or restarting workers. After
# `SCALING_PHASE=local SCALING_STEPS=none bash scripts/gpu/run_scaling.sh` (carry [".whl", ".gpu"]) in the same
# warm machine; carry [".ray"]. Writes $OUT/ray-diagnosis.txt.
set -o pipefail
PY=${PY:-python3}
JOBS=${DIAG_JOBS:-16}
export GRADER_CACHE=/tmp/scaling/cache GRADER_PROGRESS_EVERY=5 PYTHONUNBUFFERED=1
LOG=$OUT/ray-diagnosis.txt
if ! $PY -c 'import ray' 2>/dev/null; then
  tar -C "$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" -xJf .ray/ray-pkg.tar.xz
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .ray/*.whl > /tmp/install-ray.log 2>&1
fi
$PY - "$JOBS" <<'PYEOF'
import sys; sys.path[:0] = ["bench", "."]
from pathlib import Path
from corpus import DEFAULT_BUNDLE, build_corpus, write_corpus
from scaling import nested_subsets
jobs = int(sys.argv[1])
tasks = ["fp8-moe-lora", "int8-kv-rounding", "minimax-qk-norm", "xpu-kv-cache-dtypes"]
entries = build_corpus(200, 0, DEFAULT_BUNDLE, tasks)
write_corpus(Path("/tmp/diag-corpus"), nested_subsets(entries, 2, [jobs], 0)[jobs])
PYEOF
( while sleep 5; do echo "$(date +%T) mem_used_gib=$(free -g | awk '/Mem:/{print $3}') shm=$(df -h /dev/shm | awk 'NR==2{print $3}') procs=$(ps -e --no-headers | wc -l) python=$(pgrep -c python) load=$(cut -d' ' -f1 /proc/loadavg)"; done ) > /tmp/watch.log &
WATCH=$!
echo "start $(date +%T)" > "$LOG"
timeout -k 10 "${DIAG_LIMIT:-420}" $PY grade.py /tmp/diag-corpus --out /tmp/diag-out --no-cache --gpu off --jobs "$JOBS" --backend ray > /tmp/grade.log 2>&1
echo "grade rc=$? end $(date +%T)" >> "$LOG"
kill $WATCH
{ echo "== grade output"; tail -c 6000 /tmp/grade.log; echo "== watch"; cat /tmp/watch.log
  echo "== results completed (store mtimes)"; ls -l --time-style=+%T /tmp/diag-out/store 2>/dev/null | awk '{print $6, $7}' | sort
  echo "== raylet"; grep -h -i -E "kill|oom|memory|restart|died|exit" /tmp/ray/session_latest/logs/raylet.out 2>/dev/null | tail -40
  echo "== timings"; $PY -c 'import json; d=json.load(open("/tmp/diag-out/results.json")); [print(c["id"], c.get("timings")) for c in d["candidates"]]' 2>&1 | tail -40
} >> "$LOG"
