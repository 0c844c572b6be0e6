"""Speed probes (GPU), run in a subject process of their own (TorchDynamo on: compiled code is really compiled),
one over the candidate's tree and one over the base's. Nothing here measures time: the judge times each ``run``
call from its side of the channel (``grader.sandbox.timing``) and checks the digests it returns.

``prepare`` builds one case's layers with the judge's weights under ``speed_runner``'s stateless TP group (its
all-reduce is one opaque registered op, a copy) and keeps the judge's activations ``x`` and ``d`` on the device. A
``run`` call then makes ``calls`` inputs ``x + c_i * d`` from the judge's coefficients ``c`` (fresh every round:
no answer can be prepared before the call), runs ``forward_qkv`` on each, and ends in a device synchronize. In
"graph" mode the calls are one CUDA graph, captured in ``prepare`` over a coefficient buffer and replayed
``replays`` times per call. The answer is a digest per call: the sums of q's and of k's outputs weighted by the
judge's random vectors ``rq`` and ``rk``, which only the outputs themselves give.
"""

from __future__ import annotations

import contextlib

import torch

import qknorm_sim
import speed_runner

_CASES: dict[str, dict] = {}
_SETTINGS = contextlib.ExitStack()
_MODULE: list = []
WARMUP_BATCHES = 3


def _module():
    """The tree's ``rms_norm_tp``, imported once, used under a current vLLM config kept for this process's life;
    raises if it does not import."""
    if not _MODULE:
        speed_runner.register_ops(torch)
        out: dict = {}
        mod = _SETTINGS.enter_context(qknorm_sim.rms_norm_tp_module(out))
        if mod is None:
            raise ImportError(out.get("import_error", "rms_norm_tp does not import"))
        _MODULE.append(mod)
    return _MODULE[0]


def _batch(case: dict, coeffs: torch.Tensor) -> torch.Tensor:
    """Every call of one batch, and its digests: a (calls, 2) fp32 tensor on the device."""
    inputs = (case["x"][None] + coeffs[:, None, None] * case["d"][None]).to(torch.bfloat16)
    q_size, kv_size = case["q_size"], case["kv_size"]
    qs, ks = [], []
    for qkv in inputs:
        q, k, _ = case["forward"](case["q_norm"], case["k_norm"], qkv, q_size, kv_size)
        qs.append(q)
        ks.append(k)
    q_digest = (torch.stack(qs).float() * case["rq"]).sum(dim=(1, 2))
    k_digest = (torch.stack(ks).float() * case["rk"]).sum(dim=(1, 2))
    return torch.stack([q_digest, k_digest], dim=1)


def prepare(name: str, q_size: int, kv_size: int, tp: int, mode: str, x, d, q_weight, k_weight, rq, rk,
            calls: int, replays: int = 1) -> dict:
    """Build case ``name``; compile and warm it (and capture its graph); what it built, as shapes."""
    mod = _module()
    group = speed_runner.SpeedTPGroup(tp)
    with qknorm_sim.installed_group(group):
        return _build(name, mod, group, q_size, kv_size, tp, mode, x, d, q_weight, k_weight, rq, rk, calls, replays)


def _build(name, mod, group, q_size, kv_size, tp, mode, x, d, q_weight, k_weight, rq, rk, calls, replays) -> dict:
    q_norm = mod.MiniMaxText01RMSNormTP(q_size * tp, eps=1e-6)
    k_norm = mod.MiniMaxText01RMSNormTP(kv_size * tp, eps=1e-6)
    with torch.no_grad():
        q_norm.weight.data = q_weight.to("cuda", torch.bfloat16)
        k_norm.weight.data = k_weight.to("cuda", torch.bfloat16)
    case = {"forward": mod.MiniMaxText01RMSNormTP.forward_qkv, "q_norm": q_norm, "k_norm": k_norm,
            "q_size": q_size, "kv_size": kv_size, "x": x.to("cuda", torch.float32), "d": d.to("cuda", torch.float32),
            "rq": rq.to("cuda", torch.float32), "rk": rk.to("cuda", torch.float32), "calls": calls,
            "replays": replays, "mode": mode, "group": group}
    coeffs = torch.ones(calls, device="cuda")
    with torch.no_grad():
        for _ in range(WARMUP_BATCHES):
            _batch(case, coeffs)
        torch.cuda.synchronize()
        if mode == "graph":
            case["coeffs"] = coeffs
            stream = torch.cuda.Stream()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.stream(stream):
                _batch(case, coeffs)
                stream.synchronize()
                with torch.cuda.graph(graph, stream=stream):
                    case["digests"] = _batch(case, coeffs)
            torch.cuda.synchronize()
            case["graph"] = graph
    _CASES[name] = case
    return {"calls": calls, "mode": mode}


def run(name: str, coeffs: list[float]) -> list[list[float]]:
    """One timed batch of case ``name`` on the judge's coefficients, ended by a device synchronize; its digests."""
    case = _CASES[name]
    c = torch.tensor(coeffs, dtype=torch.float32, device="cuda")
    with torch.no_grad(), qknorm_sim.installed_group(case["group"]):
        if case["mode"] == "graph":
            case["coeffs"].copy_(c)
            for _ in range(case["replays"]):
                case["graph"].replay()
            digests = case["digests"]
        else:
            digests = _batch(case, c)
    torch.cuda.synchronize()
    return digests.double().cpu().tolist()
