"""How long N warm workers take to be ready: forked from one that imported the preload (what a pool does now), beside
N started side by side, each importing it (what a pool did before), in alternating rounds.

    python bench/worker_start.py --tree BASE [--workers 16] [--repeat 3]

BASE is a built base (``$GRADER_CACHE/bases/<task>``); the preload is the warm workers' list for it
(``grader.sandbox.launch.third_party_modules``, CPU evidence). Each round starts the N workers both ways, waits
until every one has said it is ready, and ends them. Prints each way's median seconds with the spread, and the
machine's CPU seconds per round (``/proc/stat``): a worker forked from one imports nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from scaling import cpu_ticks, machine_use  # noqa: E402

from grader.core.paths import make_import_root  # noqa: E402
from grader.sandbox.launch import REPO_ROOT, start_workers, third_party_modules  # noqa: E402
from grader.sandbox.protocol import base_environment  # noqa: E402


def forked_from_one(env: dict, preload: Path, workers: int) -> list:
    return start_workers(env, preload, workers)


def side_by_side(env: dict, preload: Path, workers: int) -> list:
    started: list = []
    threads = [threading.Thread(target=lambda: started.extend(start_workers(env, preload, 1)))
               for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if len(started) != workers:
        raise RuntimeError(f"{workers - len(started)} of {workers} workers failed to start")
    return started


def timed(way, env: dict, preload: Path, workers: int) -> tuple[float, float | None]:
    """Seconds until all ``workers`` are ready, and the machine's CPU seconds meanwhile."""
    before, began = cpu_ticks(), time.perf_counter()
    servers = way(env, preload, workers)
    seconds, after = time.perf_counter() - began, cpu_ticks()
    for server in servers:
        server.release()
    for server in servers:
        server.reap()
    use = machine_use(before, after, 1)  # the round as one "candidate": its busy CPU seconds
    return seconds, use["cpu_s_per_candidate"] if use else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="a built base holding vllm/")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        env = base_environment(False)
        names = third_party_modules(make_import_root(args.tree, folder / "probe-root"), args.tree, env, False)
        preload = folder / "preload.txt"
        preload.write_text("\n".join(names) + "\n")
        env = dict(env, HOME=work, TMPDIR=work, PYTHONPATH=str(REPO_ROOT))
        ways = {"forked from one": forked_from_one, "side by side": side_by_side}
        samples: dict[str, list[tuple[float, float | None]]] = {name: [] for name in ways}
        for _ in range(args.repeat):
            for name, way in ways.items():
                samples[name].append(timed(way, env, preload, args.workers))
    print(f"{args.workers} workers, a preload of {len(names)} modules, {args.repeat} rounds")
    for name, runs in samples.items():
        seconds = [s for s, _ in runs]
        cpu = [c for _, c in runs if c is not None]
        line = f"{name}: ready in {statistics.median(seconds):.2f} s ({min(seconds):.2f}-{max(seconds):.2f})"
        if cpu:
            line += f", {statistics.median(cpu):.1f} CPU s ({min(cpu):.1f}-{max(cpu):.1f})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
