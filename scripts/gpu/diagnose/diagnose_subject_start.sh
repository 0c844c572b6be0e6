#!/usr/bin/env bash
# Why a candidate's first check takes seconds on the lent machine: three fast candidates (two int8-kv-rounding
# mutants, one xpu-kv-cache-dtypes sample of bench/scaling.py's draw) graded at 1 job while
# scripts/gpu/diagnose/sample_stacks.py samples the judges' and subjects' stacks (py-spy carried as .gpu/bin/py-spy.gz).
# After `SCALING_PHASE=local SCALING_STEPS=none bash scripts/gpu/run_scaling.sh` in the same call; carry
# [".whl", ".gpu"]. Writes $OUT/stacks.txt, $OUT/stacks.txt.raw.gz, $OUT/start-j1.json and what the interpreter's
# site-packages hold in compiled bytecode ($OUT/bytecode.txt).
set -o pipefail
PY=${PY:-python3}
export GRADER_CACHE=${GRADER_CACHE:-/tmp/scaling/cache} PYTHONUNBUFFERED=1
gunzip -c .gpu/bin/py-spy.gz > /tmp/py-spy && chmod +x /tmp/py-spy
$PY - <<'PYEOF'
import sys; sys.path[:0] = ["bench", "."]
from pathlib import Path
from corpus import DEFAULT_BUNDLE, build_corpus, write_corpus
from scaling import nested_subsets
tasks = ["fp8-moe-lora", "int8-kv-rounding", "minimax-qk-norm", "xpu-kv-cache-dtypes"]
draw = nested_subsets(build_corpus(200, 0, DEFAULT_BUNDLE, tasks), 2, [8], 0)[8]
fast = [e for e in draw if e.task == "int8-kv-rounding"][:2] + [e for e in draw if e.task == "xpu-kv-cache-dtypes"][:1]
write_corpus(Path("/tmp/start-corpus"), fast)
PYEOF
# The controls and call times first, unsampled: the sampled run then grades only the candidates.
timeout -k 10 200 $PY grade.py /tmp/start-corpus --out /tmp/start-warmup --gpu off --jobs 1 > /tmp/start-warmup.log 2>&1
timeout -k 10 "${START_LIMIT:-150}" $PY scripts/gpu/diagnose/sample_stacks.py --py-spy /tmp/py-spy --out "$OUT/stacks.txt" -- \
  $PY grade.py /tmp/start-corpus --out /tmp/start-out --no-cache --gpu off --jobs 1 > /tmp/start-grade.log 2>&1
cp /tmp/start-out/results.json "$OUT/start-j1.json"
{ grep -v '^progress' /tmp/start-warmup.log | tail -5; grep -v '^progress' /tmp/start-grade.log | tail -8
  SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for pkg in torch transformers pydantic openai triton; do
    echo "$pkg: $(find "$SITE/$pkg" -name '*.py' | wc -l) .py, $(find "$SITE/$pkg" -name '*.pyc' | wc -l) .pyc"
  done
  $PY -c 'import sys; print("dont_write_bytecode", sys.flags.dont_write_bytecode, sys.executable)'
  df -h "$SITE" /dev/shm /tmp | cat; mount | grep -E " / | /opt" | head -5
} > "$OUT/bytecode.txt" 2>&1
