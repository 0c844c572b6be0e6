"""Interleaved sampling of several vLLM trees: one worker process per tree, driven one sample at a time.

Every tree's package is called ``vllm``, so two trees cannot share a process; a benchmark that timed one tree
after the other let a slow minute (clock state, a neighbour on the machine) land on one tree only. Here the
driver starts all workers, lets them prepare (import, compile, check, capture) in parallel, then asks them for
one sample at a time, round-robin over the trees (tree A sample, tree B sample, ...; the starting tree rotates
with the sample index), so the samples of different trees interleave in time and the GPU runs one worker's
work at a time.

Protocol, JSON lines: once prepared the worker writes ``{"ready": true, "meta": {...}, "points": [...]}``
(each point a dict with an ``"id"``; one with an ``"error"`` is not sampled); it answers each
``{"op": "sample", "id": ID}`` with ``{"views": {VIEW: microseconds, ...}}`` (or ``{"error": ...}``) and stops on
``{"op": "exit"}``. The worker's fd 1 is pointed at stderr (vLLM logs to stdout), and the protocol goes over a
duplicate of the original stdout.

Also here: the L2 flush and CUDA-event timer the workers use, the ``nvidia-smi`` clock log read alongside the
samples (clocks are read, never set), and the per-point summary and bimodality diagnosis both benchmarks print.
"""

from __future__ import annotations

import datetime
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import stats

FLUSH_MIN_BYTES = 256 << 20  # as triton do_bench; more than any current L2 if the device reports none
EARLY_SHARE = 0.2  # "first samples": the first fifth (at least 3) of a point's samples
CLOCK_SPLIT = 0.05  # SM clocks of the two modes differing by more than this fraction count as a cause
SPREAD_LIMIT = 1.5  # max/min over a point's samples reported as "spread" (the rerun found 53 of 189 above it)


# ------------------------------------------------------------------------------------------ worker side
def serve(prepare, sample) -> None:
    """Run the worker's side of the protocol: ``prepare()`` -> (meta, points), then ``sample(id)`` -> views, or
    (views, extra): extra numbers about the sample (e.g. compiles while it was taken), summed per point."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(message):
        channel.write(json.dumps(message) + "\n")

    try:
        meta, points = prepare()
    except Exception:  # noqa: BLE001 - the driver reports a tree that could not prepare
        send({"ready": False, "error": traceback.format_exc()[-3000:]})
        return
    send({"ready": True, "meta": meta, "points": points})
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("op") == "exit":
            break
        try:
            taken = sample(message["id"])
            views, extra = taken if isinstance(taken, tuple) else (taken, {})
            send({"views": views, "extra": extra})
        except Exception as exc:  # noqa: BLE001 - one failed sample is reported, the worker goes on
            send({"error": f"{type(exc).__name__}: {exc}"[:500]})


def l2_flusher(torch):
    """A callable that overwrites a buffer of twice the device's L2 (at least 256 MiB), and the sizes."""
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
    size = max(2 * l2, FLUSH_MIN_BYTES)
    buffer = torch.empty(size, dtype=torch.int8, device="cuda")
    return buffer.zero_, {"l2_bytes": l2, "flush_bytes": size}


