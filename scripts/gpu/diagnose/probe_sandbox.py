"""Does CUDA (or, with --gpu off, the Triton interpreter) work inside the sandbox a subject gets on this machine?

Usage: python scripts/gpu/diagnose/probe_sandbox.py --gpu on|off   (from the repository root; exit 0 when the kernel ran)

It prints what ``grader.sandbox.contain`` found this machine allows (``describe_containment``), then runs a tiny
Triton kernel in a process contained the way ``grader.pipeline.run.subject_spec`` contains a subject: ``contain.prepare``
with the repository, caches, scratch area and home hidden, the subject's environment (``subject_environment``),
its own uid where the grader is root, the private /tmp view, and on a GPU run no RLIMIT_AS (the memory cgroup
caps it instead), else ``contain.ADDRESS_SPACE_BYTES``. It uses the grader's own functions, so it tests what a
graded candidate meets, and names what is missing when it fails (the device nodes, libcuda, ptxas, a C compiler
for Triton's launcher, a writable cache).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from grader.pipeline.apply import hidden_roots, scratch_root  # noqa: E402
from grader.sandbox.protocol import subject_environment  # noqa: E402
from grader.sandbox import contain  # noqa: E402

KERNEL = r'''
import os, resource, sys
gpu = sys.argv[1] == "on"
print("uid", os.getuid(), "RLIMIT_AS", resource.getrlimit(resource.RLIMIT_AS)[0], "repository readable", os.path.exists(sys.argv[2]))
import torch, triton, triton.language as tl
print("torch", torch.__version__, "triton", triton.__version__, "cuda available", torch.cuda.is_available())
@triton.jit
def k(p, n: tl.constexpr):
    o = tl.arange(0, n); tl.store(p + o, tl.load(p + o) * 2)
x = torch.ones(1 << 20, device="cuda" if gpu else "cpu")
k[(1,)](x, 1024)
if gpu:
    torch.cuda.synchronize()
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
print("contained Triton kernel:", "ok" if float(x[:1024].sum()) == 2048.0 else "WRONG", float(x[:1024].sum()))
'''


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", choices=["on", "off"], default="on")
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    gpu = args.gpu == "on"
    print(json.dumps(contain.describe_containment(), indent=1))
    folder = Path(tempfile.mkdtemp(prefix="kit-probe-", dir=scratch_root()))
    try:
        probes = folder / "probes"
        probes.mkdir()
        (probes / "kernel.py").write_text(KERNEL)
        home = folder / "home"
        home.mkdir()
        box = contain.prepare(home, visible=[probes], hidden=hidden_roots(),
                              as_bytes=resource.RLIM_INFINITY if gpu else contain.ADDRESS_SPACE_BYTES)
        print("sandbox spec:", json.dumps({k: v for k, v in box.spec.items() if k != "binds"}))
        env = subject_environment(home, gpu)
        try:
            proc = subprocess.run(box.argv([sys.executable, str(probes / "kernel.py"), args.gpu, str(REPO / "grade.py")]),
                                  env=env, cwd=home, capture_output=True, text=True, timeout=args.timeout,
                                  stdin=subprocess.DEVNULL)
        finally:
            box.cleanup()
        print(proc.stdout.rstrip())
        if proc.returncode != 0:
            print(proc.stderr.rstrip()[-4000:])
        print(f"contained probe rc={proc.returncode}")
        return 0 if proc.returncode == 0 and "contained Triton kernel: ok" in proc.stdout else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
