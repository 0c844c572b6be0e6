"""The no-Triton probe for minimax-qk-norm: ``forward_qkv`` on the judge's per-rank inputs in a subject on the
rubric's ``without-triton`` platform (Triton unimportable there since before anything was imported, TorchDynamo
disabled), so vLLM's ``HAS_TRITON`` is false and ``vllm.triton_utils`` hands out placeholders, as on a platform
without Triton. The fused all-reduce op is absent on these machines as well (no compiled vLLM extension).

It imports nothing at module level beyond the standard library: whatever fails to import is reported, not raised.
It decides nothing.
"""

from __future__ import annotations

import traceback


def run(cases: list[dict], device: str) -> dict:
    """``{"env_error": str|None, "import_error": str|None, "has_triton": bool|None, "cases": {name: run_ranks
    observations | {"raised": traceback}}}`` for the judge's cases, each ``{"name", "qkv": [per rank],
    "q_weight": [...], "k_weight": [...], "q_size", "kv_size", "eps"}``."""
    out = {"env_error": None, "import_error": None, "has_triton": None, "cases": {}}
    try:
        import qknorm_sim
        import vllm.config  # noqa: F401
        import vllm.distributed.parallel_state  # noqa: F401
        import vllm.triton_utils as tu

        out["has_triton"] = bool(tu.HAS_TRITON)
    except Exception:
        out["env_error"] = traceback.format_exc()[-3000:]
        return out
    with qknorm_sim.rms_norm_tp_module(out) as mod:
        if mod is None:
            return out
        for case in cases:
            out["cases"][case["name"]] = _run_case(qknorm_sim, mod, case, device)
    return out


def _run_case(qknorm_sim, mod, case: dict, device: str) -> dict:
    import torch

    try:
        def on(tensors):
            return [t.to(device) for t in tensors]

        obs = qknorm_sim.run_ranks(mod, on(case["qkv"]), on(case["q_weight"]), on(case["k_weight"]),
                                   case["q_size"], case["kv_size"], case["eps"])
        if obs["outputs"] is not None:  # back on the CPU, as the judge compares them
            obs["outputs"] = [[t.cpu() if isinstance(t, torch.Tensor) else t for t in rank]
                              for rank in obs["outputs"]]
        return obs
    except Exception:
        return {"raised": traceback.format_exc()[-2000:]}
