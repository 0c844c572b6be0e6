"""What a fresh interpreter with Triton unimportable pays to import torch and a tree's vLLM (the cost of
minimax-qk-norm's no-Triton check, which starts one per candidate), with the tree's bytecode and without.

    python bench/fresh_import_cost.py --tree BASE [--repeat 3]

BASE is a built base (``$GRADER_CACHE/bases/<task>``). The tree is copied twice into a temporary folder, one copy
compiled (checked-hash bytecode: used only while its source is unchanged), and each is imported ``--repeat`` times,
alternating, by a fresh interpreter that blocks Triton and installs the subjects' stand-ins first, as the check's
runner does. Prints the median seconds of each stage and the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHILD = """
import json, os, sys, time
started = time.perf_counter()
sys.modules["triton"] = None
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import vllm_stand_ins
vllm_stand_ins.prepare_process()
import torch
with_torch = time.perf_counter()
import vllm.config, vllm.distributed.parallel_state, vllm.triton_utils
done = time.perf_counter()
print(json.dumps({"torch": with_torch - started, "vllm": done - with_torch}))
"""


def timed_import(root: Path) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", GRADER_GPU="0", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join([str(root), str(REPO / "rubrics" / "shared_probes")]))
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="a built base holding vllm/")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        roots = {"source only": Path(work) / "plain", "with bytecode": Path(work) / "compiled"}
        for root in roots.values():
            shutil.copytree(args.tree / "vllm", root / "vllm")
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "checked-hash",
                        str(roots["with bytecode"] / "vllm")], check=True, capture_output=True)
        samples: dict[str, list[dict]] = {name: [] for name in roots}
        for _ in range(args.repeat):
            for name, root in roots.items():
                samples[name].append(timed_import(root))
    for name, runs in samples.items():
        parts = []
        for stage in ("torch", "vllm"):
            values = [r[stage] for r in runs]
            parts.append(f"{stage} {statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})")
        print(f"{name}: " + ", ".join(parts) + f" over {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
