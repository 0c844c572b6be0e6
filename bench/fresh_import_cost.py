"""What a fresh interpreter with Triton unimportable pays to import torch and a tree's vLLM (what minimax-qk-norm's
no-Triton check paid per candidate while it started one; it now asks for a subject on the rubric's platform
``without-triton``), with the tree's bytecode and without, beside what a child forked from a process prepared
without Triton pays (how a warm worker's platform template serves such subjects).

    python bench/fresh_import_cost.py --tree BASE [--repeat 3]

BASE is a built base (``$GRADER_CACHE/bases/<task>``). The tree is copied twice into a temporary folder, one copy
compiled (checked-hash bytecode: used only while its source is unchanged), and each is imported ``--repeat`` times,
alternating, by a fresh interpreter that blocks Triton and installs the subjects' stand-ins first, as the check's
runner did. The third row is a process that does the same and then preloads the warm workers' module list for
BASE (its Triton modules left out) once, and forks a child per repeat that imports the tree's vLLM: what a
template prepared without Triton, as warm workers prepare theirs, would leave to each candidate. Prints the median
seconds of each stage and the spread.
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
sys.path.insert(0, str(REPO))
# What the no-Triton check's runner did before anything else, timed: Triton made unimportable, TorchDynamo off, the
# subjects' stand-ins, torch.
PREPARED = """
import importlib, json, os, sys, time
started = time.perf_counter()
sys.modules["triton"] = None
os.environ["TORCHDYNAMO_DISABLE"] = "1"
import vllm_stand_ins
vllm_stand_ins.prepare_process()
import torch
with_torch = time.perf_counter()
"""
IMPORT_VLLM = "import vllm.config, vllm.distributed.parallel_state, vllm.triton_utils"
CHILD = PREPARED + f"""
{IMPORT_VLLM}
print(json.dumps({{"torch": with_torch - started, "vllm": time.perf_counter() - with_torch}}))
"""
TEMPLATE = PREPARED + f"""
for name in open(sys.argv[1]).read().split():
    if name.split(".")[0] != "triton":
        try:
            importlib.import_module(name)
        except BaseException:
            pass
print(json.dumps({{"template": time.perf_counter() - started}}), flush=True)
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        forked = time.perf_counter()
        {IMPORT_VLLM}
        print(json.dumps({{"torch": 0.0, "vllm": time.perf_counter() - forked}}), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def child_env(root: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONDONTWRITEBYTECODE="1", GRADER_GPU="0", CUDA_VISIBLE_DEVICES="",
                PYTHONPATH=os.pathsep.join([str(root), str(REPO / "rubrics" / "shared_probes")]))


def measured_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def timed_import(root: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD], env=child_env(root), capture_output=True, text=True,
                          check=True)
    return measured_lines(done.stdout)[-1]


def forked_from_template(base: Path, root: Path, repeat: int, work: Path) -> tuple[float, list[dict]]:
    """The template's preload seconds and each forked child's import."""
    from grader.core.paths import make_import_root
    from grader.sandbox.launch import third_party_modules
    from grader.sandbox.protocol import base_environment

    listed = work / "preload.txt"
    names = third_party_modules(make_import_root(base, work / "probe-root"), base, base_environment(False), False)
    listed.write_text("\n".join(names) + "\n")
    done = subprocess.run([sys.executable, "-c", TEMPLATE, str(listed), str(repeat)], env=child_env(root),
                          capture_output=True, text=True, check=True)
    lines = measured_lines(done.stdout)
    return lines[0]["template"], lines[1:]


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
        template_s, samples["forked from a template without Triton"] = forked_from_template(
            args.tree, roots["source only"], args.repeat, Path(work))
    print(f"the template's own preload (once per worker): {template_s:.2f} s")
    for name, runs in samples.items():
        parts = []
        for stage in ("torch", "vllm"):
            values = [r[stage] for r in runs]
            parts.append(f"{stage} {statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})")
        print(f"{name}: " + ", ".join(parts) + f" over {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
