#!/usr/bin/env python3
"""Benchmark MiniMax QK RMSNorm (``MiniMaxText01RMSNormTP.forward_qkv``) across patched vLLM trees.

Each tree (base, reference, candidates...) runs in its own worker process with the tree first on
``PYTHONPATH``; the driver takes one sample at a time from each, round-robin, so the trees' samples interleave
in time (bench/interleaved.py). A worker builds the layers the way the minimax speed test does, with the probes'
own code (rubrics/minimax-qk-norm/probes: ``speed_runner``'s stateless TP group, whose all-reduce is one opaque
registered op, a copy, and its host and CUDA-graph timers; ``qknorm_sim``'s import of ``rms_norm_tp`` under a
vLLM config and its installed TP group), so only the norm itself is timed. Shapes are MiniMax-M2 per-rank
widths: TP1 q 6144 / kv 1024, TP4 q 1536 / kv 256, TP8 q 768 / kv 128 (``tp_world`` is set accordingly, so tp>1
shapes take each tree's tp>1 path). Two views, each sample the median of ``--reps`` repetitions:

* ``graph_us``: device time per call, CUDA events around one replay of a graph of ``--graph-inner`` calls,
  each replay after an L2 flush (a write of twice the L2, at least 256 MiB, not timed; the later calls of a
  replay run warm);
* ``host_us``: host-inclusive time per call, ``--host-inner`` back-to-back eager calls then one synchronize.

``--samples`` samples per tree and point (default 30). Per tree and point: median and IQR; per tree against the
first: median ratio with a seeded 95% bootstrap interval (bench/stats.py), worded "faster"/"slower" only where
the interval excludes 1.0. Bimodal samples are flagged and diagnosed as in the moe benchmark. Each point also
records the max abs error against a full-width fp32 RMSNorm (tp 1 only; at tp>1 the identity all-reduce makes
outputs meaningless) and how many frames Dynamo compiled while it was timed (nonzero: not the compiled speed).
TorchDynamo stays on (the base's compiled path is timed compiled) except in CPU smoke mode.

Usage (GPU):
  python bench/minimax_qk_norm.py --tree base=/path/base --tree reference=/path/ref \
      --tree cand=/path/cand --json out.json
CPU smoke run (Triton interpreter, tiny shapes, host timing only):
  python bench/minimax_qk_norm.py --device cpu --dry-run --tree base=... --tree reference=...
Real TP=2 check on two GPUs (NCCL, one process per GPU), correctness vs full width plus host timing:
  python bench/minimax_qk_norm.py --tp2-real --tree reference=/path/ref --json tp2.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # stats / interleaved beside this file, also when it is not run as a script
    sys.path.insert(0, str(HERE))

import interleaved  # noqa: E402
import stats  # noqa: E402

RUBRICS = HERE.parent / "rubrics"
PROBE_PATHS = [RUBRICS / "minimax-qk-norm" / "probes", RUBRICS / "shared_probes"]
SHAPES = {1: (6144, 1024), 4: (1536, 256), 8: (768, 128)}
GPU_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
DRY_TOKENS = [1, 4]
DRY_SCALE = 16  # divide widths in --dry-run
EPS = 1e-6


def point_id(tp, tokens) -> str:
    return f"tp{tp}:t{tokens}"


def _probe_modules(device: str):
    """The minimax probes' modules, with the stand-ins a process importing the tree needs first."""
    sys.path.extend(str(p) for p in PROBE_PATHS)  # after the tree: vllm is the tree's
    import torch
    import vllm_stand_ins

    vllm_stand_ins.install()
    if device == "cpu":
        vllm_stand_ins.hide_gpus_from_platform_probe()
    import qknorm_sim
    import speed_runner

    speed_runner.register_ops(torch, dispatch_key="CUDA" if device == "cuda" else "CPU")
    return speed_runner, qknorm_sim


