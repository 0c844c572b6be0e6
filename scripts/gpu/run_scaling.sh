#!/usr/bin/env bash
# Scaling on the lent 16-core H200 machine: bench/scaling.py over one corpus, in two calls of the device tool.
#
#   SCALING_PHASE=local bash scripts/gpu/run_scaling.sh   # carry [".whl", ".gpu"]: local backend, CPU evidence at
#                                                         # 16..1 jobs, then GPU evidence for the GPU tasks at 4..1
#   SCALING_PHASE=ray   bash scripts/gpu/run_scaling.sh   # carry [".ray"], at once after the first (the machine stays
#                                                         # warm 30 s): the Ray backend over the same corpus
#
# Two calls because one call's carry (64 MiB with the working tree) holds the wheels and the sdist, or the Ray
# wheel, not both. The second call finds the first's cache and bases under /tmp/scaling, measures the Ray runs and
# the local runs the first did not make (bench/scaling.py prints the local runs it reuses with when they ran), and
# checks every candidate's result across both backends. .ray/ holds ray-2.60.0 for cp312 (its ELF files stripped,
# the rllib, tune, train, serve, data, llm and workflow packages left out) as ray-pkg.tar.xz and the wheels Ray
# needs that the image lacks; `bash scripts/gpu/make_ray_carry.sh` makes it (28 MB).
# SCALING_STEPS (phase local; default "cpu gpu") picks the CPU-evidence runs, the GPU-evidence runs or both, and
# "whole": the whole corpus (SCALING_SIZE, default 1000) at SCALING_WHOLE_JOBS (default 16) jobs, CPU evidence.
# SCALING_PER_JOB (default 2) candidates are graded once per job in the CPU-evidence runs of either phase, each run
# SCALING_REPEAT times (default 1; bench/scaling.py --repeat; the Ray phase's GPU runs too). SCALING_RAY_STEPS
# (phase ray; default "cpu") picks the Ray runs: "cpu", and "gpu" for GPU evidence on Ray beside the local phase's
# `gpu` step. A step not asked for is noted as not run. SCALING_RAY_BACKENDS (default "ray-cluster") says how Ray
# runs: "ray-cluster", grade joining a cluster of --jobs CPUs that is up (and idle) before the clock starts, as where
# grading at scale runs on Ray; "ray", grade starting a local cluster inside each run (bench/ray_cluster.py says what
# the difference is).
# Budget the calls from what they cost on the lent machine (2026-12-04): before its first run a step makes the
# installation's one-time records for its tasks and evidence, 170-270 s with GPU evidence; the Ray phase makes
# them again, since the environment with Ray's packages installed is another identity; a GPU run at 4, 2 or 1
# jobs (2 candidates per job) takes 70-110 s. CPU evidence at 16..1 jobs: 255 s with 4 candidates per job (the
# local phase's cpu step, records included), 339 s for the Ray phase's ray-cluster runs beside them; with 8 per
# job, more than 470 s on a slow machine (its 1-job run was cut). At 1e74742, in one warm machine: the local phase
# at SCALING_JOBS="16 1", 4 per job, 166 s with its records; the Ray phase over them with SCALING_REPEAT=2 335 s;
# SCALING_RAY_STEPS=gpu at 1 job 383 s (with the GPU records), then at "4 2 1" 324 s (reusing the 1-job runs).
# At af07a15, on a machine 1.37x slower on the same GPU runs: the Ray phase's GPU step at 4 jobs, 3 rounds over
# one earlier call's runs, 307 s; bench/ray_actor_cost.py --jobs 4 --gpu over one candidate 126-136 s; the whole
# step made its CPU records in about 155 s and its limit of 545 s cut the run about 390 s in (289.6 s at
# df1aad1 on a faster machine). So give the whole corpus a call of its own, its records made by the call before:
# SCALING_STEPS=cpu SCALING_JOBS=1 SCALING_PER_JOB=1 makes them (the whole step copies them from the cpu step's
# folder), then SCALING_STEPS=whole SCALING_WHOLE_LIMIT=570.
# The machine is given back 30 s after a call ends: start the next one at once.
# Carry: with the working tree at 19 MB, .whl, .gpu/cache and .gpu/bin together pass the 64 MiB limit. A warm
# machine keeps the ignored paths an earlier call carried, so carry .gpu/cache and .gpu/bin/{git,patch}.gz in a
# first call that runs `ls`, then .whl with the local phase.
# What comes back ($OUT): summary.txt, scaling-cpu.{txt,json}, scaling-gpu.{txt,json}, scaling-whole.{txt,json},
# scaling-ray.{txt,json}, scaling-ray-gpu.{txt,json}, and per step STEP-runs.tar.xz (each run's results.json and
# timestamped log).
set -o pipefail
export PYTHONUNBUFFERED=1
PHASE=${SCALING_PHASE:-local}
OUT=${OUT:-$(mktemp -d /tmp/scaling-out.XXXX)}
PY=${PY:-python3}
PER_JOB=${SCALING_PER_JOB:-2}
REPEAT=${SCALING_REPEAT:-1}
JOBS=${SCALING_JOBS:-"16 8 4 2 1"}
GPU_JOBS=${SCALING_GPU_JOBS:-"4 2 1"}
GPU_PER_JOB=${SCALING_GPU_PER_JOB:-2}
# CPU evidence: the tasks whose CPU checks run on this image. vit-fp8-blackwell's base is vLLM 0.23.0, whose sdist
# does not fit in the carry; moe-swap-ab, rocm-mx-emulation and triton-kv-past-seq-len run their kernels through
# the Triton interpreter on a CPU, which Triton 3.6.0 (the image's) cannot do for their loops: their controls fail
# there (environment_error), as designed.
TASKS=${SCALING_TASKS:-"fp8-moe-lora int8-kv-rounding minimax-qk-norm xpu-kv-cache-dtypes"}
GPU_TASKS=${SCALING_GPU_TASKS:-"fp8-moe-lora int8-kv-rounding moe-swap-ab"}
export GRADER_CACHE=/tmp/scaling/cache
mkdir -p "$OUT" "$GRADER_CACHE/sdists" /tmp/scaling
SUMMARY=$OUT/summary.txt
note() { echo "$*" | tee -a "$SUMMARY"; }
# The device's copy of the repository may carry an older .git than the tree it runs: the sources' own digest
# (`bash scripts/gpu/diagnose/source_digest.sh` here) says which tree ran.
note "phase $PHASE at ${SCALING_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)} (sources $(bash scripts/gpu/diagnose/source_digest.sh)), $(nproc) cpus, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$SUMMARY"
# Whether the CPUs are cores or threads of fewer cores decides what efficiency at 16 jobs can be.
lscpu 2>/dev/null | grep -E "^(Model name|Socket|Core|Thread|CPU\(s\)|NUMA node\(s\))" | tee -a "$SUMMARY"
# Every run's results.json comes back compressed (the check costs per task are read from them: bench/check_costs.py).
# So do their timestamped logs (bench/scaling.py's timeline is read from them). One archive per step: the device
# tool brings back at most 8 files (a Ray phase's 10 runs as files of their own lost its table and JSON).
keep_results() {
  ( cd /tmp/scaling/"$1" 2>/dev/null || exit 0; shopt -s nullglob; files=(out-*/results.json log-*.txt)
    [ ${#files[@]} -eq 0 ] || tar -cJf "$OUT/$1-runs.tar.xz" "${files[@]}" )
}
# step LABEL ASKED NAME OUTPUT LIMIT BENCH-ARGS...: bench/scaling.py in /tmp/scaling/NAME under a time limit
# when NAME is among the ASKED steps, its output to $OUT/OUTPUT.{txt,json}; a step not asked for is noted as not
# run (not as a failure). Either way the runs in /tmp/scaling/NAME so far come back.
step() {
  local label=$1 asked=$2 name=$3 output=$4 limit=$5 t0
  shift 5
  t0=$(date +%s)
  if [[ " $asked " == *" $name "* ]]; then
    timeout -k 10 "$limit" $PY bench/scaling.py "$@" --work "/tmp/scaling/$name" --json "$OUT/$output.json" 2>&1 \
      | tee "$OUT/$output.txt"
    note "$label: rc=$? $(( $(date +%s) - t0 )) s"
  else
    note "$label: not run"
  fi
  keep_results "$name"
}

if [ "$PHASE" = local ]; then
  WHEELS=$(ls .whl/*.whl | grep -v typing_extensions)
  TE_OK=$($PY -c 'from importlib.metadata import version as v; print(int(tuple(map(int, v("typing_extensions").split(".")[:2])) >= (4, 16)))' 2>/dev/null || echo 0)
  [ "$TE_OK" = 1 ] || WHEELS="$WHEELS $(ls .whl/typing_extensions-*.whl)"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade $WHEELS > /tmp/scaling/install.log 2>&1
  # The image's packages and the carried wheels come without bytecode, and its interpreter runs with
  # PYTHONDONTWRITEBYTECODE: every fresh interpreter (a warm worker's start, a cold judge, a probe's runner) would
  # compile torch from source. A pip install compiles them; so does this, once, before anything is timed.
  t0=$(date +%s)
  $PY -m compileall -q -j 0 "$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /tmp/scaling/compileall.log 2>&1
  note "bytecode compiled: rc=$? $(( $(date +%s) - t0 )) s"
  for tool in git patch; do
    command -v $tool >/dev/null || { gunzip -c .gpu/bin/$tool.gz > /usr/local/bin/$tool && chmod +x /usr/local/bin/$tool; }
  done
  cp .gpu/cache/sdists/*.tar.gz "$GRADER_CACHE/sdists/"
  t0=$(date +%s)
  for task in $(echo $TASKS $GPU_TASKS | tr " " "\n" | sort -u); do $PY grade.py bases --task "$task" > "/tmp/scaling/bases-$task.log" 2>&1 & done; wait
  note "bases: $(( $(date +%s) - t0 )) s"
  STEPS=${SCALING_STEPS:-"cpu gpu"}
  step "cpu local" "$STEPS" cpu scaling-cpu "${SCALING_CPU_LIMIT:-330}" --size "${SCALING_SIZE:-200}" \
    --per-job "$PER_JOB" --repeat "$REPEAT" --jobs $JOBS --backends local --gpu off --tasks $TASKS
  # The whole corpus's runs share the installation's records that the cpu step made (same tasks, evidence and
  # environment), rather than grading the samples again.
  [[ " $STEPS " == *" whole "* ]] && mkdir -p /tmp/scaling/whole && { cp -a /tmp/scaling/cpu/installation-made /tmp/scaling/cpu/cache-installation /tmp/scaling/whole/ 2>/dev/null; true; }
  step "whole corpus local" "$STEPS" whole scaling-whole "${SCALING_WHOLE_LIMIT:-540}" \
    --size "${SCALING_SIZE:-1000}" --jobs ${SCALING_WHOLE_JOBS:-16} --backends local --gpu off --tasks $TASKS
  step "gpu local" "$STEPS" gpu scaling-gpu "${SCALING_GPU_LIMIT:-200}" --size "${SCALING_SIZE:-200}" \
    --per-job "$GPU_PER_JOB" --jobs $GPU_JOBS --backends local --gpu on --tasks $GPU_TASKS \
    --budget "${SCALING_GPU_BUDGET:-0}"
else
  # The local phase installed the wheels and built the bases here; its CPU runs, where it made them, are reused.
  [ -f /tmp/scaling/install.log ] || { note "no local phase ran on this machine: it is not the first call's"; exit 3; }
  SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  tar -C "$SITE" -xJf .ray/ray-pkg.tar.xz
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .ray/*.whl > /tmp/scaling/install-ray.log 2>&1
  $PY -m compileall -q -j 0 "$SITE" > /tmp/scaling/compileall-ray.log 2>&1
  $PY -c 'import ray; print("ray", ray.__version__)' 2>&1 | tee -a "$SUMMARY"
  RAY_STEPS=${SCALING_RAY_STEPS:-cpu}
  RAY_BACKENDS=${SCALING_RAY_BACKENDS:-ray-cluster}
  step "cpu ray" "$RAY_STEPS" cpu scaling-ray "${SCALING_RAY_LIMIT:-540}" --size "${SCALING_SIZE:-200}" \
    --per-job "$PER_JOB" --repeat "$REPEAT" --jobs $JOBS --backends local $RAY_BACKENDS --gpu off --tasks $TASKS
  # GPU evidence on Ray, beside the local phase's GPU runs (its `gpu` step made them and the installation's GPU
  # records under /tmp/scaling/gpu; what it lacks is measured here). Ray's GPU actors share the one GPU, --jobs of
  # them (grader.drive.ray_backend.gpu_actors), as the local runs' subjects do.
  step "gpu ray" "$RAY_STEPS" gpu scaling-ray-gpu "${SCALING_RAY_GPU_LIMIT:-300}" --size "${SCALING_SIZE:-200}" \
    --per-job "$GPU_PER_JOB" --repeat "$REPEAT" --jobs $GPU_JOBS --backends local $RAY_BACKENDS --gpu on \
    --tasks $GPU_TASKS --budget "${SCALING_GPU_BUDGET:-0}"
fi
exit 0
