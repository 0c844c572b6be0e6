#!/usr/bin/env bash
# The grading code of this tree against an earlier revision's, side by side: bench/scaling.py over the same corpus,
# the two trees' runs alternating in rounds so that what drifts on the machine falls on both.
#
#   bash bench/against_revision.sh REV OUTDIR [ROUNDS] -- SCALING-ARGS...
#   bash bench/against_revision.sh df1aad1 /tmp/against 2 -- --size 40 --jobs 2 --backends local --gpu off \
#       --tasks fp8-moe-lora int8-kv-rounding minimax-qk-norm xpu-kv-cache-dtypes
#
# REV is checked out as a git worktree under OUTDIR, with this tree's bench/ in place of its own (the bench drives
# grade.py's command line, which both share), and each tree's processes import its own grader (PYTHONPATH). Each
# tree keeps its runs in OUTDIR/work-{this,REV}: round R reuses rounds 1..R-1 there (bench/scaling.py --repeat), so
# a later call with more ROUNDS adds rounds. OUTDIR/{this,REV}.{txt,json} are each tree's bench output and
# measurements after the last round: wall time, CPU seconds per candidate, stages, decisions.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 REV OUTDIR [ROUNDS] -- SCALING-ARGS..." >&2; exit 2; }
REV=$1 OUT=$2
shift 2
ROUNDS=1
[ "$1" = -- ] || { ROUNDS=$1; shift; }
[ "$1" = -- ] || { echo "usage: $0 REV OUTDIR [ROUNDS] -- SCALING-ARGS..." >&2; exit 2; }
shift
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$HERE/.venv/bin/python}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
THEM=$OUT/tree-$REV
if [ ! -d "$THEM" ]; then
  git -C "$HERE" worktree add -q --detach "$THEM" "$REV"
  rm -rf "$THEM/bench" && cp -r "$HERE/bench" "$THEM/bench" && rm -rf "$THEM/bench/results"
fi
echo "this tree: $(git -C "$HERE" rev-parse --short HEAD)$(git -C "$HERE" diff --quiet HEAD -- grader rubrics grade.py || echo ' (with changes)'); against: $REV; $(nproc) cpus"
for round in $(seq 1 "$ROUNDS"); do
  for who in this "$REV"; do
    root=$HERE; [ "$who" = this ] || root=$THEM
    echo "== $who, round $round, $(date -u +%FT%TZ)"
    (cd "$root" && PYTHONPATH=$root "$PY" bench/scaling.py "$@" --repeat "$round" --work "$OUT/work-$who" \
       --json "$OUT/$who.json" > "$OUT/$who.txt" 2>&1) || true
    grep -E "^(local|ray|ray-cluster) +jobs" "$OUT/$who.txt" | tail -n 1
  done
done
# Each tree's last bench output lists every round's run with its stages (bench/scaling.py's stage_line); the
# JSON has the same with more digits.
for who in this "$REV"; do
  echo "== $who after $ROUNDS round(s)"
  grep -E "^(local|ray|ray-cluster) +jobs|^ +(per candidate|machine):|^identical|^decisions differ" "$OUT/$who.txt" || true
done