def _ref_norm(x, w, eps=EPS):
    xf = x.double()
    return (xf * (xf.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w.double()).float()


def _frames_compiled() -> int:
    from torch._dynamo.utils import counters

    return counters["frames"]["total"]


# ----------------------------------------------------------------------------------------- worker side
class QkWorker:
    """One tree's side: layers and inputs per (tp, tokens), then the samples asked for."""

    def __init__(self, args):
        self.args = args
        self.cuda = args.device == "cuda"
        self.points = {}
        self.keep = contextlib.ExitStack()  # the vLLM config rms_norm_tp was imported under, for the worker's life

    def prepare(self):
        import torch
        import triton

        self.torch = torch
        self.runner, self.sim = _probe_modules(self.args.device)
        import vllm.config  # noqa: F401  (a failure here is the environment's, before the tree's module)

        found = {}
        self.mod = self.keep.enter_context(self.sim.rms_norm_tp_module(found))
        if self.mod is None:
            raise RuntimeError(found.get("import_error", "rms_norm_tp did not import"))
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.args.dtype]
        self.flush, meta = (interleaved.l2_flusher(torch) if self.cuda else (None, {}))
        gen = torch.Generator().manual_seed(0)
        points = []
        for tp in self.args.tp:
            group = self.runner.SpeedTPGroup(tp)  # one per tp: Dynamo guards on the installed group
            for tokens in (DRY_TOKENS if self.args.dry_run else self.args.tokens):
                q, kv = SHAPES[tp]
                if self.args.dry_run:
                    q, kv = q // DRY_SCALE, kv // DRY_SCALE
                point = {"id": point_id(tp, tokens), "tp": tp, "q": q, "kv": kv, "tokens": tokens}
                try:
                    point.update(self._prepare_point(point["id"], group, tp, q, kv, tokens, gen))
                except Exception:  # noqa: BLE001 - a broken point is reported, the others still run
                    point["error"] = traceback.format_exc()[-1500:]
                points.append(point)
        meta.update(torch=torch.__version__, triton=triton.__version__,
                    device=torch.cuda.get_device_name(0) if self.cuda else "cpu")
        return meta, points

    def _prepare_point(self, pid, group, tp, q, kv, tokens, gen):
        torch, args = self.torch, self.args
        with self.sim.installed_group(group), torch.no_grad():
            q_norm = self.mod.MiniMaxText01RMSNormTP(q * tp, eps=EPS)
            k_norm = self.mod.MiniMaxText01RMSNormTP(kv * tp, eps=EPS)
            q_norm.weight.data = (torch.rand(q, generator=gen) + 0.5).to(self.dtype).to(args.device)
            k_norm.weight.data = (torch.rand(kv, generator=gen) + 0.5).to(self.dtype).to(args.device)
            qkv = torch.randn(tokens, q + 2 * kv, generator=gen).to(self.dtype).to(args.device)

            def call():
                return self.mod.MiniMaxText01RMSNormTP.forward_qkv(q_norm, k_norm, qkv, q, kv)

            fields = {}
            qo, ko, _ = call()
            if tp == 1:
                err_q = (qo.float().cpu() - _ref_norm(qkv[:, :q].cpu(), q_norm.weight.cpu())).abs().max()
                err_k = (ko.float().cpu() - _ref_norm(qkv[:, q:q + kv].cpu(), k_norm.weight.cpu())).abs().max()
                fields["max_err"] = float(max(err_q, err_k))
            for _ in range(args.warmup):
                call()
            graph = self.runner.capture_graph(torch, call, args.graph_inner) if self.cuda else None
        self.points[pid] = (group, call, graph)
        return fields

    def sample(self, pid):
        torch, args = self.torch, self.args
        group, call, graph = self.points[pid]
        sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        before = _frames_compiled()
        with self.sim.installed_group(group), torch.no_grad():
            host = [self.runner.host_sample(torch, call, args.host_inner, sync) for _ in range(args.reps)]
            views = {"host_us": stats.median(host)}
            if graph is not None:
                views["graph_us"] = stats.median(interleaved.device_times_us(
                    torch, graph.replay, args.reps, self.flush, per=args.graph_inner))
        return views, {"frames_compiled_while_timed": _frames_compiled() - before}


# ----------------------------------------------------------------------------------------- real TP=2


def nccl_tp_group(runner, world_size, rank):
    """The speed test's stateless TP group with a real NCCL all-reduce, as rank ``rank`` (after register_ops)."""
    import torch.distributed as dist

    class NcclTPGroup(runner.SpeedTPGroup):
        def all_reduce(self, x):
            y = x.clone()
            dist.all_reduce(y)
            return y

        def barrier(self):
            dist.barrier()

        @property
        def is_first_rank(self):
            return self.rank_in_group == 0

        @property
        def is_last_rank(self):
            return self.rank_in_group == self.world_size - 1

    group = NcclTPGroup(world_size)
    group.rank_in_group = group.rank = group.local_rank = rank
    return group


def _tp2_rank(rank, args, port, out_path):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2)
    rec = {"rank": rank, "error": None}
    try:
        runner, sim = _probe_modules("cuda")
        import vllm.config  # noqa: F401

        found = {}
        with sim.rms_norm_tp_module(found) as mod:
            if mod is None:
                raise RuntimeError(found.get("import_error", "rms_norm_tp did not import"))
            rec["results"] = [_tp2_case(torch, dist, runner, sim, mod, rank, tokens) for tokens in (1, 7, 256, 2048)]
    except Exception:  # noqa: BLE001 - the rank reports what failed
        rec["error"] = traceback.format_exc()[-3000:]
    with open(f"{out_path}.rank{rank}", "w") as f:
        json.dump(rec, f)
    dist.destroy_process_group()


