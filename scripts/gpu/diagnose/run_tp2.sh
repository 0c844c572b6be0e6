#!/usr/bin/env bash
# Real TP=2 run of minimax-qk-norm on a 2-GPU machine (kind nvidia-h200-x2), plus the single-GPU benchmarks
# that do not fit in run_gpu_batch.sh's budget, spread over the two GPUs. Run from the repository root:
#
#   bash scripts/gpu/diagnose/run_tp2.sh          # carry [".whl", ".gpu"]; results land in $OUT
#
# Steps, against one deadline (GPU_TP2_BUDGET seconds, default 540):
#   1. wheels into site-packages, carried git/patch if missing (as run_gpu_batch.sh does);
#   2. build + verify the minimax-qk-norm (and moe-swap-ab) bases from the carried sdist;
#   3. trees: base, and base + reference_impl/<task>.diff (both benchmarks install the probes' stand-in for the
#      compiled extension vllm/platforms/cuda.py imports);
#   4. bench/minimax_qk_norm.py --tp2-real on base and reference: NCCL, one process per GPU (torch mp.spawn),
#      correctness of the gathered TP=2 output against a full-width fp32 RMSNorm, host time with the all-reduce;
#   5. GPU_TP2_BENCH=1 (default): single-GPU benchmarks, each one invocation over its trees (samples interleaved),
#      GPU 0: qk base and reference; GPU 1: moe base, reference and (when .gpu/upstream/ is carried) upstream
#      0.25.0. Then merge_bench.py prints both reports.
# What comes back: tp2.txt, bench.txt, summary-tp2.txt, tp2-results.tar.gz.
set -x
set -o pipefail
export PYTHONUNBUFFERED=1
# NVLink multicast stays off (the lent machines' rule), also for the processes the bench spawns.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$(pwd)
START=$(date +%s)
DEADLINE=$((START + ${GPU_TP2_BUDGET:-540}))
OUT=${OUT:-$(mktemp -d /tmp/tp2-out.XXXX)}
mkdir -p "$OUT"
W=${GPU_TP2_WORK:-/tmp/gpu-tp2}; R=$W/results
rm -rf "$W"; mkdir -p "$R/bench"
PY=${GPU_KIT_PY:-python3}
export GRADER_CACHE=$W/cache
SUMMARY=$OUT/summary-tp2.txt; : > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((DEADLINE - $(date +%s))); }
step() {  # step NAME LIMIT CMD...: output in $R/NAME.log, time-boxed by LIMIT and the deadline
  local name=$1 limit=$2; shift 2
  local remain=$(( $(left) - 15 )); [ "$remain" -lt "$limit" ] && limit=$remain
  if [ "$limit" -lt 15 ]; then note "SKIP $name (deadline: $(left)s left)"; return 99; fi
  local t0; t0=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$R/$name.log" 2>&1
  local rc=$?; local what=""; { [ $rc = 124 ] || [ $rc = 137 ]; } && what=" TIMEOUT"
  note "$(printf '%-30s rc=%-3s %4ss%s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$what")"
  tail -n 8 "$R/$name.log"; return $rc
}
pack() { tar -C "$W" -czf "$OUT/tp2-results.tar.gz.tmp" results 2>/dev/null && mv "$OUT/tp2-results.tar.gz.tmp" "$OUT/tp2-results.tar.gz"; return 0; }
trap pack EXIT
note "tp2 run: start=$(date -u +%FT%TZ)"

for tool in git patch; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ -f ".gpu/bin/$tool.gz" ]; then
    mkdir -p /tmp/gpu-kit-bin && gunzip -c ".gpu/bin/$tool.gz" > "/tmp/gpu-kit-bin/$tool" \
      && chmod +x "/tmp/gpu-kit-bin/$tool" && export PATH=/tmp/gpu-kit-bin:$PATH && note "using carried $tool"
  fi
