#!/usr/bin/env python3
"""Benchmark for moe-swap-ab: fused-MoE Triton kernel, FP8 block quant [128, 128], base vs reference vs candidate.

Each vLLM tree is imported in its own subprocess (PYTHONPATH=<tree>), so the kernels of different trees never share
a module or a Triton cache entry. Per tree, shape, M and config mode the worker times invoke_fused_moe_triton_kernel
(the one Triton launch, no routing or quantisation) with triton.testing.do_bench: warm-up, L2 flushed before every
trial (do_bench zeroes a 256 MB buffer), median of the trials; every point is timed in ROUNDS passes over all
points and reports the median of those. It also checks each output against a float32
reference of the same quantised operands.

Config modes:
  forced   BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, 4 warps, 3 stages for every tree: isolates the kernel change
  default  the tree's own get_default_config(...) (what a config-only change alters)
  tuned    the tree's try_get_optimal_moe_config(...) (tuned JSON files where the tree has one for this GPU)

Usage (GPU):
  python bench/moe_swap_ab.py --tree base=/path/base --tree reference=/path/ref --tree candidate=/path/cand \
      [--tree upstream-0.25.0=/path/vllm-0.25.0] --out bench-moe-swap-ab.json
  (--base/--reference/--candidate/--upstream PATH are shorthands for those --tree labels.)
Smoke test on CPU (Triton interpreter, float32 operands flagged as FP8, tiny shapes, capability faked to 9.0):
  python bench/moe_swap_ab.py --dry-run --base /path/base --reference /path/ref --out /tmp/dry.json
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
import types

M_LIST = [1, 2, 4, 8, 16, 32, 64]
SHAPES = [(256, 512, 7168), (256, 7168, 256), (128, 1536, 2048)]  # (E, N, K): w2 of a 256-expert model, ...
TOPK = 8
BLOCK = [128, 128]
FORCED = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
          "num_stages": 3}
DRY_SHAPES = [(4, 256, 256)]
DRY_M = [1, 4]
DRY_TOPK = 2
ROUNDS = 3  # interleaved timing passes over all points; each point reports the median of its samples


# ------------------------------------------------------------------------------------------------ worker
def _prepare_vllm(dry: bool):
    import importlib

    try:
        importlib.import_module("vllm._C_stable_libtorch")
    except Exception:
        sys.modules.setdefault("vllm._C_stable_libtorch", types.ModuleType("vllm._C_stable_libtorch"))
    import torch

    class _Shim:
        def __init__(self, real):
            self._real = real

        def __getattr__(self, name):
            try:
                return getattr(self._real, name)
            except (AttributeError, RuntimeError):
                if "supports" in name:
                    return lambda *a, **k: False
                raise

    torch.ops._C = _Shim(torch.ops._C)
    fm = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe")
    if dry:  # make the tree believe it runs on an SM90 CUDA device
        from vllm.platforms import current_platform
        from vllm.platforms.interface import DeviceCapability, PlatformEnum

        type(current_platform).get_device_capability = classmethod(lambda c, device_id=0: DeviceCapability(9, 0))
        current_platform._enum = PlatformEnum.CUDA
    return fm


def _align(topk_ids, n_experts, block_m, device):
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
    t = lambda x: torch.tensor(x, dtype=torch.int32, device=device)
    return t(sorted_ids), t(expert_ids), t([len(sorted_ids)])


def _weights(E, N, K, device, dry):
    """Expert weights and block scales of one shape, made once on the device (they are up to 1.8 GB in fp32)."""
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


def _prepare_point(fm, tl, inp, mode, E, N, K, M, topk, device, dry):
    """Launch once (compiling), check against the float32 result; return (row fields, launcher)."""
    import torch

    cfg = _config(fm, mode, E, N, K, M, topk)
    st, ex, ntp = _align(inp["topk_ids"], E, cfg["BLOCK_SIZE_M"], device)
    C = torch.empty(M, topk, N, dtype=torch.float32 if dry else torch.bfloat16, device=device)

    def call():
        fm.invoke_fused_moe_triton_kernel(
            A=inp["A"], B=inp["B"], C=C, A_scale=inp["A_scale"], B_scale=inp["B_scale"],
            topk_weights=inp["topk_weights"], sorted_token_ids=st, expert_ids=ex, num_tokens_post_padded=ntp,
            mul_routed_weight=True, top_k=topk, config=dict(cfg), compute_type=tl.float32 if dry else tl.bfloat16,
            use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False,
            per_channel_quant=False, block_shape=BLOCK)

    call()
    ref = _reference(inp, device)
    err = ((C.float().cpu() - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item()
    return dict(max_rel_err=err, config={k: cfg[k] for k in sorted(cfg)}), call


def _time_us(call, dry):
    if dry:
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            call()
            ts.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(ts)
    import torch
    from triton.testing import do_bench

    torch.cuda.synchronize()
    return do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3


def worker(args):
    """Compile and check every point first, then time all points in ROUNDS interleaved passes (a slow first
    pass, clock ramp-up or a noisy neighbour then moves one sample of each point, not one point) and report
    the median of each point's samples."""
    import torch

    dry = args.dry_run
    fm = _prepare_vllm(dry)
    import triton.language as tl

    device = "cpu" if dry else "cuda"
    shapes, m_list, topk = (DRY_SHAPES, DRY_M, DRY_TOPK) if dry else (SHAPES, M_LIST, TOPK)
    modes = ["forced", "default"] if dry else ["forced", "default", "tuned"]
    rows, calls = [], []
    for E, N, K in shapes:
        weights = _weights(E, N, K, device, dry)
        for M in m_list:
            inp = {**weights, **_activations(E, K, M, topk, device, dry)}
            for mode in modes:
                row = dict(tree=args.label, E=E, N=N, K=K, M=M, mode=mode)
                try:
                    fields, call = _prepare_point(fm, tl, inp, mode, E, N, K, M, topk, device, dry)
                    row.update(fields, samples_us=[])
                    calls.append((row, call))
                except Exception as e:  # a broken tree gets a row saying so, the others still run
                    row.update(us=None, error=f"{type(e).__name__}: {e}"[:300])
                rows.append(row)
    for _ in range(1 if dry else ROUNDS):
        for row, call in calls:
            try:
                row["samples_us"].append(_time_us(call, dry))
            except Exception as e:
                row.update(error=f"{type(e).__name__}: {e}"[:300])
    for row, _ in calls:
        row["us"] = statistics.median(row["samples_us"]) if row["samples_us"] and "error" not in row else None
        print(json.dumps(row), file=sys.stderr, flush=True)
    with open(args.json_out, "w") as f:
        json.dump(rows, f)


