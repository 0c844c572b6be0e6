#!/usr/bin/env bash
# One-shot GPU batch for the grader: run from the repository root on a CUDA machine (the lent H200 here).
#
#   bash scripts/gpu/run_gpu_batch.sh            # on the GPU machine; results land in $OUT
#   GPU_KIT_DRY=1 OUT=/tmp/kit bash scripts/gpu/run_gpu_batch.sh   # CPU smoke test (--gpu off, local venv)
#
# It needs, beside the working tree: .whl/ (wheels for what the image lacks, see docs/gpu.md) and
# .gpu/cache/sdists/vllm-0.24.0.tar.gz (the GPU machine cannot download). Optional: .gpu/bin/{git,patch}.gz,
# used only where the machine has no git / patch on the sandbox's PATH (grader/sandbox/tooling.py runs them
# contained, with PATH=/usr/local/bin:/usr/bin:/bin and /tmp hidden), and .gpu/upstream/vllm-0.25.0-pkg.tar.xz.
#
# Every step is time-boxed against one deadline (GPU_KIT_BUDGET seconds, default 530), in priority order:
# probes, bases, validate-rubrics (GPU) while grade (CPU, for comparison) runs niced in the background,
# grade (GPU), CPU-vs-GPU comparison, benchmarks (each one run over all its trees, samples interleaved),
# minimax's speed test on the reference alone (GPU_KIT_SPEED_TEST=1), five-secret tests and mutation runs on the
# machine's CPUs (GPU_KIT_SECRETS, GPU_KIT_MUTATE).
# What comes back ($OUT): summary.txt, compare.txt, gpu-results.tar.gz (all logs and outputs), grade-gpu.json,
# grade-cpu.json, validate-on.txt, bench-moe.{txt,json}, bench-qk.{txt,json}, speed-test-reference.txt.

set -x
set -o pipefail
export PYTHONUNBUFFERED=1
ROOT=$(pwd)
START=$(date +%s)
BUDGET=${GPU_KIT_BUDGET:-530}
DEADLINE=$((START + BUDGET))
DRY=${GPU_KIT_DRY:-0}
OUT=${OUT:-$(mktemp -d /tmp/gpu-kit-out.XXXX)}
mkdir -p "$OUT"
R=${GPU_KIT_WORK:-/tmp/gpu-kit}/results          # everything that gets tarred
W=${GPU_KIT_WORK:-/tmp/gpu-kit}                  # scratch: cache, bench trees
rm -rf "$W"; mkdir -p "$R" "$W"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
TASKS=${GPU_KIT_TASKS:-"int8-kv-rounding moe-swap-ab minimax-qk-norm fp8-moe-lora"}
# Benchmarks: "moe" (bench/moe_swap_ab.py) and "qk" (bench/minimax_qk_norm.py), each one invocation over its trees
# (labels: base, reference, upstream-0.25.0 for moe when carried, or a sample of candidates/<task>/); "none": none.
BENCH=${GPU_KIT_BENCH:-"moe qk"}
MOE_TREES=${GPU_KIT_MOE_TREES:-"base reference upstream-0.25.0"}
QK_TREES=${GPU_KIT_QK_TREES:-"base reference"}
SPEED_TEST=${GPU_KIT_SPEED_TEST:-0}
# Bases to build: the tasks graded, and those the benchmarks and the speed test need.
BASE_TASKS=$TASKS
[[ " $BENCH " == *" moe "* ]] && BASE_TASKS="$BASE_TASKS moe-swap-ab"
{ [[ " $BENCH " == *" qk "* ]] || [ "$SPEED_TEST" = 1 ]; } && BASE_TASKS="$BASE_TASKS minimax-qk-norm"
BASE_TASKS=$(echo $BASE_TASKS | tr ' ' '\n' | awk '!seen[$0]++' | tr '\n' ' ')
if [ "$DRY" = 1 ]; then
  PY=${GPU_KIT_PY:-$ROOT/.venv/bin/python}; GPU=off; JOBS_GPU=1; JOBS_CPU=1; BENCH_DEV=cpu
