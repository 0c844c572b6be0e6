#!/usr/bin/env python3
"""Merge the per-tree benchmark JSONs that run_gpu_batch.sh writes (one bench run per tree, so that a slow or
broken tree costs only itself) into the benchmarks' own comparison tables.

Usage: python scripts/gpu/merge_bench.py DIR     (DIR holds moe-*.json and qk-<label>.json files)
Tree order: base, reference, then the rest as found; speedups are against the base.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORDER = {"base": 0, "reference": 1}


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _files(folder: Path, prefix: str) -> list[Path]:
    files = list(folder.glob(f"{prefix}-*.json"))
    return sorted(files, key=lambda p: (ORDER.get(p.stem[len(prefix) + 1:], 9), p.stem))


def merge_moe(folder: Path) -> None:
    files = _files(folder, "moe")
    if not files:
        return
    moe = _module("moe_swap_ab")
    rows, meta = [], {}
    for f in files:
        doc = json.loads(f.read_text())
        meta = meta or doc.get("meta", {})
        for r in doc.get("rows", []):
            if "error" in r and "E" not in r:
                print(f"[moe {r.get('tree', f.stem)}] {r['error']}")
            rows.append(r)
    # A file holds one tree (per-tree runs) or several (the side-by-side run): the labels come from the rows.
    labels = sorted(dict.fromkeys(r["tree"] for r in rows if "tree" in r), key=lambda l: ORDER.get(l, 9))
    print(f"== moe-swap-ab ({meta.get('device', '?')}, torch {meta.get('torch', '?')}, "
          f"triton {meta.get('triton', '?')}, dry_run {meta.get('dry_run')})")
    print(moe._table([r for r in rows if "E" in r], labels))
    for r in rows:  # bf16 output against an fp32 reference of the same quantised operands
        if r.get("max_rel_err") is not None and r["max_rel_err"] > 0.02:
            print(f"  large error: {r['tree']} {r['mode']} E={r['E']} N={r['N']} K={r['K']} M={r['M']}: "
                  f"max_rel_err {r['max_rel_err']:.3g}")
        elif r.get("error"):
            print(f"  error: {r['tree']} {r['mode']} E={r.get('E')} M={r.get('M')}: {r['error'][:160]}")


def merge_qk(folder: Path) -> None:
    files = _files(folder, "qk")
    if not files:
        return
    qk = _module("minimax_qk_norm")
    runs = []
    for f in files:
        doc = json.loads(f.read_text())
        runs.extend(doc.get("runs", []))
    print("\n== minimax-qk-norm")
    qk.print_table(runs)


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    merge_moe(folder)
    merge_qk(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
