"""Subprocess (GPU): time the candidate's forward_qkv against the regressed torch.compile fp32 path.

Usage: python speed_runner.py <sim_path> <cases_json>. TorchDynamo is on here (unlike the main test
process) so the regressed path is really compiled. The all-reduce is an identity (a copy), for both.
The regressed path is the test's own rewrite of what the base does: upcast q/k to fp32, mean of squares,
cat of the two statistics, all-reduce, /tp_world, chunk, normalize, downcast, under torch.compile.
Modes: "host" = wall time of one call plus synchronize (host-inclusive); "graph" = device time of one
replay of a CUDA graph holding the call. Medians after warm-up. Prints one JSON object.
"""

import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path


def regressed_factory(torch):
    @torch.compile(dynamic=True)
    def regressed(qkv, q_weight, k_weight, q_size: int, kv_size: int, tp_world: int, eps: float):
        q, k, _ = qkv.split([q_size, kv_size, kv_size], dim=-1)
        dt = q.dtype
        qf = q.to(torch.float32)
        kf = k.to(torch.float32)
        q_ms = qf.pow(2).mean(dim=-1, keepdim=True)
        k_ms = kf.pow(2).mean(dim=-1, keepdim=True)
        if tp_world > 1:
            both = torch.cat([q_ms, k_ms], dim=-1)
            both = both.flatten().clone().view_as(both) / tp_world  # identity all-reduce
            q_ms, k_ms = both.chunk(2, dim=-1)
        qo = qf * torch.rsqrt(q_ms + eps) * q_weight
        ko = kf * torch.rsqrt(k_ms + eps) * k_weight
        return qo.to(dt), ko.to(dt)

    def call(qkv, q_weight, k_weight, q_size, kv_size, tp_world, eps):
        q, k = regressed(qkv, q_weight, k_weight, q_size, kv_size, tp_world, eps)
        return q, k, qkv.split([q_size, kv_size, kv_size], dim=-1)[2]

    return call


def time_host(torch, fn, iters=200, warmup=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def time_graph(torch, fn, iters=100, warmup=10, inner=20):
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


def main():
    tree = os.environ.get("GRADER_VLLM_TREE")
    if tree:
        sys.path.insert(0, tree)
    # This process does not load rubrics/conftest.py: install its stand-ins here (without them vLLM does not
    # import on a GPU machine, or picks its CUDA platform in a CPU-evidence run).
    sys.path.append(str(Path(__file__).resolve().parents[2]))
    import vllm_stand_ins
    from rubric_support import load_beside

    vllm_stand_ins.prepare_process()
    sim_path, cases_json = sys.argv[1], sys.argv[2]
    out = {"env_error": None, "import_error": None, "cases": {}}
    try:
        import types

        import torch

        assert torch.cuda.is_available(), "no CUDA device"
        sim = load_beside(sim_path, "qknorm_sim")
        from vllm.config import CompilationConfig, set_current_vllm_config
    except Exception:
        out["env_error"] = traceback.format_exc()[-3000:]
        print(json.dumps(out))
        return
    cfg = types.SimpleNamespace(compilation_config=CompilationConfig(custom_ops=["all"]))
    with set_current_vllm_config(cfg):
        try:
            from vllm.model_executor.layers.minimax_rms_norm import rms_norm_tp as mod
        except Exception:
            out["import_error"] = traceback.format_exc()[-3000:]
            print(json.dumps(out))
            return
        regressed = regressed_factory(torch)
        for case in json.loads(cases_json):
            name, q, kv, tp, tokens, mode = (
                case["name"], case["q"], case["kv"], case["tp"], case["tokens"], case["mode"]
            )
            try:
                torch.manual_seed(0)
                group = sim.FakeTPGroup(tp)
                with sim.installed_group(group):
                    q_norm = mod.MiniMaxText01RMSNormTP(q * tp, eps=1e-6)
                    k_norm = mod.MiniMaxText01RMSNormTP(kv * tp, eps=1e-6)
                    with torch.no_grad():
                        q_norm.weight.data = torch.rand(q, device="cuda", dtype=torch.bfloat16) + 0.5
                        k_norm.weight.data = torch.rand(kv, device="cuda", dtype=torch.bfloat16) + 0.5
                    qkv = torch.randn(tokens, q + 2 * kv, device="cuda", dtype=torch.bfloat16)

                    def cand():
                        return mod.MiniMaxText01RMSNormTP.forward_qkv(q_norm, k_norm, qkv, q, kv)

                    def base():
                        return regressed(qkv, q_norm.weight, k_norm.weight, q, kv, tp, 1e-6)

                    timer = time_host if mode == "host" else time_graph
                    with torch.no_grad():
                        out["cases"][name] = {
                            "mode": mode,
                            "regressed_us": timer(torch, base),
                            "candidate_us": timer(torch, cand),
                        }
            except Exception:
                out["cases"][name] = {"mode": mode, "error": traceback.format_exc()[-2000:]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