def device_times_us(torch, run, reps: int, before=None, per: int = 1) -> list[float]:
    """CUDA-event time of ``run()`` ``reps`` times, each preceded by ``before()`` (queued ahead of the start
    event, so not timed); all queued before one synchronize, as triton's do_bench does. Microseconds / ``per``."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        if before is not None:
            before()
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 / per for s, e in zip(starts, ends)]


def wall_times_us(run, reps: int, sync, before=None) -> list[float]:
    """Host wall time of ``run()`` from an idle device to its completion (``sync`` before and after)."""
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        times.append((time.perf_counter() - t0) * 1e6)
    return times


# ------------------------------------------------------------------------------------------ driver side
class TreeWorker:
    """One tree's worker process and its end of the pipe."""

    def __init__(self, label: str, path: str, command: list[str], env: dict):
        self.label, self.path = label, path
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     cwd=tempfile.gettempdir())
        self.pending = b""
        self.error = None
        self.meta, self.points = {}, []

    def receive(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer in {timeout:.0f} s")
            readable, _, _ = select.select([self.proc.stdout], [], [], remaining)
            if readable:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise EOFError(f"worker exited (rc {self.proc.wait()})")
                self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return json.loads(line)

    def request(self, message: dict, timeout: float) -> dict:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()
        return self.receive(timeout)

    def wait_ready(self, timeout: float) -> None:
        try:
            reply = self.receive(timeout)
        except (TimeoutError, EOFError) as exc:
            self.error = f"worker did not get ready: {exc}"
            return
        if not reply.get("ready"):
            self.error = reply.get("error", "worker not ready")
            return
        self.meta, self.points = reply["meta"], reply["points"]

    def sampleable(self) -> set:
        return {p["id"] for p in self.points if "error" not in p} if not self.error else set()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - a worker that will not exit is killed
            self.proc.kill()
            self.proc.wait()


def start_workers(trees: list[tuple[str, str]], command_for, env_for, ready_timeout: float) -> list[TreeWorker]:
    workers = []
    for label, path in trees:
        print(f"[{label}] {path}", file=sys.stderr, flush=True)
        workers.append(TreeWorker(label, path, command_for(label, path), env_for(path)))
    for worker in workers:  # they prepare in parallel; each wait overlaps the others' work
        worker.wait_ready(ready_timeout)
        if worker.error:
            print(f"[{worker.label}] {worker.error[-1500:]}", file=sys.stderr, flush=True)
    return workers


def sample_plan(point_ids: list[str], samples: int, point_major: bool):
    """(sample index, point id) in the order they are taken: every point once per pass (sample-major), or all
    of a point's samples before the next point (point-major)."""
    if point_major:
        return [(s, p) for p in point_ids for s in range(samples)]
    return [(s, p) for s in range(samples) for p in point_ids]


def sample_interleaved(workers: list[TreeWorker], point_ids: list[str], samples: int, *, point_major: bool,
                       timeout: float) -> dict:
    """{label: {point id: [{"t": unix time, "views": {...}}, ...]}}, trees taking turns on every sample."""
    taken = {w.label: {} for w in workers}
    for step, (s, pid) in enumerate(sample_plan(point_ids, samples, point_major)):
        shift = s % len(workers)
        for worker in workers[shift:] + workers[:shift]:
            if worker.error or pid not in worker.sampleable():
                continue
            t = time.time()
            try:
                reply = worker.request({"op": "sample", "id": pid}, timeout)
            except (TimeoutError, EOFError) as exc:
                worker.error = f"worker failed while sampling {pid}: {exc}"
                print(f"[{worker.label}] {worker.error}", file=sys.stderr, flush=True)
                continue
            record = {"t": t, **({"views": reply["views"], "extra": reply.get("extra", {})} if "views" in reply
                                 else {"error": reply.get("error")})}
            taken[worker.label].setdefault(pid, []).append(record)
        if step % max(1, len(point_ids)) == 0:
            print(f"sampling: {step}/{len(point_ids) * samples}", file=sys.stderr, flush=True)
    return taken


class ClockMonitor:
    """``nvidia-smi`` logging the SM and memory clocks every ``period_ms`` while the samples are taken (reads
    only: the benchmarks never set clocks). Absent ``nvidia-smi`` (CPU runs), no readings."""

    QUERY = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu"

    def __init__(self, period_ms: int = 100, enabled: bool = True):
        self.proc, self.log, self.first_lines = None, None, []
        if enabled and shutil.which("nvidia-smi"):
            self.log = tempfile.NamedTemporaryFile("w+", suffix=".csv", delete=False)
            self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={self.QUERY}", "--format=csv,noheader,nounits",
                                          f"--loop-ms={period_ms}"], stdout=self.log, stderr=subprocess.DEVNULL)

    def stop(self) -> list[dict]:
        if self.proc is None:
            return []
        self.proc.terminate()
        self.proc.wait()
        self.log.seek(0)
        lines = self.log.readlines()
        self.first_lines = lines[:3]  # kept in the output: what the format was where nothing parses
        readings = [r for r in map(parse_clock_line, lines) if r]
        self.log.close()
        os.unlink(self.log.name)
        return readings