def _tp2_case(torch, dist, runner, sim, mod, rank, tokens):
    q_full, kv_full = SHAPES[1]
    gen = torch.Generator().manual_seed(tokens)
    q_all = torch.randn(tokens, q_full, generator=gen) * torch.linspace(0.2, 3.0, q_full)
    k_all = torch.randn(tokens, kv_full, generator=gen) * torch.linspace(3.0, 0.3, kv_full)
    v_all = torch.randn(tokens, kv_full, generator=gen)
    qw = torch.rand(q_full, generator=gen) + 0.5
    kw = torch.rand(kv_full, generator=gen) + 0.5
    qs, ks = q_full // 2, kv_full // 2
    sq, sk = slice(rank * qs, (rank + 1) * qs), slice(rank * ks, (rank + 1) * ks)
    with sim.installed_group(nccl_tp_group(runner, 2, rank)), torch.no_grad():
        q_norm = mod.MiniMaxText01RMSNormTP(q_full, eps=EPS)
        k_norm = mod.MiniMaxText01RMSNormTP(kv_full, eps=EPS)
        q_norm.weight.data = qw[sq].to(torch.bfloat16).cuda()
        k_norm.weight.data = kw[sk].to(torch.bfloat16).cuda()
        qkv = torch.cat([q_all[:, sq], k_all[:, sk], v_all[:, sk]], -1).to(torch.bfloat16).cuda()

        def call():
            return mod.MiniMaxText01RMSNormTP.forward_qkv(q_norm, k_norm, qkv, qs, ks)

        qo, ko, _ = call()
        gq = [torch.empty_like(qo) for _ in range(2)]
        gk = [torch.empty_like(ko) for _ in range(2)]
        dist.all_gather(gq, qo.contiguous())
        dist.all_gather(gk, ko.contiguous())
        ref_q = _ref_norm(q_all.to(torch.bfloat16), qw.to(torch.bfloat16))
        ref_k = _ref_norm(k_all.to(torch.bfloat16), kw.to(torch.bfloat16))
        got_q = torch.cat(gq, -1).float().cpu()
        got_k = torch.cat(gk, -1).float().cpu()
        ok = torch.allclose(got_q, ref_q, atol=3e-2, rtol=3e-2) and torch.allclose(got_k, ref_k, atol=3e-2, rtol=3e-2)
        for _ in range(10):
            call()
        host = stats.median([runner.host_sample(torch, call, 20) for _ in range(30)])
    return {"tokens": tokens, "q_per_rank": qs, "kv_per_rank": ks, "allclose_3e-2": bool(ok),
            "max_err_q": float((got_q - ref_q).abs().max()), "max_err_k": float((got_k - ref_k).abs().max()),
            "host_us_with_nccl_all_reduce": host}


def tp2_worker(args):
    import torch.multiprocessing as mp

    port = 29500 + os.getpid() % 1000
    mp.spawn(_tp2_rank, args=(args, port, args.out), nprocs=2, join=True)
    recs = []
    for r in range(2):
        with open(f"{args.out}.rank{r}") as f:
            recs.append(json.load(f))
    with open(args.out, "w") as f:
        json.dump({"tree": args.tree_path, "ranks": recs}, f)


def _tp2_spawn(name, path, args):
    fd, out = tempfile.mkstemp(suffix=f"-{name}.json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--tp2-worker", "--tree-path", path, "--out", out]
    proc = subprocess.run(cmd, env=_env_for(args)(path), capture_output=True, text=True, timeout=args.timeout)
    try:
        with open(out) as f:
            data = json.load(f)
    except Exception:  # noqa: BLE001 - a worker without output is reported
        data = {"error": f"worker rc={proc.returncode}\n{proc.stderr[-3000:]}", "ranks": []}
    data["name"] = name
    return data


# ----------------------------------------------------------------------------------------- driver


def _env_for(args):
    def env_for(path):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([path] + [p for p in [env.get("PYTHONPATH")] if p])
        if args.device == "cpu":
            env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", TORCHDYNAMO_DISABLE="1")
        return env

    return env_for


def _worker_command(args):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--device", args.device, "--dtype", args.dtype,
           "--warmup", str(args.warmup), "--reps", str(args.reps), "--host-inner", str(args.host_inner),
           "--graph-inner", str(args.graph_inner), "--tp", *map(str, args.tp), "--tokens", *map(str, args.tokens)]
    return lambda label, path: cmd + (["--dry-run"] if args.dry_run else [])


