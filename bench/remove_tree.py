"""Removing a candidate's scratch tree while other threads of the grader are busy in Python: Python's
``shutil.rmtree`` (the baseline) against ``grader.core.paths.remove_tree`` (``rm`` in a child process), side by
side, in one run.

    python bench/remove_tree.py --tree BASE [--busy 0 1 3] [--repeat 5]

BASE is a built base (``$GRADER_CACHE/bases/<task>``), copied with ``cp -a`` into /dev/shm before each removal,
as a candidate's tree is. ``--busy N`` threads run a pure-Python loop meanwhile, as the grader's other candidates'
threads do between their subprocesses (parsing evidence, scoring, writing summaries). The two ways alternate
within each repeat. Prints the seconds of each removal: the minimum, median and maximum.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.core.paths import remove_tree  # noqa: E402

WAYS = {"shutil.rmtree": lambda path: shutil.rmtree(path), "remove_tree": remove_tree}


def keep_busy(stop: threading.Event) -> None:
    total = 0
    while not stop.is_set():
        for number in range(10_000):
            total += number * number


def timed_removal(way: str, tree: Path, busy: int) -> float:
    folder = Path(tempfile.mkdtemp(prefix="remove-tree-", dir="/dev/shm"))
    try:
        copy = folder / "tree"
        subprocess.run(["cp", "-a", str(tree), str(copy)], check=True)
        stop = threading.Event()
        threads = [threading.Thread(target=keep_busy, args=(stop,)) for _ in range(busy)]
        for thread in threads:
            thread.start()
        time.sleep(0.2)  # the busy threads hold the interpreter lock by now
        started = time.perf_counter()
        WAYS[way](copy)
        seconds = time.perf_counter() - started
        stop.set()
        for thread in threads:
            thread.join()
        assert not copy.exists(), f"{way} left {copy}"
        return seconds
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="a built base to copy and remove")
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1, 3], help="busy threads (default: 0 1 3)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    files = sum(1 for p in args.tree.rglob("*") if p.is_file())
    print(f"tree {args.tree} ({files} files), {args.repeat} repeats, seconds per removal: min / median / max")
    for busy in args.busy:
        seconds: dict[str, list[float]] = {way: [] for way in WAYS}
        for _ in range(args.repeat):
            for way in WAYS:
                seconds[way].append(timed_removal(way, args.tree, busy))
        for way, values in seconds.items():
            print(f"busy threads {busy}: {way:14s} {min(values):.3f} / {statistics.median(values):.3f} / "
                  f"{max(values):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
