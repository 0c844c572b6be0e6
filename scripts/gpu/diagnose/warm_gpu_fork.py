"""Why GPU subjects forked from a warm worker failed their CUDA checks on the lent H200 while fresh judges passed
them: what a worker's preload leaves open, and what a forked child can still do with the GPU, with and without
closing what it inherited as a subject does (``grader.sandbox.zygote``: every descriptor above its channel).

    python scripts/gpu/diagnose/warm_gpu_fork.py --task int8-kv-rounding [--nvml-check]

Makes the warm workers' GPU preload list for the task's base (``grader.sandbox.launch.third_party_modules``, in
a cache of its own), imports it as a worker does (in order, failures tolerated, as
``grader.sandbox.zygote.preimport``; with ``--nvml-check`` torch is told to ask NVML whether CUDA is available), and
says after which module the process first held a descriptor of an NVIDIA device or had started CUDA. Then forks
children that try CUDA (a tensor on the device) and NVML (the device count), as they are and after closing every
inherited descriptor above 2. Decides nothing: it prints what it saw. Run after ``SCALING_PHASE=local SCALING_STEPS=none
bash scripts/gpu/run_scaling.sh`` in the same call (the wheels and bases).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import sys
import tempfile
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from grader.pipeline.checkout import build_base  # noqa: E402
from grader.core.paths import make_import_root  # noqa: E402
from grader.core.rubric import all_base_recipes  # noqa: E402
from grader.sandbox import launch  # noqa: E402
from grader.sandbox.protocol import base_environment  # noqa: E402


# Set, torch answers cuda.is_available() through NVML instead of the CUDA driver.
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def nvidia_descriptors() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/nvidia"):
            found.append(f"{fd}->{target}")
    return found


def cuda_started() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def first_gpu_touch(names: list[str], nvml_check: bool) -> None:
    """Import ``names`` one by one as a worker does; print where a descriptor or CUDA first appeared."""
    if nvml_check:
        os.environ[NVML_CHECK] = "1"
    seen_fds, seen_cuda = bool(nvidia_descriptors()), cuda_started()
    print(f"before any import: nvidia descriptors {nvidia_descriptors()}, cuda started {seen_cuda}")
    for index, name in enumerate(names):
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - a worker tolerates these too
            pass
        if not seen_fds and nvidia_descriptors():
            seen_fds = True
            print(f"after module {index} ({name}): nvidia descriptors {nvidia_descriptors()}")
        if not seen_cuda and cuda_started():
            seen_cuda = True
            print(f"after module {index} ({name}): CUDA started")
    os.environ.pop(NVML_CHECK, None)
    print(f"after all {len(names)}: nvidia descriptors {nvidia_descriptors()}, cuda started {cuda_started()}")


def child_tries(label: str, close_inherited: bool) -> None:
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        if close_inherited:
            os.closerange(3, 1 << 16)
        report = []
        try:
            import torch

            report.append(f"bad fork {torch.cuda._is_in_bad_fork()}")
            x = torch.ones(4, device="cuda")
            report.append(f"cuda tensor sum {float(x.sum())}")
        except Exception as exc:  # noqa: BLE001 - reported
            report.append(f"cuda failed: {type(exc).__name__}: {exc}"[:300])
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            count = ctypes.c_uint()
            init = nvml.nvmlInit_v2()
            got = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
            report.append(f"nvml init {init} count rc {got} count {count.value}")
        except OSError as exc:
            report.append(f"nvml not loadable: {exc}")
        print(f"child ({label}): " + "; ".join(report), flush=True)
    except BaseException:  # noqa: BLE001
        print(f"child ({label}) broke:\n{traceback.format_exc()}", flush=True)
    finally:
        os._exit(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="int8-kv-rounding")
    parser.add_argument("--nvml-check", action="store_true")
    args = parser.parse_args()
    base = build_base(args.task, all_base_recipes()[args.task])
    with tempfile.TemporaryDirectory() as work:
        names = launch.third_party_modules(make_import_root(base.path, Path(work) / "root"), base.path,
                                           base_environment(True), True)
    print(f"preload list: {len(names)} modules")
    first_gpu_touch(names, args.nvml_check)
    sys.stdout.flush()
    child_tries("as forked", close_inherited=False)
    child_tries("descriptors above 2 closed, as a subject", close_inherited=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
