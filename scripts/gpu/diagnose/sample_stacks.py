"""Where the grader's processes spend their time, by sampling their Python stacks while a grading runs.

    python scripts/gpu/diagnose/sample_stacks.py --py-spy BIN --out FILE -- COMMAND...

Runs COMMAND and, every ``--every`` seconds until it ends, dumps with ``py-spy dump`` the stack of each process
whose command line names the warm workers' forkserver (judges and their subjects; the warm workers and their
templates idle in a read). Writes to FILE, per role (subject: a process under another uid; judge: root's), the
innermost frames seen most often and the frames of the grader and the rubrics that held them, with counts; the
raw dumps go to FILE.raw.gz. Sampling is coarse (each dump stops the process for a moment): it says where time
goes, not how much exactly.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import subprocess
import sys
import time
from pathlib import Path


# Innermost frames of a process that waits (for a request, a reply or a child), not works.
WAITING = {"_read", "_wait", "_read_exactly", "_become_pid_namespace_init", "serve", "recv_fds", "select", "poll",
           "wait", "sleep"}


def forkserver_pids() -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            uid = int(next(line.split()[1] for line in (entry / "status").read_text().splitlines()
                           if line.startswith("Uid:")))
        except (OSError, StopIteration, ValueError):
            continue
        if b"grader.sandbox.forkserver" in cmdline or b"speed_runner" in cmdline:
            found[int(entry.name)] = "subject" if uid != 0 else "judge"
    return found


def frames_of(dump: str) -> list[str]:
    # py-spy indents each frame of a thread's stack by four spaces, innermost first.
    return [line.strip() for line in dump.splitlines() if line.startswith("    ") and line.rstrip().endswith(")")]


def ours(frame: str) -> bool:
    return any(part in frame for part in ("grader/", "rubrics/", "probes/", "tests/", "vllm/", "_probes", "_runner"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--py-spy", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=float, default=0.25)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    proc = subprocess.Popen(command)
    leaf = {"subject": collections.Counter(), "judge": collections.Counter()}
    held = {"subject": collections.Counter(), "judge": collections.Counter()}
    raw = gzip.open(f"{args.out}.raw.gz", "wt")
    while proc.poll() is None:
        for pid, role in forkserver_pids().items():
            result = subprocess.run([args.py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True)
            frames = frames_of(result.stdout)
            if not frames:
                continue
            raw.write(f"== {time.time():.2f} {role} {pid}\n{result.stdout}\n")
            if frames[0].split(" (")[0] in WAITING:
                continue
            leaf[role][frames[0]] += 1
            mine = [f for f in frames if ours(f)][:3]
            held[role][" <- ".join(mine)] += 1
        time.sleep(args.every)
    raw.close()
    with open(args.out, "w") as out:
        for role in ("subject", "judge"):
            total = sum(leaf[role].values())
            out.write(f"== {role}: {total} busy samples\n-- innermost frames\n")
            for frame, n in leaf[role].most_common(25):
                out.write(f"{n:6d} {frame}\n")
            out.write("-- grader, rubric and vLLM frames holding them\n")
            for frame, n in held[role].most_common(30):
                out.write(f"{n:6d} {frame}\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
