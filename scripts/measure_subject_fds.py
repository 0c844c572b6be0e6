"""How many files a subject holds open once its heavy imports are done: the basis of ``contain.OPEN_FILES``.

Imports what a subject imports (torch, Triton, then the vLLM modules of a task's base) in a fresh interpreter, as
a subject's environment has it, and prints the number of open file descriptors after each step.

    .venv/bin/python scripts/measure_subject_fds.py [TASK] [--gpu]   # default int8-kv-rounding; builds its base
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.core.rubric import all_tasks  # noqa: E402
from grader.drive.one_candidate import BaseCache  # noqa: E402
from grader.sandbox.launch import vllm_module_names  # noqa: E402
from grader.sandbox.protocol import base_environment  # noqa: E402

COUNT = """
import importlib, os, sys
def open_files():
    return len(os.listdir("/proc/self/fd"))
print("interpreter", open_files())
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        print(name, "failed:", type(exc).__name__)
        continue
    print(name, open_files())
if os.environ.get("GRADER_GPU") == "1":
    import torch
    torch.zeros(1, device="cuda")
    print("a CUDA context", open_files())
"""


def main() -> None:
    gpu = "--gpu" in sys.argv
    names = [a for a in sys.argv[1:] if a != "--gpu"]
    task = all_tasks()[names[0] if names else "int8-kv-rounding"]
    base = BaseCache().get(task)
    with tempfile.TemporaryDirectory() as root:
        os.symlink(base.path / "vllm", Path(root) / "vllm")
        env = dict(base_environment(gpu=gpu), HOME=root, TMPDIR=root, PYTHONPATH=root, GRADER_GPU=str(int(gpu)))
        modules = ["torch", "triton", *vllm_module_names(base.path)]
        subprocess.run([sys.executable, "-c", COUNT, *modules], env=env, cwd=root, check=True)


if __name__ == "__main__":
    main()
