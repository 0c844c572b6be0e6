"""Memory bounds a subject cannot lift, measured from outside it by the judge.

Where the machine gives no memory cgroup (the H200 hosts), nothing in the kernel bounds a GPU subject's host memory
(GPU subjects get no RLIMIT_AS: CUDA reserves far more address space than it uses), and nothing bounds any
subject's device memory. ``MemoryWatch`` runs in the judge, beside each live subject, and every ``POLL_S`` sums
the resident anonymous and shared memory (``RssAnon`` + ``RssShmem``: what it holds, not the libraries it maps) of
the subject's processes; with a GPU, every ``GPU_POLL_S`` it asks the driver (``nvidia-smi --query-compute-apps``)
what device memory those processes hold. Over a bound, the subject is ended and the watch keeps the reason, which
the judge reports as that probe's broken-subject failure ("over its host memory bound").

What it cannot guarantee: a subject can overshoot between two polls (by what it allocates in ``POLL_S``), and the
processes are found by parentage (or the pids cgroup where there is one), so the bound counts what the subject's
PID namespace holds. The device side depends on the driver reporting the subject's pids to the judge; the
in-process allocator limit (``grader.sandbox.subject.bound_gpu_allocator``) only shapes an honest subject's
allocator, since candidate code in that process can lift it.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from functools import cache
from pathlib import Path

from grader.core.environment import machine_memory_bytes
from grader.sandbox.contain import children_of, end_subject

POLL_S = 0.5
GPU_POLL_S = 2.0


def subject_processes(pid: int, cgroup: str | None) -> set[int]:
    """The subject started as ``pid`` and every process below it (or in its pids cgroup)."""
    found = {pid}
    if cgroup:
        try:
            found |= {int(p) for p in Path(cgroup, "cgroup.procs").read_text().split()}
        except OSError:
            pass
    frontier = [pid]
    while frontier:
        for child in children_of(frontier.pop()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def held_host_memory(pids: set[int]) -> int:
    """Bytes of anonymous and shared memory resident in ``pids`` (threads share their process's, counted once)."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith(("RssAnon:", "RssShmem:")):
                total += int(line.split()[1]) * 1024
    return total


def held_gpu_memory(pids: set[int]) -> int | None:
    """Bytes of device memory the driver reports for ``pids``; None when it cannot be asked."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        out = subprocess.run([tool, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    total = 0
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit() and int(fields[0]) in pids:
            total += int(fields[1]) << 20
    return total


@cache
def gpu_memory_total() -> int | None:
    """Bytes of memory of the first visible GPU, as the driver reports it; None without one."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        out = subprocess.run([tool, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return int(out[0]) << 20 if out and out[0].isdigit() else None


def gpu_memory_bound(host_bytes: int) -> int | None:
    """A subject's device memory bound: the same share of the GPU's memory as ``host_bytes`` (its host memory
    bound) is of the host memory graders may use (three quarters of it); None without a GPU."""
    total = gpu_memory_total()
    if total is None:
        return None
    usable = machine_memory_bytes() * 3 // 4
    return total * 3 // 4 * min(host_bytes, usable) // max(1, usable)


class MemoryWatch:
    """Ends the subject started as ``pid`` when it holds more than ``host_bytes`` of host memory or ``gpu_bytes``
    of device memory (either None: not watched); ``reason`` says why it was ended (None while within bounds)."""

    def __init__(self, pid: int, box: dict | None, host_bytes: int | None, gpu_bytes: int | None) -> None:
        self.pid, self.box, self.host_bytes, self.gpu_bytes = pid, box, host_bytes, gpu_bytes
        self.reason: str | None = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, name=f"memory-watch-{pid}", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def _watch(self) -> None:
        next_gpu = 0.0
        while not self.stopped.wait(POLL_S):
            pids = subject_processes(self.pid, (self.box or {}).get("cgroup"))
            if (self.box or {}).get("pid"):
                pids.discard(self.pid)  # the waiter outside the namespace: the judge's own code, not the subject
            if self.host_bytes is not None and (held := held_host_memory(pids)) > self.host_bytes:
                return self._end(f"the subject held {held >> 20} MiB of host memory, over its bound of "
                                 f"{self.host_bytes >> 20} MiB: ended by the judge's memory watch")
            if self.gpu_bytes is not None and time.monotonic() >= next_gpu:
                next_gpu = time.monotonic() + GPU_POLL_S
                held = held_gpu_memory(pids)
                if held is not None and held > self.gpu_bytes:
                    return self._end(f"the subject held {held >> 20} MiB of GPU memory, over its bound of "
                                     f"{self.gpu_bytes >> 20} MiB: ended by the judge's memory watch")

    def _end(self, reason: str) -> None:
        if not self.stopped.is_set():
            self.reason = reason
            end_subject(self.pid, self.box)


def watch_for(pid: int, box: dict | None, gpu: bool) -> MemoryWatch | None:
    """The watch a subject needs: host memory where no memory cgroup bounds it, device memory on a GPU run."""
    if not box:
        return None
    host = None if box.get("memory_cgroup") else box.get("memory_bytes")
    device = box.get("gpu_memory_bytes") if gpu else None
    if host is None and device is None:
        return None
    return MemoryWatch(pid, box, host, device)
