"""How fast this machine runs what grading spends its time on, one process at a time: a pure-Python loop, a torch
CPU loop of small ops (the hidden tests' shape of work), a fresh interpreter importing torch, and the CPU quota
and throttling the cgroup reports. Prints one line per figure; run it on two machines to compare them.

    python scripts/gpu/diagnose/machine_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def timed(fn, repeat: int) -> tuple[float, float, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples), statistics.median(samples), max(samples)


def python_loop() -> None:
    total = 0
    for i in range(3_000_000):
        total += i * i % 7


def torch_small_ops() -> None:
    import torch

    x = torch.randn(64, 128)
    w = torch.randn(128, 128)
    for _ in range(3000):
        x = torch.tanh(x @ w * 0.01)


def fresh_torch_import() -> None:
    subprocess.run([sys.executable, "-c", "import torch"], check=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


def cgroup_cpu() -> str:
    for path in ("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        if Path(path).is_file():
            return f"{path}: {Path(path).read_text().strip()}"
    return "no cgroup CPU quota file"


def throttled() -> str:
    stat = Path("/sys/fs/cgroup/cpu.stat")
    if not stat.is_file():
        return "no cpu.stat"
    fields = dict(line.split() for line in stat.read_text().splitlines() if len(line.split()) == 2)
    return " ".join(f"{k}={fields[k]}" for k in ("nr_periods", "nr_throttled", "throttled_usec") if k in fields)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    print(f"cpu: {model}; {os.cpu_count()} cpus, {len(os.sched_getaffinity(0))} usable; torch {torch.__version__}")
    print(f"quota: {cgroup_cpu()}; throttling before: {throttled()}")
    for name, fn in (("python loop", python_loop), ("torch small ops (1 thread)", torch_small_ops),
                     ("fresh interpreter importing torch", fresh_torch_import)):
        low, mid, high = timed(fn, args.repeat)
        print(f"{name}: min {low:.3f} s, median {mid:.3f} s, max {high:.3f} s")
    print(f"throttling after: {throttled()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
