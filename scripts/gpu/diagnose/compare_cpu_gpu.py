#!/usr/bin/env python3
"""Compare two grader results.json files (CPU run vs GPU run): per candidate, per criterion, status and score.

Usage: python scripts/gpu/diagnose/compare_cpu_gpu.py CPU_RESULTS.json GPU_RESULTS.json [--expected candidates]

With --expected, each candidate's designed statuses are read from <dir>/<task>/expected.toml: the [<name>] table
for CPU, with [<name>.gpu] overriding it for GPU. Columns: CPU status, GPU status, whether they agree, and (with
--expected) whether each run matches its designed status. Exit code 0 always (it is a report).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path


def load(path: str) -> dict[str, dict]:
    doc = json.loads(Path(path).read_text())
    return {c["id"]: c for c in doc.get("candidates", [])}, doc.get("run", {})


def expected_for(root: Path | None, cid: str, task: str | None) -> tuple[dict, dict]:
    """(cpu, gpu) designed statuses for candidate ``cid`` (ids look like '<task>/<name>' or '<name>')."""
    if root is None or not task:
        return {}, {}
    f = root / task / "expected.toml"
    if not f.is_file():
        return {}, {}
    table = tomllib.loads(f.read_text())
    name = cid.split("/", 1)[1] if cid.startswith(task + "/") else cid
    cpu = {k: v for k, v in table.get(name, {}).items() if k.startswith("c") and isinstance(v, str)}
    gpu = dict(cpu)
    gpu.update({k: v for k, v in table.get(name, {}).get("gpu", {}).items() if isinstance(v, str)})
    return cpu, gpu


def cell(crit: dict | None) -> str:
    if not crit:
        return "-"
    score = crit.get("score")
    return f"{crit['status']}" + ("" if score is None else f" {score:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cpu")
    ap.add_argument("gpu")
    ap.add_argument("--expected", type=Path, help="folder with <task>/expected.toml (e.g. candidates)")
    args = ap.parse_args()
    cpu, cpu_run = load(args.cpu)
    gpu, gpu_run = load(args.gpu)
    print(f"CPU run: {cpu_run.get('gpu', '?')}\nGPU run: {gpu_run.get('gpu', '?')}\n")
    ids = sorted(set(cpu) | set(gpu))
    n = agree = differ = exp_total = exp_cpu_ok = exp_gpu_ok = 0
    mismatches = []
    head = f"{'candidate':40} {'crit':4} {'CPU':22} {'GPU':22} {'same':5}"
    if args.expected:
        head += f" {'exp CPU':14} {'exp GPU':14} {'cpu=exp':7} {'gpu=exp':7}"
    print(head)
    print("-" * len(head))
    for cid in ids:
        c, g = cpu.get(cid), gpu.get(cid)
        task = (c or g).get("task")
        exp_cpu, exp_gpu = expected_for(args.expected, cid, task)
        print(f"{cid:40} verdict {'-' if not c else c['verdict'] + ' ' + str(c['score'])!s:>18} | "
              f"{'-' if not g else g['verdict'] + ' ' + str(g['score'])}")
        crits = sorted(set((c or {}).get("criteria", {})) | set((g or {}).get("criteria", {})))
        for k in crits:
            cc = (c or {}).get("criteria", {}).get(k)
            gc = (g or {}).get("criteria", {}).get(k)
            same = bool(cc and gc and cc["status"] == gc["status"])
            n += 1
            agree += same
            differ += not same
            line = f"{'':40} {k:4} {cell(cc):22} {cell(gc):22} {'yes' if same else 'NO':5}"
            if args.expected and k in exp_cpu:
                exp_total += 1
                ok_c = bool(cc and cc["status"] == exp_cpu[k])
                ok_g = bool(gc and gc["status"] == exp_gpu.get(k))
                exp_cpu_ok += ok_c
                exp_gpu_ok += ok_g
                line += (f" {exp_cpu[k]:14} {exp_gpu.get(k, '-'):14} {'ok' if ok_c else 'NO':7}"
                         f" {'ok' if ok_g else 'NO':7}")
                if not ok_g:
                    mismatches.append(f"{cid} {k}: GPU {cell(gc)}, designed {exp_gpu.get(k)}")
            print(line)
            if not same and gc and gc.get("rationale"):
                print(f"{'':46}GPU rationale: {gc['rationale'][:200]}")
    print()
    if mismatches:
        print("GPU statuses that differ from the designed ones:")
        for m in mismatches:
            print("  " + m)
    print(f"criteria compared: {n}; CPU and GPU agree on {agree}, differ on {differ}")
    if args.expected:
        print(f"designed statuses: CPU matches {exp_cpu_ok}/{exp_total}, GPU matches {exp_gpu_ok}/{exp_total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