def parse_clock_line(line: str) -> dict | None:
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 5:
        return None
    try:
        t = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return {"t": t, "sm_mhz": float(fields[1]), "mem_mhz": float(fields[2]), "power_w": _number(fields[3]),
                "temp_c": _number(fields[4])}
    except ValueError:
        return None


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return None


def nearest_reading(readings: list[dict], t: float, within: float = 1.0) -> dict | None:
    best = min(readings, key=lambda r: abs(r["t"] - t), default=None)
    return best if best is not None and abs(best["t"] - t) <= within else None


# ------------------------------------------------------------------------------------------ analysis
def view_summary(values: list[float]) -> dict:
    q1, q3 = stats.quartiles(values)
    return {"n": len(values), "median": stats.median(values), "q1": q1, "q3": q3, "iqr": q3 - q1,
            "max_over_min": max(values) / min(values) if min(values) > 0 else None,
            "bimodal": stats.is_bimodal(values)}


def unstable(summary: dict) -> bool:
    """Bimodal (bench/stats.py's rule), or spread: slowest sample more than SPREAD_LIMIT times the fastest."""
    return bool(summary["bimodal"]) or (summary["max_over_min"] or 0) > SPREAD_LIMIT


def slow_and_fast(values: list[float]) -> tuple[str, list[int], list[int]]:
    """Which samples are slow: the upper mode of a bimodal sample, else those over (1 + stats.MIN_REL_GAP)
    times the fastest (a floor with excursions above it)."""
    modes = stats.split_modes(values)
    kind, threshold = ("bimodal", min(modes[1])) if modes else ("spread", min(values) * (1 + stats.MIN_REL_GAP))
    slow = [i for i, v in enumerate(values) if v >= threshold]
    return kind, slow, [i for i in range(len(values)) if i not in set(slow)]


def diagnose(view: str, values: list[float], clocks: list, summaries: dict) -> dict:
    """Why one view of one point is unstable; each cause that holds is listed:
    - launch overhead: unstable in an eager view while the CUDA-graph view of the same point is stable (the
      host's launch, not the kernel, moves the time);
    - warm-up: the minority of samples (slow or fast) are the point's first ones (a JIT or autotune step);
    - SM clock: slow and fast samples ran at SM clocks more than CLOCK_SPLIT apart (nvidia-smi readings);
    - isolated outlier: at most two slow samples among the rest (a transient on the machine)."""
    kind, slow, fast = slow_and_fast(values)
    minority, minority_name = (slow, "slow") if len(slow) <= len(fast) else (fast, "fast")
    early = max(3, int(EARLY_SHARE * len(values)))
    causes = []
    graph, wall = summaries.get("graph_us"), summaries.get("eager_wall_us")
    if view != "graph_us" and graph is not None and not unstable(graph):
        host = f", eager launch to completion {wall['median']:.1f} us" if wall else ""
        causes.append(f"launch overhead: unstable in {view}, stable under CUDA-graph replay "
                      f"(graph median {graph['median']:.2f} us{host})")
    if minority and sum(i < early for i in minority) >= 0.8 * len(minority):
        causes.append(f"warm-up: the {minority_name} samples are {len(minority)} of the first {early}")
    sm_slow = [clocks[i] for i in slow if clocks[i] is not None]
    sm_fast = [clocks[i] for i in fast if clocks[i] is not None]
    clock = None
    if sm_slow and sm_fast:
        clock = {"slow_sm_mhz": stats.median(sm_slow), "fast_sm_mhz": stats.median(sm_fast)}
        if abs(clock["slow_sm_mhz"] - clock["fast_sm_mhz"]) > CLOCK_SPLIT * clock["fast_sm_mhz"]:
            causes.append(f"SM clock: {clock['slow_sm_mhz']:.0f} MHz when slow, {clock['fast_sm_mhz']:.0f} MHz "
                          "when fast")
    if len(slow) <= 2 and len(fast) >= len(values) - 2:
        causes.append(f"isolated outlier: {len(slow)} slow sample(s) (index {slow}) among {len(values)}")
    return {"view": view, "kind": kind, "fast_median": stats.median([values[i] for i in fast]) if fast else None,
            "slow_median": stats.median([values[i] for i in slow]) if slow else None, "slow_samples": slow,
            "sm_clock": clock,
            "cause": "; ".join(causes) or "not explained by launch overhead, warm-up or the SM clock"}