else
  PY=${GPU_KIT_PY:-python3}; GPU=on; JOBS_GPU=${GPU_KIT_JOBS_GPU:-4}; JOBS_CPU=${GPU_KIT_JOBS_CPU:-12}; BENCH_DEV=cuda
fi
export GRADER_CACHE=$W/cache
export GRADER_SCRATCH=${GRADER_SCRATCH:-}          # empty: the grader picks /dev/shm

note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((DEADLINE - $(date +%s))); }
# step NAME LIMIT CMD...: run CMD with its output in $R/NAME.log, time-boxed by LIMIT and the deadline.
step() {
  local name=$1 limit=$2; shift 2
  local remain; remain=$(( $(left) - 20 ))
  [ "$remain" -lt "$limit" ] && limit=$remain
  if [ "$limit" -lt 15 ]; then note "SKIP $name (deadline: $(left)s left)"; return 99; fi
  local t0; t0=$(date +%s)
  echo "=== $name (limit ${limit}s)"
  timeout -k 10 "$limit" "$@" > "$R/$name.log" 2>&1
  local rc=$?
  local what=""; [ $rc = 124 ] || [ $rc = 137 ] && what=" TIMEOUT"
  note "$(printf '%-34s rc=%-3s %4ss%s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$what")"
  tail -n 6 "$R/$name.log"
  return $rc
}
pack() {  # bring back whatever exists now; called after every major step so a kill still leaves results
  tar -C "$(dirname "$R")" -czf "$OUT/gpu-results.tar.gz.tmp" "$(basename "$R")" 2>/dev/null \
    && mv "$OUT/gpu-results.tar.gz.tmp" "$OUT/gpu-results.tar.gz"
  [ -f "$R/grade-gpu/results.json" ] && cp "$R/grade-gpu/results.json" "$OUT/grade-gpu.json"
  [ -f "$R/grade-cpu/results.json" ] && cp "$R/grade-cpu/results.json" "$OUT/grade-cpu.json"
  return 0
}
trap pack EXIT

note "gpu kit: dry=$DRY gpu=$GPU tasks=[$TASKS] budget=${BUDGET}s python=$PY start=$(date -u +%FT%TZ)"

# ------------------------------------------------------------------ 0. tools the grader shells out to
# The grader runs git apply / patch contained (grader/sandbox/tooling.py): PATH=/usr/local/bin:/usr/bin:/bin, and
# /tmp is covered in the sandbox's view. So each tool must be found on that PATH, not merely on ours: one found
# elsewhere is linked into /usr/local/bin, a missing one unpacked there from .gpu/bin/; /tmp/gpu-kit-bin is the
# last resort (then uncontained git works, contained apply does not find it).
SANDBOX_PATH=/usr/local/bin:/usr/bin:/bin
for tool in git patch; do
  PATH=$SANDBOX_PATH command -v "$tool" >/dev/null 2>&1 && continue
  found=$(command -v "$tool" 2>/dev/null)
  if [ -n "$found" ] && mkdir -p /usr/local/bin 2>/dev/null && ln -sf "$(readlink -f "$found")" "/usr/local/bin/$tool" 2>/dev/null; then
    note "linked $tool ($found) into /usr/local/bin for the sandbox"
  elif [ -f ".gpu/bin/$tool.gz" ] && mkdir -p /usr/local/bin 2>/dev/null \
      && gunzip -c ".gpu/bin/$tool.gz" > "/usr/local/bin/$tool" 2>/dev/null && chmod 755 "/usr/local/bin/$tool"; then
    note "using carried $tool (/usr/local/bin)"
  elif [ -z "$found" ] && [ -f ".gpu/bin/$tool.gz" ]; then
    mkdir -p /tmp/gpu-kit-bin && gunzip -c ".gpu/bin/$tool.gz" > "/tmp/gpu-kit-bin/$tool" \
      && chmod +x "/tmp/gpu-kit-bin/$tool" && export PATH=/tmp/gpu-kit-bin:$PATH \
      && note "using carried $tool from /tmp/gpu-kit-bin: /usr/local/bin not writable, contained apply will not find it"
  else
    note "WARNING: no $tool on $SANDBOX_PATH: contained apply steps that need it will fail"
  fi
