#!/usr/bin/env bash
# The GPU half of the trust checks, in one call on the lent H200 (run from the repository root, .whl/ and .gpu/
# carried as for run_gpu_batch.sh): minimax-qk-norm's forged speed runner graded from outside the candidate
# beside the reference fix, CUDA subjects ended at their host and device memory bounds, and the open files a CUDA
# context needs under the subjects' RLIMIT_NOFILE. What comes back under $OUT: one log per step, summary.txt.
# TRUST_STEPS picks the steps (default all: "memory-bounds subject-fds forged-speed"), so that the long forged-speed
# step can have a call of its own.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d /tmp/trust-checks.XXXX)}
PY=${PY:-python3}
mkdir -p "$OUT"
export GRADER_CACHE=/tmp/trust-checks/cache
mkdir -p "$GRADER_CACHE/sdists"
cp .gpu/cache/sdists/*.tar.gz "$GRADER_CACHE/sdists/" 2>/dev/null
WHEELS=$(ls .whl/*.whl | grep -v typing_extensions)
TE_OK=$($PY -c 'from importlib.metadata import version as v; print(int(tuple(map(int, v("typing_extensions").split(".")[:2])) >= (4, 16)))' 2>/dev/null || echo 0)
[ "$TE_OK" = 1 ] || WHEELS="$WHEELS $(ls .whl/typing_extensions-*.whl)"
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade $WHEELS > "$OUT/install.log" 2>&1
STEPS=${TRUST_STEPS:-"memory-bounds subject-fds forged-speed"}
step() {  # step NAME LIMIT CMD...
  local name=$1 limit=$2; shift 2
  [ "$name" = bases ] || [[ " $STEPS " == *" $name "* ]] || return 0
  local t0; t0=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.txt"
  tail -n 15 "$OUT/$name.log"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$OUT/summary.txt"
step bases 120 $PY grade.py bases --task minimax-qk-norm
step memory-bounds 150 $PY -m pytest tests/adversarial/test_isolation.py -m gpu -q -p no:cacheprovider -rA
step subject-fds 60 $PY scripts/measure_subject_fds.py --gpu
step forged-speed "${SPEED_LIMIT:-330}" $PY -m pytest tests/adversarial/test_gpu_speed_forgery.py -m gpu -q -p no:cacheprovider -rA
find /tmp/pytest-of-*/ -name results.json -path '*out*' -exec cp {} "$OUT/" \; 2>/dev/null
exit 0