def summarize_point(records: list[dict], readings: list[dict]) -> dict:
    good = [r for r in records if "views" in r]
    views = sorted({v for r in good for v in r["views"]})
    clocks = [(nearest_reading(readings, r["t"]) or {}).get("sm_mhz") for r in good]
    out = {"views": {}, "unstable": [], "samples_t": [r["t"] for r in good]}
    for view in views:
        values = [r["views"][view] for r in good if view in r["views"]]
        out["views"][view] = {**view_summary(values), "samples_us": values}
    for view in views:
        if unstable(out["views"][view]):
            values = out["views"][view]["samples_us"]
            out["unstable"].append(diagnose(view, values, clocks, out["views"]))
    primary = primary_view(views)
    if primary:
        values = out["views"][primary]["samples_us"]
        early = max(3, int(EARLY_SHARE * len(values)))
        if len(values) > early:  # first samples against the rest: a JIT or autotune step left in the timings
            out["first_over_rest"] = stats.median(values[:early]) / stats.median(values[early:])
    known = [c for c in clocks if c is not None]
    out["sm_mhz_median"] = stats.median(known) if known else None
    out["errors"] = [r["error"] for r in records if "error" in r][:3]
    out["extra_totals"] = {}
    for r in good:
        for name, value in r.get("extra", {}).items():
            out["extra_totals"][name] = out["extra_totals"].get(name, 0) + value
    return out


def primary_view(views) -> str | None:
    """The view claims are made in: device time under graph replay where it exists (GPU), else the first."""
    views = list(views)
    return "graph_us" if "graph_us" in views else (views[0] if views else None)


def speedups(summaries: dict, base_label: str, point_ids: list[str]) -> list[dict]:
    """Each non-base tree against the base, per point and view: median ratio, seeded bootstrap CI, claim."""
    out = []
    base = summaries.get(base_label, {})
    for label, points in summaries.items():
        if label == base_label:
            continue
        for pid in point_ids:
            if pid not in points or pid not in base:
                continue
            for view, s in points[pid]["views"].items():
                b = base[pid]["views"].get(view)
                if not b:
                    continue
                out.append({"tree": label, "id": pid, "view": view, "against": base_label,
                            **stats.speedup(b["samples_us"], s["samples_us"],
                                            seed=stats.seed_of(f"{label}|{pid}|{view}"))})
    return out


def overview(summaries: dict) -> dict:
    """Counts over every (tree, point): samples spread past SPREAD_LIMIT and bimodal samples, per view, and
    how often each cause was found for an unstable one (per view)."""
    spread, bimodal, causes, total = {}, {}, {}, {}
    for points in summaries.values():
        for p in points.values():
            for view, s in p["views"].items():
                total[view] = total.get(view, 0) + 1
                if s["max_over_min"] and s["max_over_min"] > SPREAD_LIMIT:
                    spread[view] = spread.get(view, 0) + 1
                bimodal[view] = bimodal.get(view, 0) + bool(s["bimodal"])
            for d in p["unstable"]:
                for cause in d["cause"].split("; "):
                    kind = f"{d['view']}: {cause.split(':')[0]}"
                    causes[kind] = causes.get(kind, 0) + 1
    return {"points_per_view": total, f"max_over_min_above_{SPREAD_LIMIT}": spread, "bimodal": bimodal,
            "unstable_causes": causes}