done
WHEELS=$(ls .whl/*.whl | grep -v typing_extensions)
TE_OK=$($PY -c 'from importlib.metadata import version as v; print(int(tuple(map(int, v("typing_extensions").split(".")[:2])) >= (4, 16)))' 2>/dev/null || echo 0)
[ "$TE_OK" = 1 ] || WHEELS="$WHEELS $(ls .whl/typing_extensions-*.whl 2>/dev/null)"
step install-wheels 120 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade $WHEELS
{ nvidia-smi; nvidia-smi topo -m; $PY -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0))'; env | grep -E "NCCL|MULTICAST|NVLS"; } > "$R/probe.log" 2>&1
grep -E "^torch|GPU0|GPU1|NCCL" "$R/probe.log" | tee -a "$SUMMARY"

mkdir -p "$GRADER_CACHE/sdists"; cp .gpu/cache/sdists/*.tar.gz "$GRADER_CACHE/sdists/"
BENCH=${GPU_TP2_BENCH:-1}
step bases-minimax-qk-norm 150 $PY grade.py bases --verify --task minimax-qk-norm &
[ "$BENCH" = 1 ] && step bases-moe-swap-ab 150 $PY grade.py bases --verify --task moe-swap-ab &
wait
make_tree() {  # make_tree TASK LABEL [DIFF] -> the tree's path
  local dest=$W/trees/$1/$2
  rm -rf "$dest"; mkdir -p "$dest"
  tar -C "$GRADER_CACHE/bases/$1" --exclude=.git -cf - . | tar -C "$dest" -xf - || return 1
  if [ -n "$3" ]; then
    (cd "$dest" && { git apply --whitespace=nowarn "$ROOT/$3" || patch -p1 --forward --batch --fuzz=3 -i "$ROOT/$3"; }) \
      > "$R/tree-$1-$2.log" 2>&1 || { note "tree $1/$2: diff does not apply" >&2; return 1; }
  fi
  echo "$dest"
}
QB=$(make_tree minimax-qk-norm base ""); QR=$(make_tree minimax-qk-norm reference reference_impl/minimax-qk-norm.diff)

# ---- real TP=2: NCCL, one process per GPU; one bench process per tree (reference first), so that a tree that
# hangs or overruns (the bench's subprocess timeout is not caught) costs only itself
for L in reference base; do
  T=$QR; [ "$L" = base ] && T=$QB
  step "tp2-$L" 150 $PY bench/minimax_qk_norm.py --tp2-real --tree "$L=$T" --json "$R/tp2-$L.json" --timeout 130
done
$PY - "$R"/tp2-reference.json "$R"/tp2-base.json > "$OUT/tp2.txt" 2>&1 <<'PYEOF'
import json, sys
for path in sys.argv[1:]:
    try:
        doc = json.load(open(path))
    except Exception as e:
        print(path, "missing:", e); continue
    for run in doc["runs"]:
        print("tree", run.get("name"), "| worker error:", (run.get("error") or "none")[-600:])
        for rk in run.get("ranks", []):
            print(f"  rank {rk['rank']}: error={rk['error'] and rk['error'][-800:]}")
            for r in rk.get("results") or []:
                print(f"    tokens={r['tokens']:5d} q/rank={r['q_per_rank']} kv/rank={r['kv_per_rank']} "
                      f"allclose(3e-2)={r['allclose_3e-2']} max_err_q={r['max_err_q']:.4g} "
                      f"max_err_k={r['max_err_k']:.4g} host_us={r['host_us_with_nccl_all_reduce']}")
PYEOF
cat "$OUT/tp2.txt"; pack

# ---- single-GPU benchmarks on the two GPUs in parallel
if [ "$BENCH" = 1 ]; then
  MB=$(make_tree moe-swap-ab base ""); MR=$(make_tree moe-swap-ab reference reference_impl/moe-swap-ab.diff)
  MOE_TREES="--tree base=$MB --tree reference=$MR"
  if [ -f .gpu/upstream/vllm-0.25.0-pkg.tar.xz ]; then  # vllm/ + vllm.egg-info/ of the 0.25.0 sdist, see docs/gpu.md
    mkdir -p "$W/trees/moe-upstream" && tar -C "$W/trees/moe-upstream" -xJf .gpu/upstream/vllm-0.25.0-pkg.tar.xz \
      && MOE_TREES="$MOE_TREES --tree upstream-0.25.0=$W/trees/moe-upstream"
  fi
  (
    export CUDA_VISIBLE_DEVICES=0
    step bench-qk 240 $PY bench/minimax_qk_norm.py --tree "base=$QB" --tree "reference=$QR" --json "$R/bench/qk.json" \
      --tp 1 4 8 --tokens 1 16 256 1024 4096 16384 --warmup 10 --timeout 200
  ) &
  (
    # base, reference and upstream side by side in one invocation, alone on its GPU
    export CUDA_VISIBLE_DEVICES=1
    step bench-moe 600 $PY bench/moe_swap_ab.py $MOE_TREES --out "$R/bench/moe.json"
  ) &
  wait
  $PY scripts/gpu/diagnose/merge_bench.py "$R/bench" > "$OUT/bench.txt" 2>&1; cat "$OUT/bench.txt"
fi
note "done in $(( $(date +%s) - START ))s"
pack
