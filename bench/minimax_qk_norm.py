#!/usr/bin/env python3
"""Benchmark MiniMax QK RMSNorm (``MiniMaxText01RMSNormTP.forward_qkv``) across patched vLLM trees.

Each tree (base, reference, candidates...) is imported in its own subprocess with the tree first on
``PYTHONPATH``. The TP group is faked and its all-reduce is an identity (a copy), so only the norm itself
is timed. Shapes are MiniMax-M2 per-rank widths: TP1 q 6144 / kv 1024, TP4 q 1536 / kv 256, TP8 q 768 /
kv 128 (``tp_world`` is set accordingly, so tp>1 shapes take each tree's tp>1 path). Two views per point:

* ``graph_us``: device time of one call, from a CUDA graph holding ``--graph-inner`` calls (CUDA events);
* ``host_us``: host-inclusive time per call, ``--host-inner`` back-to-back eager calls then one synchronize.

Both are medians over ``--iters`` samples after ``--warmup`` rounds. Each point also records the max abs
error against a full-width fp32 RMSNorm (tp 1 only; at tp>1 the identity all-reduce makes outputs
meaningless). TorchDynamo stays on (the base's compiled path is timed compiled) except in CPU smoke mode.

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
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

SHAPES = {1: (6144, 1024), 4: (1536, 256), 8: (768, 128)}
GPU_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
DRY_TOKENS = [1, 4]
DRY_SCALE = 16  # divide widths in --dry-run


# ----------------------------------------------------------------------------------------- worker side


class _IdentityTP:
    """Stand-in for vLLM's TP GroupCoordinator; all-reduce is an opaque copy (or a real NCCL all-reduce).

    Both properties keep the base's torch.compile'd path compiled as it is in vLLM. State read inside a compiled
    function makes Dynamo guard on it, so a counter bumped on every all-reduce recompiled the base on every call
    until Dynamo's recompile limit, after which it ran eagerly (the tp > 1 base numbers recorded before
    2026-11-30 are that eager fallback). And a plain clone inside the compiled graph would let Inductor fuse
    across the all-reduce, which vLLM's own opaque all-reduce op forbids. So calls are counted only while
    ``counting`` is set (one call per point, outside the timings), and the copy is a registered op."""

    def __init__(self, world_size, rank=0, real=False):
        self.world_size = world_size
        self.rank_in_group = rank
        self.rank = rank
        self.local_rank = rank
        self.ranks = list(range(world_size))
        self.unique_name = "tp:bench"
        self.cpu_group = None
        self.device_group = None
        self.real = real
        self.counting = False
        self.calls = 0

    def all_reduce(self, x):
        if self.counting:
            self.calls += 1
        if not self.real:
            return _identity_all_reduce()(x)
        import torch.distributed as dist

        y = x.clone()
        dist.all_reduce(y)
        return y

    def barrier(self):
        if self.real:
            import torch.distributed as dist

            dist.barrier()


_KEEP: list = []
_OPS: list = []


def _identity_all_reduce():
    """``grader_bench::identity_all_reduce``: a copy that torch.compile treats as opaque, defined once per process."""
    if not _OPS:
        import torch

        # the schema is spelled out: this module's postponed annotations are strings torch cannot resolve here
        @torch.library.custom_op("grader_bench::identity_all_reduce", mutates_args=(), schema="(Tensor x) -> Tensor")
        def identity_all_reduce(x):
            return x.clone()

        @identity_all_reduce.register_fake
        def _(x):
            return torch.empty_like(x)

        _OPS.append(identity_all_reduce)
    return _OPS[0]


def _setup_vllm():
    import types

    from vllm.config import CompilationConfig, set_current_vllm_config

    cfg = types.SimpleNamespace(compilation_config=CompilationConfig(custom_ops=["all"]))
    ctx = set_current_vllm_config(cfg)
    ctx.__enter__()
    _KEEP.append(ctx)  # a dropped generator context would restore the old (unset) config
    from vllm.model_executor.layers.minimax_rms_norm import rms_norm_tp

    return rms_norm_tp


def _make_layer_pair(mod, group, q, kv, dtype, device, gen):
    import torch
    from vllm.distributed import parallel_state as ps

    ps._TP = group
    q_norm = mod.MiniMaxText01RMSNormTP(q * group.world_size, eps=1e-6)
    k_norm = mod.MiniMaxText01RMSNormTP(kv * group.world_size, eps=1e-6)
    with torch.no_grad():
        q_norm.weight.data = (torch.rand(q, generator=gen) + 0.5).to(dtype).to(device)
        k_norm.weight.data = (torch.rand(kv, generator=gen) + 0.5).to(dtype).to(device)
    return q_norm, k_norm


def _frames_compiled(torch) -> int:
    from torch._dynamo.utils import counters

    return counters["frames"]["total"]


def _ref_norm(x, w, eps=1e-6):
    xf = x.double()
    return (xf * (xf.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w.double()).float()


def _time_host(torch, fn, device, warmup, iters, inner):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e6 / inner)
    return statistics.median(samples)


def _time_graph(torch, fn, warmup, iters, inner):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        fn()
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(inner):
                fn()
    torch.cuda.synchronize()
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / inner)
    return statistics.median(samples)


def worker(args):
    result = {"tree": args.tree_path, "device": args.device, "points": [], "error": None}
    try:
        import torch

        mod = _setup_vllm()
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
        gen = torch.Generator().manual_seed(0)
        tokens_list = DRY_TOKENS if args.dry_run else args.tokens
        for tp in args.tp:
            q, kv = SHAPES[tp]
            if args.dry_run:
                q, kv = q // DRY_SCALE, kv // DRY_SCALE
            group = _IdentityTP(tp)
            q_norm, k_norm = _make_layer_pair(mod, group, q, kv, dtype, args.device, gen)
            for tokens in tokens_list:
                point = {"tp": tp, "q": q, "kv": kv, "tokens": tokens}
                try:
                    qkv = torch.randn(tokens, q + 2 * kv, generator=gen).to(dtype).to(args.device)

                    def call():
                        return mod.MiniMaxText01RMSNormTP.forward_qkv(q_norm, k_norm, qkv, q, kv)

                    with torch.no_grad():
                        qo, ko, vo = call()
                        if tp == 1:
                            err_q = (qo.float().cpu() - _ref_norm(qkv[:, :q].cpu(), q_norm.weight.cpu())).abs().max()
                            err_k = (ko.float().cpu() - _ref_norm(qkv[:, q:q + kv].cpu(), k_norm.weight.cpu())).abs().max()
                            point["max_err"] = float(max(err_q, err_k))
                        group.calls, group.counting = 0, True
                        call()
                        point["all_reduce_calls"], group.counting = group.calls, False
                        call()  # back on the non-counting compiled entry before anything is timed
                        compiled_before = _frames_compiled(torch)
                        point["host_us"] = _time_host(
                            torch, call, args.device, args.warmup, args.iters, args.host_inner
                        )
                        if args.device == "cuda":
                            point["graph_us"] = _time_graph(
                                torch, call, args.warmup, args.iters, args.graph_inner
                            )
                        # nonzero: a compiled path recompiled while timed, so its numbers are not its compiled speed
                        point["frames_compiled_while_timed"] = _frames_compiled(torch) - compiled_before
                except Exception:
                    point["error"] = traceback.format_exc()[-1500:]
                result["points"].append(point)
    except Exception:
        result["error"] = traceback.format_exc()[-3000:]
    with open(args.out, "w") as f:
        json.dump(result, f)


# ----------------------------------------------------------------------------------------- real TP=2


def _tp2_rank(rank, args, port, out_path):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2)
    rec = {"rank": rank, "error": None}
    try:
        mod = _setup_vllm()
        q_full, kv_full = SHAPES[1]
        gen = torch.Generator().manual_seed(0)
        res = []
        for tokens in (1, 7, 256, 2048):
            q_all = torch.randn(tokens, q_full, generator=gen) * torch.linspace(0.2, 3.0, q_full)
            k_all = torch.randn(tokens, kv_full, generator=gen) * torch.linspace(3.0, 0.3, kv_full)
            v_all = torch.randn(tokens, kv_full, generator=gen)
            qw = torch.rand(q_full, generator=gen) + 0.5
            kw = torch.rand(kv_full, generator=gen) + 0.5
            qs, ks = q_full // 2, kv_full // 2
            sq, sk = slice(rank * qs, (rank + 1) * qs), slice(rank * ks, (rank + 1) * ks)
            group = _IdentityTP(2, rank, real=True)
            from vllm.distributed import parallel_state as ps

            ps._TP = group
            q_norm = mod.MiniMaxText01RMSNormTP(q_full, eps=1e-6)
            k_norm = mod.MiniMaxText01RMSNormTP(kv_full, eps=1e-6)
            with torch.no_grad():
                q_norm.weight.data = qw[sq].to(torch.bfloat16).cuda()
                k_norm.weight.data = kw[sk].to(torch.bfloat16).cuda()
                qkv = torch.cat([q_all[:, sq], k_all[:, sk], v_all[:, sk]], -1).to(torch.bfloat16).cuda()
                qo, ko, _ = mod.MiniMaxText01RMSNormTP.forward_qkv(q_norm, k_norm, qkv, qs, ks)
                gq = [torch.empty_like(qo) for _ in range(2)]
                gk = [torch.empty_like(ko) for _ in range(2)]
                dist.all_gather(gq, qo.contiguous())
                dist.all_gather(gk, ko.contiguous())
                ref_q = _ref_norm(q_all.to(torch.bfloat16), qw.to(torch.bfloat16))
                ref_k = _ref_norm(k_all.to(torch.bfloat16), kw.to(torch.bfloat16))
                got_q = torch.cat(gq, -1).float().cpu()
                got_k = torch.cat(gk, -1).float().cpu()
                ok = torch.allclose(got_q, ref_q, atol=3e-2, rtol=3e-2) and torch.allclose(
                    got_k, ref_k, atol=3e-2, rtol=3e-2
                )
                host = _time_host(
                    torch,
                    lambda: mod.MiniMaxText01RMSNormTP.forward_qkv(q_norm, k_norm, qkv, qs, ks),
                    "cuda", 10, 30, 20,
                )
            res.append({
                "tokens": tokens, "q_per_rank": qs, "kv_per_rank": ks, "allclose_3e-2": bool(ok),
                "max_err_q": float((got_q - ref_q).abs().max()),
                "max_err_k": float((got_k - ref_k).abs().max()),
                "host_us_with_nccl_all_reduce": host,
            })
        rec["results"] = res
    except Exception:
        rec["error"] = traceback.format_exc()[-3000:]
    with open(f"{out_path}.rank{rank}", "w") as f:
        json.dump(rec, f)
    dist.destroy_process_group()


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


# ----------------------------------------------------------------------------------------- driver


def _spawn(name, path, args, mode):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([path] + [p for p in [env.get("PYTHONPATH")] if p])
    if args.device == "cpu":
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", TORCHDYNAMO_DISABLE="1")
    fd, out = tempfile.mkstemp(suffix=f"-{name}.json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), f"--{mode}", "--tree-path", path, "--out", out,
           "--device", args.device, "--dtype", args.dtype, "--warmup", str(args.warmup),
           "--iters", str(args.iters), "--host-inner", str(args.host_inner),
           "--graph-inner", str(args.graph_inner), "--tp", *map(str, args.tp),
           "--tokens", *map(str, args.tokens)]
    if args.dry_run:
        cmd.append("--dry-run")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    try:
        with open(out) as f:
            data = json.load(f)
    except Exception:
        data = {"error": f"worker rc={proc.returncode}\n{proc.stderr[-3000:]}", "points": []}
    data["name"] = name
    return data


def _fmt(v):
    return "-" if v is None else f"{v:8.1f}"


def print_table(runs):
    names = [r["name"] for r in runs]
    base = runs[0]
    for r in runs:
        if r.get("error"):
            print(f"[{r['name']}] ERROR: {r['error'][-800:]}")
        recompiled = [(p["tp"], p["tokens"]) for p in r.get("points", []) if p.get("frames_compiled_while_timed")]
        if recompiled:
            print(f"[{r['name']}] WARNING: compiled again while timed at (tp, tokens) {recompiled}: not compiled speed")
    index = {r["name"]: {(p["tp"], p["tokens"]): p for p in r.get("points", [])} for r in runs}
    keys = sorted({k for r in runs for k in index[r["name"]]})
    for view in ("graph_us", "host_us"):
        if not any(view in p for r in runs for p in r.get("points", [])):
            continue
        title = "device time under CUDA graphs" if view == "graph_us" else "host-inclusive, no graphs"
        print(f"\n== {view}: {title} (median us per call; speedup vs {base['name']})")
        head = f"{'tp':>3} {'q':>5} {'kv':>5} {'tokens':>6} " + " ".join(f"{n:>18}" for n in names)
        print(head)
        for key in keys:
            ps = [index[n].get(key) for n in names]
            p0 = next(p for p in ps if p)
            cells = []
            b = ps[0].get(view) if ps[0] else None
            for p in ps:
                v = p.get(view) if p else None
                if p and p.get("error"):
                    cells.append(f"{'error':>18}")
                elif v is None:
                    cells.append(f"{'-':>18}")
                else:
                    sp = f"({b / v:4.2f}x)" if b else ""
                    cells.append(f"{v:9.1f} {sp:>8}")
            print(f"{key[0]:>3} {p0['q']:>5} {p0['kv']:>5} {key[1]:>6} " + " ".join(cells))
    errs = [(r["name"], k, p["max_err"]) for r in runs for k, p in index[r["name"]].items() if "max_err" in p]
    if errs:
        worst = {}
        for n, _, e in errs:
            worst[n] = max(worst.get(n, 0.0), e)
        print("\nmax abs error vs fp32 RMSNorm at tp 1: " + ", ".join(f"{n} {e:.3g}" for n, e in worst.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="a patched vLLM tree; the first one is the speedup baseline (give the base first)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes and token counts (smoke test)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--tp", type=int, nargs="+", default=[1, 4, 8], choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, nargs="+", default=GPU_TOKENS)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--host-inner", type=int, default=20)
    ap.add_argument("--graph-inner", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--json", default="minimax_qk_norm_bench.json")
    ap.add_argument("--tp2-real", action="store_true", help="real TP=2 over NCCL on two GPUs")
    # internal
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tp2-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tree-path", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        return worker(args)
    if args.tp2_worker:
        return tp2_worker(args)
    if not args.tree:
        ap.error("give at least one --tree NAME=PATH")
    if args.device == "cpu" and not args.dry_run:
        print("note: CPU timings run Triton under the interpreter; they only show the script works")
    if args.device == "cpu" and args.dtype == "bf16":
        args.dtype = "fp16"  # the Triton interpreter mishandles bf16; fp16 is exact enough for a smoke run
    if args.dry_run and args.device == "cpu":
        args.warmup, args.iters, args.host_inner = min(args.warmup, 1), min(args.iters, 3), 1
    trees = [t.split("=", 1) if "=" in t else (os.path.basename(t.rstrip("/")), t) for t in args.tree]
    if args.tp2_real:
        runs = [_spawn(n, p, args, "tp2-worker") for n, p in trees]
        print(json.dumps(runs, indent=1))
    else:
        runs = [_spawn(n, p, args, "worker") for n, p in trees]
        print_table(runs)
    meta = {"argv": sys.argv, "device": args.device, "dtype": args.dtype, "dry_run": args.dry_run,
            "shapes": {str(k): v for k, v in SHAPES.items()}}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "runs": runs}, f, indent=1)
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
