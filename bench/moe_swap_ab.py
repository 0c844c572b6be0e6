#!/usr/bin/env python3
"""Benchmark for moe-swap-ab: fused-MoE Triton kernel, FP8 block quant [128, 128], base vs reference vs others.

Each vLLM tree runs in its own worker process (PYTHONPATH=<tree>); the driver takes one sample at a time from
each, round-robin, so the trees' samples interleave in time (bench/interleaved.py). A worker sets the tree up
with the moe-swap-ab probes' own code (rubrics/moe-swap-ab/probes/moe_swap_probes.py: the compiled-op stand-ins
and capability answers, the capability fake of the CPU run, and ``run_numerics`` for the first, checked launch),
then, per shape, M and config mode, launches invoke_fused_moe_triton_kernel (the one Triton launch, no routing
or quantisation) once, compares the output with a float32 result of the same quantised operands and captures
the launch in a CUDA graph.

One sample of a point is the median over --reps repetitions of each of three views, every repetition after an
L2 flush (a write of twice the device's L2, at least 256 MiB, not timed):
  graph_us        CUDA-event time of one graph replay: device time, no launch overhead (claims are made here)
  eager_event_us  CUDA-event time around one eager launch, queued as triton's do_bench does (what this
                  benchmark reported before; a host launch slower than the flush shows up in it)
  eager_wall_us   host wall time of one eager launch from an idle device to its completion
Each point gets --samples samples per tree (default 30), sample-major (every point once per pass). Per tree
and point: median and IQR; per tree against the first tree: median ratio with a seeded 95% bootstrap interval
(bench/stats.py), worded "faster"/"slower" only where the interval excludes 1.0. Bimodal samples are flagged
(rule in bench/stats.py) and diagnosed: eager vs graph view (launch overhead), first vs later samples
(warm-up, JIT), and SM clock read by nvidia-smi at each sample (clocks are read, never set).

Config modes:
  forced   BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, 4 warps, 3 stages for every tree: isolates the kernel change
  default  the tree's own get_default_config(...) (what a config-only change alters)
  tuned    the tree's try_get_optimal_moe_config(...) (tuned JSON files where the tree has one for this GPU)

Usage (GPU):
  python bench/moe_swap_ab.py --tree base=/path/base --tree reference=/path/ref --tree candidate=/path/cand \
      [--tree upstream-0.25.0=/path/vllm-0.25.0] --out bench-moe-swap-ab.json
  (--base/--reference/--candidate/--upstream PATH are shorthands for those --tree labels; the first tree is
  the one the others are compared with.)
Smoke test on CPU (Triton interpreter, float32 operands flagged as FP8, tiny shapes, capability faked to 9.0,
host wall time only):
  python bench/moe_swap_ab.py --dry-run --base /path/base --reference /path/ref --out /tmp/dry.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # stats / interleaved beside this file, also when it is not run as a script
    sys.path.insert(0, str(HERE))

import interleaved  # noqa: E402
import stats  # noqa: E402

RUBRICS = HERE.parent / "rubrics"
PROBE_PATHS = [RUBRICS / "moe-swap-ab" / "probes", RUBRICS / "shared_probes"]
M_LIST = [1, 2, 4, 8, 16, 32, 64]
SHAPES = [(256, 512, 7168), (256, 7168, 256), (128, 1536, 2048)]  # (E, N, K): w2 of a 256-expert model, ...
TOPK = 8
BLOCK = [128, 128]
FORCED = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
          "num_stages": 3}
MODES = ["forced", "default", "tuned"]
DRY_SHAPES = [(4, 256, 256)]
DRY_M = [1, 4]
DRY_TOPK = 2
DRY_MODES = ["forced", "default"]
DRY_CAPABILITY = [9, 0]
SAMPLES, REPS = 30, 10
DRY_SAMPLES, DRY_REPS = 3, 1


def point_id(mode, E, N, K, M) -> str:
    return f"{mode}:E{E}:N{N}:K{K}:M{M}"


def point_text(mode, E, N, K, M) -> str:
    return f"{mode:8} {E:4d} {N:5d} {K:5d} {M:3d}"


def grid(dry: bool):
    """(mode, E, N, K, M) of every point, in table order."""
    shapes, m_list, modes = (DRY_SHAPES, DRY_M, DRY_MODES) if dry else (SHAPES, M_LIST, MODES)
    return [(mode, E, N, K, M) for mode in modes for E, N, K in shapes for M in m_list]


# ------------------------------------------------------------------------------------------------ worker
def _align(topk_ids, n_experts, block_m, device):
    """Token slots sorted by expert, each expert's run padded to block_m (what moe_align_block_size gives)."""
    import torch

    flat = topk_ids.flatten().cpu()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=n_experts).tolist()
    sorted_ids, expert_ids, pos = [], [], 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        pad = (-c) % block_m
        sorted_ids += order[pos:pos + c].tolist() + [flat.numel()] * pad
        expert_ids += [e] * ((c + pad) // block_m)
        pos += c
    as_tensor = lambda x: torch.tensor(x, dtype=torch.int32, device=device)  # noqa: E731
    return as_tensor(sorted_ids), as_tensor(expert_ids), as_tensor([len(sorted_ids)])


def _weights(E, N, K, device, dry):
    """Expert weights and block scales of one shape, made once on the device (up to 3.8 GB in fp32)."""
    import torch

    g = torch.Generator(device=device).manual_seed(E * 7 + N * 3 + K)
    gn, gk = BLOCK
    b = torch.randn(E, N, K, generator=g, device=device) * 8 / K ** 0.5
    B = b if dry else b.to(torch.float8_e4m3fn)  # the interpreter mis-handles fp8 conversions: float32 data there
    del b
    b_s = torch.rand(E, -(-N // gn), -(-K // gk), generator=g, device=device) * 0.05 + 0.01
    return dict(B=B, B_scale=b_s)


def _activations(E, K, M, topk, device, dry):
    import torch

    g = torch.Generator().manual_seed(E * 7 + K + M)
    a = torch.randn(M, K, generator=g)
    a_s = torch.rand(M, -(-K // BLOCK[1]), generator=g) + 0.5
    topk_w, topk_ids = torch.topk(torch.rand(M, E, generator=g), topk, dim=1)
    A = a if dry else a.to(torch.float8_e4m3fn)
    return dict(A=A.to(device), A_scale=a_s.to(device), topk_weights=topk_w.to(device), topk_ids=topk_ids)


def _reference(inp, device):
    """float32 result of the same quantised operands, on the device, for the experts the tokens use."""
    import torch

    gn, gk = BLOCK
    A, B = inp["A"].float(), inp["B"]
    M, K = A.shape
    E, N, _ = B.shape
    A = A * inp["A_scale"].repeat_interleave(gk, 1)[:, :K]
    ids, w = inp["topk_ids"].to(device), inp["topk_weights"]
    out = torch.empty(M, ids.shape[1], N, device=device)
    for e in ids.unique().tolist():
        Bd = B[e].float() * inp["B_scale"][e].repeat_interleave(gn, 0)[:N].repeat_interleave(gk, 1)[:, :K]
        rows, cols = (ids == e).nonzero(as_tuple=True)
        out[rows, cols] = (A[rows] @ Bd.T) * w[rows, cols][:, None]
    return out.cpu()


def _config(fm, mode, E, N, K, M, topk):
    if mode == "forced":
        return dict(FORCED)
    if mode == "default":
        return fm.get_default_config(M, E, N, K, topk, "fp8_w8a8", BLOCK)
    w1_shape, w2_shape = (E, N, K), (E, K, N // 2)
    return fm.try_get_optimal_moe_config(w1_shape, w2_shape, topk, "fp8_w8a8", M, BLOCK)


class MoeWorker:
    """One tree's side: prepare every point, then time the one asked for."""

    def __init__(self, dry: bool, reps: int):
        self.dry, self.reps = dry, reps
        self.calls, self.graphs = {}, {}
        self.keep = contextlib.ExitStack()  # the CPU run's capability fake, held for the worker's life

    def prepare(self):
        import torch

        sys.path.extend(str(p) for p in PROBE_PATHS)  # after the tree: vllm is the tree's
        import vllm_stand_ins

        vllm_stand_ins.install()
        if self.dry:
            vllm_stand_ins.hide_gpus_from_platform_probe()
        import moe_swap_probes
        import triton
        import triton.language as tl

        self.torch, self.probes = torch, moe_swap_probes
        self.fm = moe_swap_probes.fused_moe_module()
        self.compute_type = tl.float32 if self.dry else tl.bfloat16
        if self.dry:
            self.keep.enter_context(moe_swap_probes.faked_capability(DRY_CAPABILITY))
            self.device, self.capability, self.flush, flush_meta = "cpu", DRY_CAPABILITY, None, {}
        else:
            self.device, self.capability = "cuda", list(torch.cuda.get_device_capability())
            self.flush, flush_meta = interleaved.l2_flusher(torch)
        topk = DRY_TOPK if self.dry else TOPK
        points, weights = [], {}
        for mode, E, N, K, M in grid(self.dry):
            if (E, N, K) not in weights:  # once per shape: every mode's launches read the same weights
                weights[(E, N, K)] = _weights(E, N, K, self.device, self.dry)
            inp = {**weights[(E, N, K)], **_activations(E, K, M, topk, self.device, self.dry)}
            point = {"id": point_id(mode, E, N, K, M), "mode": mode, "E": E, "N": N, "K": K, "M": M}
            try:
                point.update(self._prepare_point(point["id"], inp, mode, E, N, K, M, topk))
            except Exception as exc:  # noqa: BLE001 - a broken tree gets a point saying so, the others still run
                point["error"] = f"{type(exc).__name__}: {exc}"[:300]
            points.append(point)
        meta = {"torch": torch.__version__, "triton": triton.__version__, "capability": self.capability,
                "device": torch.cuda.get_device_name(0) if not self.dry else "cpu", **flush_meta}
        return meta, points

    def _prepare_point(self, pid, inp, mode, E, N, K, M, topk):
        """Launch once through the probe (compiling), check against float32, capture the graph."""
        torch = self.torch
        cfg = _config(self.fm, mode, E, N, K, M, topk)
        st, ex, ntp = _align(inp["topk_ids"], E, cfg["BLOCK_SIZE_M"], self.device)
        C = torch.empty(M, topk, N, dtype=torch.float32 if self.dry else torch.bfloat16, device=self.device)
        launch = dict(A=inp["A"], B=inp["B"], C=C, A_scale=inp["A_scale"], B_scale=inp["B_scale"],
                      topk_weights=inp["topk_weights"], sorted_token_ids=st, expert_ids=ex,
                      num_tokens_post_padded=ntp, mul_routed_weight=True, top_k=topk, config=dict(cfg),
                      compute_type="fp32" if self.dry else "bf16", use_fp8_w8a8=True, use_int8_w8a8=False,
                      use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False, block_shape=BLOCK)
        t0 = time.perf_counter()
        out = self.probes.run_numerics(launch, self.capability, guard=0, device=self.device)
        first_call_ms = (time.perf_counter() - t0) * 1e3
        ref = _reference(inp, self.device)
        err = ((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item()
        kwargs = {**launch, "compute_type": self.compute_type}

        def call():
            self.fm.invoke_fused_moe_triton_kernel(**{**kwargs, "config": dict(cfg)})

        self.calls[pid] = call
        fields = dict(max_rel_err=err, first_call_ms=first_call_ms, config={k: cfg[k] for k in sorted(cfg)})
        if not self.dry:
            try:
                self.graphs[pid] = self._capture(call)
            except Exception as exc:  # noqa: BLE001 - the eager views are still taken; the point has no graph_us
                fields["graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return fields

    def _capture(self, call):
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        graph.replay()
        torch.cuda.synchronize()
        return graph

    def sample(self, pid):
        call = self.calls[pid]
        if self.dry:
            return {"eager_wall_us": stats.median(interleaved.wall_times_us(call, self.reps, lambda: None))}
        torch, reps, flush = self.torch, self.reps, self.flush
        views = {}
        if pid in self.graphs:
            views["graph_us"] = stats.median(interleaved.device_times_us(torch, self.graphs[pid].replay, reps, flush))
        views["eager_event_us"] = stats.median(interleaved.device_times_us(torch, call, reps, flush))
        views["eager_wall_us"] = stats.median(interleaved.wall_times_us(call, reps, torch.cuda.synchronize, flush))
        return views


# ------------------------------------------------------------------------------------------------ driver
def _trees(args, parser):
    trees = [(label, path) for label, path in (("base", args.base), ("reference", args.reference),
                                                ("candidate", args.candidate), ("upstream-0.25.0", args.upstream))
             if path]
    trees += [tuple(t.partition("=")[::2]) for t in args.tree]
    if not trees:
        parser.error("give at least one tree (--base/--reference/--candidate/--upstream/--tree LABEL=PATH)")
    return trees


def _env_for(dry):
    def env_for(path):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(path)] + [p for p in [env.get("PYTHONPATH")] if p])
        if dry:
            env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        return env

    return env_for


def drive(args, trees):
    samples = DRY_SAMPLES if args.dry_run else args.samples
    reps = DRY_REPS if args.dry_run else args.reps

    def command_for(label, path):
        return [sys.executable, os.path.abspath(__file__), "--worker", "--reps", str(reps)] + \
            (["--dry-run"] if args.dry_run else [])

    workers = interleaved.start_workers(trees, command_for, _env_for(args.dry_run), args.prepare_timeout)
    ids = [point_id(*p) for p in grid(args.dry_run)]
    monitor = interleaved.ClockMonitor(enabled=not args.dry_run)
    started = time.time()
    try:
        taken = interleaved.sample_interleaved(workers, ids, samples, point_major=False,
                                               timeout=args.sample_timeout)
    finally:
        readings = monitor.stop()
        clock_log_head = monitor.first_lines
        for w in workers:
            w.close()
    sampling = {"samples": samples, "reps": reps, "sampling_s": time.time() - started,
                "clock_log_head": clock_log_head}
    return workers, ids, taken, readings, sampling


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", default=[], help="LABEL=PATH of a vLLM tree (repeatable)")
    p.add_argument("--base")
    p.add_argument("--reference")
    p.add_argument("--candidate")
    p.add_argument("--upstream", help="path to the vLLM 0.25.0 tree (upstream swap-AB kernel) for comparison")
    p.add_argument("--out", default="bench-moe-swap-ab.json")
    p.add_argument("--samples", type=int, default=SAMPLES, help="samples per tree and point (GPU)")
    p.add_argument("--reps", type=int, default=REPS, help="repetitions per sample and view; a sample is their median")
    p.add_argument("--prepare-timeout", type=float, default=420.0)
    p.add_argument("--sample-timeout", type=float, default=60.0)
    p.add_argument("--dry-run", action="store_true", help="CPU smoke test: interpreter, tiny shapes")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker = MoeWorker(args.dry_run, args.reps)
        return interleaved.serve(worker.prepare, worker.sample)

    trees = _trees(args, p)
    labels = [label for label, _ in trees]
    workers, ids, taken, readings, sampling = drive(args, trees)
    summaries = {label: {pid: interleaved.summarize_point(records, readings)
                         for pid, records in taken[label].items()} for label in labels}
    ratios = interleaved.speedups(summaries, labels[0], ids)
    key_text = {point_id(*k): point_text(*k) for k in grid(args.dry_run)}
    views = sorted({v for pts in summaries.values() for s in pts.values() for v in s["views"]},
                   key=lambda v: (v != "graph_us", v))
    text = interleaved.report(ids, key_text, f"{'mode':8} {'E':>4} {'N':>5} {'K':>5} {'M':>3}", labels,
                              summaries, ratios, views)
    errors = [f"[{w.label}] {w.error}" for w in workers if w.error]
    errors += [f"[{w.label}] {pt['id']}: {pt['error']}" for w in workers for pt in w.points if "error" in pt]
    large = [f"[{w.label}] {pt['id']}: max_rel_err {pt['max_rel_err']:.3g}" for w in workers for pt in w.points
             if pt.get("max_rel_err") is not None and pt["max_rel_err"] > 0.02]
    text += "\n\n== errors and large errors vs float32 (> 0.02)\n" + ("\n".join(errors + large) or "(none)")
    print(text)
    meta = dict(trees=dict(trees), dry_run=args.dry_run, block_shape=BLOCK, forced_config=FORCED,
                topk=DRY_TOPK if args.dry_run else TOPK, python=sys.version.split()[0],
                workers={w.label: w.meta for w in workers}, clock_readings=len(readings), **sampling,
                timing=("per sample: median of reps, each after an L2 flush; views graph_us (graph replay, CUDA "
                        "events), eager_event_us (do_bench-style events around an eager launch), eager_wall_us"),
                bimodal_rule="bench/stats.py split_modes", ci="95% percentile bootstrap, 2000 resamples, seeded")
    with open(args.out, "w") as f:
        json.dump(dict(meta=meta, points={w.label: w.points for w in workers}, summaries=summaries, ratios=ratios,
                       clocks=readings, report=text), f, indent=1)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