# ------------------------------------------------------------------------------------------------ driver
def _table(rows, labels):
    base_label = labels[0]
    idx = {(r["tree"], r["E"], r["N"], r["K"], r["M"], r["mode"]): r for r in rows}
    keys = sorted({(r["mode"], r["E"], r["N"], r["K"], r["M"]) for r in rows},
                  key=lambda k: (["forced", "default", "tuned"].index(k[0]), k[1:]))
    head = f"{'mode':8} {'E':>4} {'N':>5} {'K':>5} {'M':>3} | " + " | ".join(f"{l[:22]:>22}" for l in labels)
    lines = [head, "-" * len(head)]
    for mode, E, N, K, M in keys:
        b = idx.get((base_label, E, N, K, M, mode), {}).get("us")
        cells = []
        for l in labels:
            r = idx.get((l, E, N, K, M, mode), {})
            us = r.get("us")
            if us is None:
                cells.append(f"{'error':>22}")
            elif l == base_label or not b:
                cells.append(f"{us:11.2f}us{'':9}")
            else:
                cells.append(f"{us:11.2f}us x{b / us:5.2f}  ")
        lines.append(f"{mode:8} {E:4d} {N:5d} {K:5d} {M:3d} | " + " | ".join(cells))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", default=[], help="LABEL=PATH of a vLLM tree (repeatable)")
    p.add_argument("--base")
    p.add_argument("--reference")
    p.add_argument("--candidate")
    p.add_argument("--upstream", help="path to the vLLM 0.25.0 tree (upstream swap-AB kernel) for comparison")
    p.add_argument("--out", default="bench-moe-swap-ab.json")
    p.add_argument("--dry-run", action="store_true", help="CPU smoke test: interpreter, tiny shapes")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--label", help=argparse.SUPPRESS)
    p.add_argument("--json-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)

    trees = []
    for label, path in (("base", args.base), ("reference", args.reference), ("candidate", args.candidate),
                        ("upstream-0.25.0", args.upstream)):
        if path:
            trees.append((label, path))
    for t in args.tree:
        label, _, path = t.partition("=")
        trees.append((label, path))
    if not trees:
        p.error("give at least one tree (--base/--reference/--candidate/--upstream/--tree LABEL=PATH)")
    rows, labels = [], []
    for label, path in trees:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.abspath(path) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        if args.dry_run:
            env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
            out = tf.name
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--label", label, "--json-out", out]
        if args.dry_run:
            cmd.append("--dry-run")
        print(f"[{label}] {path}", file=sys.stderr, flush=True)
        res = subprocess.run(cmd, env=env, cwd=tempfile.gettempdir())
        if res.returncode != 0 or not os.path.getsize(out):
            print(f"[{label}] worker failed (rc {res.returncode})", file=sys.stderr)
            rows.append(dict(tree=label, error=f"worker rc {res.returncode}"))
        else:
            rows += json.load(open(out))
        os.unlink(out)
        labels.append(label)
    good = [r for r in rows if "E" in r]
    table = _table(good, labels)
    print(table)
    meta = dict(trees=dict(trees), dry_run=args.dry_run, m_list=DRY_M if args.dry_run else M_LIST,
                shapes=DRY_SHAPES if args.dry_run else SHAPES, topk=DRY_TOPK if args.dry_run else TOPK,
                block_shape=BLOCK, forced_config=FORCED, timing=f"do_bench median (L2 flushed); median of {ROUNDS} interleaved passes",
                python=sys.version.split()[0])
    try:
        import torch, triton

        meta.update(torch=torch.__version__, triton=triton.__version__,
                    device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
    except Exception:
        pass
    with open(args.out, "w") as f:
        json.dump(dict(meta=meta, rows=rows, table=table), f, indent=1)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
