"""The totals table of a graded bundle, as README's "Cut previews" section shows it for the seed bundle.

    .venv/bin/python scripts/seed_totals.py OUT/results.json

One row per verdict class (how many candidates, and how many of those are cut previews), then the run statuses,
and a check that no cut preview is ``fail`` from the base alone (the script exits 1 if one is).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

VERDICTS = ("full", "partial", "fail", "no_diff", "input_truncated", "no_task", "error")


def is_cut(result: dict) -> bool:
    return result.get("run_status") == "input_truncated" or bool((result.get("apply") or {}).get("truncated"))


def table(results: list[dict]) -> str:
    verdicts = Counter(r["verdict"] for r in results)
    cut = Counter(r["verdict"] for r in results if is_cut(r))
    states = Counter(r.get("run_status", "complete") for r in results)
    graded_cut = sum(1 for r in results if r["verdict"] == "input_truncated"
                     and any(c["status"] != "not_evaluated" for c in r["criteria"].values()))
    lines = ["| verdict | candidates | of which cut previews |", "| --- | --- | --- |"]
    lines += [f"| `{v}` | {verdicts[v]} | {cut[v]} |" for v in VERDICTS if verdicts[v] or v == "input_truncated"]
    lines.append(f"| total | {len(results)} | {sum(cut.values())} |")
    lines += ["", "| run status | candidates |", "| --- | --- |"]
    lines += [f"| `{s}` | {n} |" for s, n in sorted(states.items())]
    lines += ["", f"Cut previews with criteria graded (every file the criteria read shown whole): {graded_cut}; "
                  f"cut previews with verdict `fail`: {cut['fail']}."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    document = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    results = document["candidates"]
    print(table(results))
    return 1 if any(is_cut(r) and r["verdict"] == "fail" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
