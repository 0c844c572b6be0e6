"""The fused-op probe for minimax-qk-norm: ``forward_qkv`` in a subject on the rubric's ``fused-allreduce`` platform,
where the fused all-reduce + RMSNorm op (``torch.ops._C.minimax_allreduce_rms_qk``) and its Lamport workspace exist.

Neither machine has them (the sdist's tree has no compiled ``_C``; the workspace exchanges CUDA IPC handles), so the
base's fused branch never ran in any other check. Here, before the candidate's module is imported, this probe
registers stand-ins for both:
- ``minimax_allreduce_rms_qk``: the real op's schema and argument checks (2-D contiguous qkv of width q + 2 kv, rank
  below nranks, nranks 2/4/8/16, fp16/bf16/fp32, weights of q_size/kv_size channels, a workspace the stand-in made
  for this rank and world, no more tokens than it was made for); its result is the full-width RMSNorm, with the
  statistics exchanged through the TP group's all-reduce, so the simulated group (``qknorm_sim``) answers it;
- ``lamport_workspace.get_allreduce_workspace``: a small tensor naming the rank, world and token capacity it was
  asked for, or, in the cases the judge marks so, the error a machine without P2P gives.
Every call of the op is recorded (its rank and world arguments, the token count). It decides nothing.
"""

from __future__ import annotations

import sys
import traceback
import types

_OP = "minimax_allreduce_rms_qk"
# The module this probe stands in for (it imports CUDA's runtime bindings, absent here); named in two parts so the
# grader's environment check, which imports every vLLM module a probe names, does not try to import it.
_WORKSPACE_MODULE = "vllm.model_executor.layers.minimax_rms_norm" + ".lamport_workspace"

_state = {"calls": [], "workspaces": {}, "workspace_requests": [], "workspace_fails": False}


def _workspace(rank: int, world_size: int, comm_size=None, max_tokens: int = 16384, process_group=None):
    import torch

    _state["workspace_requests"].append([int(rank), int(world_size), int(max_tokens)])
    if _state["workspace_fails"]:
        raise RuntimeError("CUDA runtime error: cudaErrorPeerAccessUnsupported (stand-in: no P2P between GPUs)")
    ws = torch.tensor([rank, world_size, max_tokens], dtype=torch.int64)
    _state["workspaces"][ws.data_ptr()] = (int(rank), int(world_size), int(max_tokens))
    return ws


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise RuntimeError(f"{_OP}: {what}")


def _fused(qkv, norm_weight_q, norm_weight_k, workspace, q_size, kv_size, rank, nranks, eps):
    import torch
    from vllm.distributed.parallel_state import get_tp_group

    _state["calls"].append([int(rank), int(nranks), int(qkv.shape[0]) if qkv.dim() else -1])
    _check(qkv.dim() == 2, "qkv must be 2D")
    _check(qkv.is_contiguous(), "qkv must be contiguous")
    _check(qkv.shape[-1] == q_size + 2 * kv_size, "qkv last dim must equal q_size + 2 * kv_size")
    _check(rank < nranks, "rank must be less than nranks")
    _check(nranks in (2, 4, 8, 16), "unsupported ranks number")
    _check(qkv.dtype in (torch.float16, torch.bfloat16, torch.float32), "unsupported data type")
    _check(norm_weight_q.numel() == q_size and norm_weight_k.numel() == kv_size, "weights of another width")
    made = _state["workspaces"].get(workspace.data_ptr())
    _check(made is not None, "not a workspace from get_allreduce_workspace")
    _check(made[:2] == (rank, nranks), f"workspace made for rank/world {made[:2]}, used for {(rank, nranks)}")
    _check(qkv.shape[0] <= made[2], f"{qkv.shape[0]} tokens overrun a workspace made for {made[2]}")
    q = qkv[:, :q_size].float()
    k = qkv[:, q_size:q_size + kv_size].float()
    ms = torch.stack([q.square().mean(dim=-1), k.square().mean(dim=-1)], dim=-1)
    ms = get_tp_group().all_reduce(ms.flatten()).view(-1, 2).float() / nranks
    q_out = q * torch.rsqrt(ms[:, :1] + eps) * norm_weight_q.float()
    k_out = k * torch.rsqrt(ms[:, 1:] + eps) * norm_weight_k.float()
    return q_out.to(qkv.dtype), k_out.to(qkv.dtype)


def _install() -> None:
    """Register the op under ``torch.ops._C`` and put the workspace module in ``sys.modules`` (once a process)."""
    import torch

    if _WORKSPACE_MODULE in sys.modules and getattr(sys.modules[_WORKSPACE_MODULE], "_qknorm_stand_in", False):
        return
    lib = torch.library.Library("_C", "FRAGMENT")
    lib.define(f"{_OP}(Tensor qkv, Tensor norm_weight_q, Tensor norm_weight_k, Tensor workspace, int q_size, "
               "int kv_size, int rank, int nranks, float eps) -> (Tensor, Tensor)")
    lib.impl(_OP, _fused, "CompositeExplicitAutograd")
    _state["library"] = lib  # the registration lives as long as the library object
    module = types.ModuleType(_WORKSPACE_MODULE)
    module.get_allreduce_workspace = _workspace
    module._qknorm_stand_in = True
    sys.modules[_WORKSPACE_MODULE] = module


def run(cases: list[dict], device: str) -> dict:
    """``{"env_error", "import_error", "cases": {name: run_ranks observations + "fused_calls" (``[rank arg, nranks
    arg, tokens]`` per op call, all phases) + "workspace_requests" | {"raised": traceback}}}`` for the judge's
    cases, each ``{"name", "qkv", "q_weight", "k_weight", "q_size", "kv_size", "eps", "workspace_fails"}``."""
    out = {"env_error": None, "import_error": None, "cases": {}}
    try:
        import torch._dynamo.config as dynamo_config

        import qknorm_sim

        dynamo_config.disable = True
        _install()
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

    _state["calls"], _state["workspace_requests"] = [], []
    _state["workspace_fails"] = bool(case.get("workspace_fails"))
    try:
        def on(tensors):
            return [t.to(device) for t in tensors]

        obs = qknorm_sim.run_ranks(mod, on(case["qkv"]), on(case["q_weight"]), on(case["k_weight"]),
                                   case["q_size"], case["kv_size"], case["eps"])
        if obs["outputs"] is not None:
            obs["outputs"] = [[t.cpu() if isinstance(t, torch.Tensor) else t for t in rank]
                              for rank in obs["outputs"]]
    except Exception:
        obs = {"raised": traceback.format_exc()[-2000:]}
    finally:
        _state["workspace_fails"] = False
    obs["fused_calls"] = list(_state["calls"])
    obs["workspace_requests"] = list(_state["workspace_requests"])
    return obs
