#!/usr/bin/env python3
"""Print the reports of the benchmark JSONs in a folder (bench/moe_swap_ab.py's --out, bench/minimax_qk_norm.py's
--json): each run covers all its trees, so its own report is the comparison.

Usage: python scripts/gpu/diagnose/merge_bench.py DIR     (DIR holds moe*.json and qk*.json files)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def print_reports(folder: Path) -> int:
    files = sorted(folder.glob("moe*.json")) + sorted(folder.glob("qk*.json"))
    for path in files:
        doc = json.loads(path.read_text())
        meta = doc.get("meta", {})
        workers = meta.get("workers") or {}
        versions = next(iter(workers.values()), {})
        print(f"== {path.name} ({versions.get('device', '?')}, torch {versions.get('torch', '?')}, "
              f"triton {versions.get('triton', '?')}, dry_run {meta.get('dry_run')})")
        print(doc.get("report") or json.dumps(doc.get("runs", doc), indent=1)[:4000])
        print()
    return 0 if files else 1


if __name__ == "__main__":
    sys.exit(print_reports(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