done
git --version; patch --version | head -1
{ for tool in git patch; do echo "$tool: ours $(command -v $tool), sandbox's $(PATH=$SANDBOX_PATH command -v $tool)"; done; } | tee -a "$SUMMARY"

# ------------------------------------------------------------------ 1. wheels into the interpreter's own site-packages
# Hidden tests run with a minimal environment (no PYTHONPATH passes through), so the wheels go where the
# interpreter finds them by itself. --target /tmp/site + PYTHONPATH is the fallback (parent process only).
if [ "$DRY" != 1 ] && ls .whl/*.whl >/dev/null 2>&1; then
  WHEELS=$(ls .whl/*.whl | grep -v typing_extensions)
  TE_OK=$($PY -c 'from importlib.metadata import version as v; print(int(tuple(map(int, v("typing_extensions").split(".")[:2])) >= (4, 16)))' 2>/dev/null || echo 0)
  [ "$TE_OK" = 1 ] || WHEELS="$WHEELS $(ls .whl/typing_extensions-*.whl 2>/dev/null)"
  if step install-wheels 120 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade $WHEELS; then
    :
  else
    note "install into site-packages failed: falling back to --target /tmp/site (hidden tests may miss them)"
    step install-wheels-target 120 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $WHEELS
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
fi

# ------------------------------------------------------------------ 2. probes
{
  nvidia-smi || true
  $PY - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
import torch, triton
print("torch", torch.__version__, "triton", triton.__version__, "cuda available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
for m in ["pytest", "jinja2", "git", "unidiff", "pydantic", "pydantic_core", "zmq", "cbor2", "gguf", "openai",
          "openai_harmony", "transformers", "typing_extensions", "aiohttp", "regex", "psutil", "einops",
          "compressed_tensors", "pybase64", "cachetools", "PIL"]:
    try:
        mod = importlib.import_module(m)
        v = getattr(mod, "__version__", "")
        print(f"  ok   {m} {v if isinstance(v, str) else ''}")
    except Exception as e:
        print(f"  FAIL {m}: {type(e).__name__}: {e}")
# The grader's own dependencies (pyproject.toml), against what is installed; torch and triton are the image's
# CUDA builds at vLLM's pins, not pyproject's CPU pins.
import tomllib
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
for spec in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    req = Requirement(spec)
    if req.name in ("torch", "triton"):
        continue
    try:
        have = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        print(f"  FAIL pyproject {spec}: not installed")
        continue
    ok = not req.specifier or req.specifier.contains(have, prereleases=True)
    print(f"  {'ok  ' if ok else 'FAIL'} pyproject {spec}: {have}")
EOF
} > "$R/probe-env.log" 2>&1
cat "$R/probe-env.log"
grep -E "^(torch|device|python)|FAIL" "$R/probe-env.log" | tee -a "$SUMMARY"
# What the sandbox (grader/sandbox/contain.py) finds allowed here, and whether a Triton kernel runs (on CUDA with
# --gpu on) in a process contained as a subject is: own uid, private /tmp, repository and caches hidden.
step probe-sandbox 120 $PY scripts/gpu/diagnose/probe_sandbox.py --gpu "$GPU"
grep -E '"(user|tasks|memory|network|namespaces|filesystem)"|^uid|contained' "$R/probe-sandbox.log" | tee -a "$SUMMARY"
# CPU-evidence subjects run under RLIMIT_AS = contain.ADDRESS_SPACE_BYTES (32 GiB, grader/sandbox/contain.py);
# GPU subjects get none (grader/pipeline/run.py: the memory cgroup caps them). Informational: does CUDA start under it?
if [ "$GPU" = on ]; then
  # Triton's @jit reads the kernel's source, so the probe is a file (python -c fails: "@jit functions should be
  # defined in a Python file", as the 2026-11-29 run showed).
  cat > "$W/probe_rlimit_as.py" <<'PYEOF'
import resource
resource.setrlimit(resource.RLIMIT_AS, (32 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))  # contain.ADDRESS_SPACE_BYTES
import torch, triton, triton.language as tl
x = torch.ones(1 << 20, device="cuda")
@triton.jit
def k(p, n: tl.constexpr):
    o = tl.arange(0, n); tl.store(p + o, tl.load(p + o) * 2)
k[(1,)](x, 1024)
torch.cuda.synchronize(); print("CUDA + Triton under RLIMIT_AS=32GiB: ok", float(x[:1024].sum()))
PYEOF
  step probe-rlimit-as 90 $PY "$W/probe_rlimit_as.py"
fi

# ------------------------------------------------------------------ 3. seed the cache and build the bases
mkdir -p "$GRADER_CACHE/sdists"
cp .gpu/cache/sdists/*.tar.gz "$GRADER_CACHE/sdists/" && ls -la "$GRADER_CACHE/sdists" | tee -a "$R/seed.log"
for T in $BASE_TASKS; do
  step "bases-$T" 150 $PY grade.py bases --verify --task "$T" &
done
wait
pack

# One folder holding candidates/<task>/ for the selected tasks: ids come out as <task>/<name> and each task is
# taken from its folder (grading candidates/<task> directly would infer the task from each diff instead).
CANDS=$W/candidates; mkdir -p "$CANDS"
for T in $TASKS; do cp -r "candidates/$T" "$CANDS/$T"; done

# ------------------------------------------------------------------ 4. CPU grading in the background (GPU runs only)
# It touches no GPU (CUDA_VISIBLE_DEVICES=""), runs niced so GPU-side timing tests keep the CPUs they need, and
# overlaps the GPU steps instead of adding its minutes after them.
CPU_PID=""
if [ "$GPU" = on ] && [ "${GPU_KIT_CPU:-1}" = 1 ]; then
  step grade-cpu 400 nice -n 15 $PY grade.py "$CANDS" --out "$R/grade-cpu" --gpu off --jobs "$JOBS_CPU" ${GPU_KIT_GRADE_ARGS:-} &
  CPU_PID=$!
fi

# GPU_KIT_RUBRICS=0 skips steps 5 and 6 (validate-rubrics, grading): a benchmark-only run. GPU_KIT_GRADE=0 skips
# step 6 only (validation without grading the samples).
if [ "${GPU_KIT_RUBRICS:-1}" = 1 ]; then
# ------------------------------------------------------------------ 5. validate-rubrics (base + reference) per task
for T in $TASKS; do
  step "validate-$GPU-$T" "${GPU_KIT_VALIDATE_LIMIT:-220}" $PY grade.py validate-rubrics --gpu "$GPU" --task "$T" --out "$R/validate-$GPU-$T" &
  sleep 1
done
wait $(jobs -p | grep -vx "${CPU_PID:-none}")
cat "$R"/validate-"$GPU"-*.log > "$OUT/validate-$GPU.txt" 2>/dev/null
pack

# ------------------------------------------------------------------ 6. grade the sample candidates
GNAME=grade-gpu; [ "$GPU" = off ] && GNAME=grade-cpu
if [ "${GPU_KIT_GRADE:-1}" = 1 ]; then
  step "$GNAME" "${GPU_KIT_GRADE_LIMIT:-300}" $PY grade.py "$CANDS" --out "$R/$GNAME" --gpu "$GPU" --jobs "$JOBS_GPU" ${GPU_KIT_GRADE_ARGS:-}
fi
pack
if [ -n "$CPU_PID" ]; then
  wait "$CPU_PID"
  pack
  if [ -f "$R/grade-gpu/results.json" ] && [ -f "$R/grade-cpu/results.json" ]; then
    $PY scripts/gpu/diagnose/compare_cpu_gpu.py "$R/grade-cpu/results.json" "$R/grade-gpu/results.json" \
      --expected candidates > "$OUT/compare.txt" 2>&1
    cat "$OUT/compare.txt"; tail -n 3 "$OUT/compare.txt" >> "$SUMMARY"
  fi
fi
fi

# ------------------------------------------------------------------ 7. benchmarks on patched trees
# Trees: a copy of the built base (no .git) with reference_impl/<task>.diff or a candidate applied, or the carried
# upstream 0.25.0 package. Each benchmark is one invocation over all its trees: one worker process per tree,
# samples taken in turn from each (bench/interleaved.py), so nothing else may use the GPU meanwhile (the
# validation and grading steps above have finished).
make_tree() {  # make_tree TASK LABEL -> prints the tree's path
  local dest=$W/trees/$1/$2 diff=""
  rm -rf "$dest"; mkdir -p "$dest"
  if [ "$2" = upstream-0.25.0 ]; then
    # .gpu/upstream/vllm-0.25.0-pkg.tar.xz holds vllm/ and vllm.egg-info/ of the PyPI sdist (sha256 7e04e2b3...)
    tar -C "$dest" -xJf .gpu/upstream/vllm-0.25.0-pkg.tar.xz || return 1
    echo "$dest"; return 0
  fi
  tar -C "$GRADER_CACHE/bases/$1" --exclude=.git -cf - . | tar -C "$dest" -xf - || return 1
  case $2 in base) ;; reference) diff=reference_impl/$1.diff;; *) diff=candidates/$1/$2.diff;; esac
  if [ -n "$diff" ]; then
    (cd "$dest" && { git apply --whitespace=nowarn "$ROOT/$diff" \
      || patch -p1 --forward --batch --fuzz=3 -i "$ROOT/$diff"; }) > "$R/tree-$1-$2.log" 2>&1 \
      || { note "tree $1/$2: diff does not apply" >&2; return 1; }
  fi
  echo "$dest"
}
tree_args() {  # tree_args TASK LABEL... -> "--tree LABEL=PATH ..." for the trees that could be made
  local task=$1 out="" t; shift
  for L in "$@"; do
    if [ "$L" = upstream-0.25.0 ] && [ ! -f .gpu/upstream/vllm-0.25.0-pkg.tar.xz ]; then continue; fi
    t=$(make_tree "$task" "$L") && out="$out --tree $L=$t"
  done
  echo "$out"
}
mkdir -p "$R/bench"
if [[ " $BENCH " == *" moe "* ]]; then
  extra=""; [ "$DRY" = 1 ] && extra="--dry-run"
  step bench-moe "${GPU_KIT_BENCH_MOE_LIMIT:-240}" $PY bench/moe_swap_ab.py $(tree_args moe-swap-ab $MOE_TREES) \
    --out "$R/bench/moe.json" $extra
  cp "$R/bench-moe.log" "$OUT/bench-moe.txt" 2>/dev/null; cp "$R/bench/moe.json" "$OUT/bench-moe.json" 2>/dev/null
  rm -rf "$W/trees/moe-swap-ab"
  pack
fi
if [[ " $BENCH " == *" qk "* ]]; then
  if [ "$DRY" = 1 ]; then extra="--device cpu --dry-run"
  else extra="--tp 1 4 8 --tokens 1 16 256 1024 4096 16384 --warmup 10 --timeout 200"; fi
  step bench-qk "${GPU_KIT_BENCH_QK_LIMIT:-180}" $PY bench/minimax_qk_norm.py $(tree_args minimax-qk-norm $QK_TREES) \
    --json "$R/bench/qk.json" $extra
  cp "$R/bench-qk.log" "$OUT/bench-qk.txt" 2>/dev/null; cp "$R/bench/qk.json" "$OUT/bench-qk.json" 2>/dev/null
  rm -rf "$W/trees/minimax-qk-norm"
  pack
fi

# ------------------------------------------------------------------ 8. minimax's speed test alone, on the reference
# (GPU_KIT_SPEED_TEST=1): the GPU-marked test_faster_than_regressed_path through grade.py run-tests (judge and
# sandboxed subject), and before it the test's runner outside any sandbox on the same cases, its samples put
# through the test's interval (so a failure of the sandboxed run can be told from one of the runner).
if [ "$SPEED_TEST" = 1 ] && [ "$GPU" = on ]; then
  if ref=$(make_tree minimax-qk-norm reference); then
    cat > "$W/speed_direct.py" <<'PYEOF'
import importlib.util, json, subprocess, sys
from pathlib import Path
root, tree = Path.cwd(), sys.argv[1]
sys.path[:0] = [str(root / "rubrics"), str(root / "bench")]
spec = importlib.util.spec_from_file_location("qk_tests", root / "rubrics/minimax-qk-norm/tests/test_minimax_qk_norm.py")
tests = importlib.util.module_from_spec(spec); spec.loader.exec_module(tests)
import stats
cases = [dict(zip(("name", "q", "kv", "tp", "tokens", "mode"), c), rounds=tests.SPEED_ROUNDS,
              inner=tests.SPEED_INNER[c[5]], warmup=tests.SPEED_WARMUP) for c in tests.SPEED_CASES]
paths = [tree, str(root / "rubrics/minimax-qk-norm/probes"), str(root / "rubrics/shared_probes")]
env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "GRADER_GPU": "1", "PYTHONPATH": ":".join(paths)}
out = subprocess.run([sys.executable, str(root / "rubrics/minimax-qk-norm/probes/speed_runner.py"), json.dumps(cases)],
                     capture_output=True, text=True, env=env, timeout=170)
report = json.loads(out.stdout.strip().splitlines()[-1])
print(json.dumps({k: v for k, v in report.items() if k != "cases"}))
for name, rec in report["cases"].items():
    if "candidate_samples_us" not in rec:
        print(name, "ERROR", (rec.get("error") or rec.get("baseline_error") or "")[:600]); continue
    cand, base = rec["candidate_samples_us"], rec["regressed_samples_us"]
    low, high = stats.bootstrap_ratio_ci(cand, base, paired=True, seed=stats.seed_of(name))
    print(f"{name}: candidate {stats.median(cand):.2f} us, regressed {stats.median(base):.2f} us, ratio "
          f"{stats.ratio_of_medians(cand, base):.3f} (95% CI {low:.3f}-{high:.3f}), passes: {high <= tests.SPEED_MARGIN}")
PYEOF
    step speed-runner-direct 180 $PY "$W/speed_direct.py" "$ref"
    cp "$R/speed-runner-direct.log" "$OUT/speed-runner-direct.txt" 2>/dev/null
    step speed-test-reference "${GPU_KIT_SPEED_TEST_LIMIT:-200}" \
      $PY grade.py run-tests --task minimax-qk-norm --tree "$ref" -k test_faster_than_regressed_path --gpu on --timeout 190
    cp "$R/speed-test-reference.log" "$OUT/speed-test-reference.txt" 2>/dev/null
  fi
  pack
fi

# ------------------------------------------------------------------ 9. CPU measurements on the machine's cores
# GPU_KIT_SECRETS="TASK ...": the five-secret test of each task (tests/e2e/test_secrets.py, the five secrets at
# once, GPU_KIT_SECRETS_JOBS samples at a time each, default 3); GPU_KIT_MUTATE="TASK ...": grade.py mutate of each
# (--jobs GPU_KIT_MUTATE_JOBS). Both with CPU evidence
# (CUDA_VISIBLE_DEVICES=""), side by side, each time-boxed by the deadline; logs in $OUT/secrets-TASK.txt and
# $OUT/mutate-TASK.txt, mutation.json in the results tarball.
for T in ${GPU_KIT_SECRETS:-}; do
  CUDA_VISIBLE_DEVICES="" GRADER_TEST_SECRETS_AT_ONCE=5 GRADER_TEST_SAMPLE_JOBS=${GPU_KIT_SECRETS_JOBS:-3} GRADER_TEST_TASKS=$T \
    step "secrets-$T" "${GPU_KIT_SECRETS_LIMIT:-500}" $PY -m pytest tests/e2e/test_secrets.py -q -m slow -k five &
  sleep 1
done
for T in ${GPU_KIT_MUTATE:-}; do
  CUDA_VISIBLE_DEVICES="" step "mutate-$T" "${GPU_KIT_MUTATE_LIMIT:-500}" \
    $PY grade.py mutate --task "$T" --jobs "${GPU_KIT_MUTATE_JOBS:-8}" --out "$R/mutate-$T" &
  sleep 1
done
wait
for log in "$R"/secrets-*.log "$R"/mutate-*.log; do [ -f "$log" ] && cp "$log" "$OUT/$(basename "$log" .log).txt"; done
pack

note "done in $(( $(date +%s) - START ))s"
pack
cat "$SUMMARY"