# ------------------------------------------------------------------------------------------ printing
def compact_claim(ratio: dict) -> str:
    low, high = ratio["ci95"]
    word = "faster" if low > 1.0 else "slower" if high < 1.0 else "n.d."
    return f"x{ratio['speedup']:.2f} [{low:.2f}-{high:.2f}] {word}"


def table(point_ids: list[str], key_text: dict, head: str, labels: list[str], summaries: dict, ratios: list[dict],
          view: str) -> str:
    """One line per point: median [IQR] per tree; against the base, x ratio [95% CI] and faster / slower / n.d.
    (no difference measured: the interval includes 1.0)."""
    by = {(r["tree"], r["id"]): r for r in ratios if r["view"] == view}
    width = 46
    header = f"{head} | " + " | ".join(f"{label[:width]:>{width}}" for label in labels)
    lines = [header, "-" * len(header)]
    for pid in point_ids:
        cells = []
        for label in labels:
            p = summaries.get(label, {}).get(pid)
            s = p["views"].get(view) if p else None
            if s is None:
                cells.append(f"{'-':>{width}}")
                continue
            flag = "*" if s["bimodal"] else "~" if unstable(s) else " "
            text = f"{s['median']:9.2f}us iqr {s['iqr']:6.2f}{flag}"
            r = by.get((label, pid))
            cells.append(f"{text + ('  ' + compact_claim(r) if r else ''):>{width}}")
        lines.append(f"{key_text[pid]} | " + " | ".join(cells))
    return "\n".join(lines)


def claim_lines(ratios: list[dict], key_text: dict, view: str) -> list[str]:
    """The sentences whose interval excludes 1.0, in the wording of stats.claim."""
    return [f"{r['tree']} vs {r['against']} at {key_text[r['id']].strip()}: {r['claim']}"
            for r in ratios if r["view"] == view and not r["claim"].startswith("no difference")]


def unstable_lines(summaries: dict, key_text: dict) -> list[str]:
    lines = []
    for label, points in summaries.items():
        for pid, p in points.items():
            for d in p["unstable"]:
                fast = "-" if d["fast_median"] is None else f"{d['fast_median']:.2f}"
                slow = "-" if d["slow_median"] is None else f"{d['slow_median']:.2f}"
                lines.append(f"{label} {key_text[pid].strip()} [{d['view']}, {d['kind']}]: fast {fast} / slow "
                             f"{slow} us ({len(d['slow_samples'])} slow); {d['cause']}")
    return lines


def report(point_ids, key_text, head, labels, summaries, ratios, views) -> str:
    parts = []
    for view in views:
        parts.append(f"== {view}: median us [IQR] per tree; vs {labels[0]}: x speedup [95% bootstrap CI], "
                     "faster / slower where the CI excludes 1.0, n.d. = no difference measured; * bimodal, "
                     f"~ max/min > {SPREAD_LIMIT}")
        parts.append(table(point_ids, key_text, head, labels, summaries, ratios, view))
    primary = primary_view(views)
    claims = claim_lines(ratios, key_text, primary)
    parts.append(f"\n== claims ({primary}; CI excludes 1.0): {len(claims)}")
    parts += claims or ["(none)"]
    lines = unstable_lines(summaries, key_text)
    parts.append(f"\n== unstable samples: bimodal (rule: bench/stats.py) or max/min > {SPREAD_LIMIT}, with the "
                 f"cause found: {len(lines)}")
    parts += lines or ["(none)"]
    parts.append("\n== overview\n" + json.dumps(overview(summaries), indent=1))
    return "\n".join(parts)