def compare_trees(args, trees):
    workers = interleaved.start_workers(trees, _worker_command(args), _env_for(args), args.timeout)
    tokens = DRY_TOKENS if args.dry_run else args.tokens
    ids = [point_id(tp, t) for tp in args.tp for t in tokens]
    monitor = interleaved.ClockMonitor(enabled=args.device == "cuda")
    started = time.time()
    try:
        taken = interleaved.sample_interleaved(workers, ids, args.samples, point_major=False, timeout=60.0)
    finally:
        readings = monitor.stop()
        clock_log_head = monitor.first_lines
        for w in workers:
            w.close()
    labels = [label for label, _ in trees]
    summaries = {label: {pid: interleaved.summarize_point(records, readings)
                         for pid, records in taken[label].items()} for label in labels}
    ratios = interleaved.speedups(summaries, labels[0], ids)
    shapes = {pt["id"]: pt for w in workers for pt in w.points}
    key_text = {pid: f"{shapes[pid]['tp']:>3} {shapes[pid]['q']:>5} {shapes[pid]['kv']:>5} {shapes[pid]['tokens']:>6}"
                for pid in ids if pid in shapes}
    ids = [pid for pid in ids if pid in key_text]
    views = sorted({v for pts in summaries.values() for s in pts.values() for v in s["views"]},
                   key=lambda v: (v != "graph_us", v))
    text = interleaved.report(ids, key_text, f"{'tp':>3} {'q':>5} {'kv':>5} {'tokens':>6}", labels, summaries,
                              ratios, views)
    text += "\n\n" + _notes(workers, summaries)
    meta = {"argv": sys.argv, "device": args.device, "dtype": args.dtype, "dry_run": args.dry_run,
            "shapes": {str(k): v for k, v in SHAPES.items()}, "samples": args.samples, "reps": args.reps,
            "sampling_s": time.time() - started, "workers": {w.label: w.meta for w in workers},
            "clock_readings": len(readings), "clock_log_head": clock_log_head,
            "bimodal_rule": "bench/stats.py split_modes",
            "ci": "95% percentile bootstrap, 2000 resamples, seeded"}
    return text, {"meta": meta, "points": {w.label: w.points for w in workers}, "summaries": summaries,
                  "ratios": ratios, "clocks": readings, "report": text}


def _notes(workers, summaries) -> str:
    lines = ["== errors, recompiles while timed, max abs error vs fp32 RMSNorm at tp 1"]
    for w in workers:
        if w.error:
            lines.append(f"[{w.label}] ERROR: {w.error[-800:]}")
        for pt in w.points:
            if "error" in pt:
                lines.append(f"[{w.label}] {pt['id']}: {pt['error'][-400:]}")
        recompiled = [pid for pid, s in summaries.get(w.label, {}).items()
                      if s["extra_totals"].get("frames_compiled_while_timed")]
        if recompiled:
            lines.append(f"[{w.label}] WARNING: compiled again while timed at {recompiled}: not compiled speed")
        errs = [pt["max_err"] for pt in w.points if "max_err" in pt]
        if errs:
            lines.append(f"[{w.label}] max abs error {max(errs):.3g}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="a patched vLLM tree; the first one is the speedup baseline (give the base first)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes and token counts (smoke test)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--tp", type=int, nargs="+", default=[1, 4, 8], choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, nargs="+", default=GPU_TOKENS)
    ap.add_argument("--samples", type=int, default=30, help="samples per tree and point")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per sample and view; a sample is their median")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--host-inner", type=int, default=20)
    ap.add_argument("--graph-inner", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds a worker may take to prepare")
    ap.add_argument("--json", default="minimax_qk_norm_bench.json")
    ap.add_argument("--tp2-real", action="store_true", help="real TP=2 over NCCL on two GPUs")
    # internal
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tp2-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tree-path", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        worker = QkWorker(args)
        return interleaved.serve(worker.prepare, worker.sample)
    if args.tp2_worker:
        return tp2_worker(args)
    if not args.tree:
        ap.error("give at least one --tree NAME=PATH")
    if args.device == "cpu" and not args.dry_run:
        print("note: CPU timings run Triton under the interpreter; they only show the script works")
    if args.device == "cpu" and args.dtype == "bf16":
        args.dtype = "fp16"  # the Triton interpreter mishandles bf16; fp16 is exact enough for a smoke run
    if args.dry_run and args.device == "cpu":
        args.warmup, args.samples, args.reps, args.host_inner = min(args.warmup, 1), min(args.samples, 3), 1, 1
    trees = [t.split("=", 1) if "=" in t else (os.path.basename(t.rstrip("/")), t) for t in args.tree]
    trees = [(name, os.path.abspath(path)) for name, path in trees]
    if args.tp2_real:
        runs = [_tp2_spawn(n, p, args) for n, p in trees]
        print(json.dumps(runs, indent=1))
        doc = {"meta": {"argv": sys.argv, "tp2_real": True}, "runs": runs}
    else:
        text, doc = compare_trees(args, trees)
        print(text)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
