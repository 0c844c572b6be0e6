"""Probes for minimax-qk-norm, run in the subject: what ``MiniMaxText01RMSNormTP.forward_qkv`` does on the judge's
inputs, under a simulated TP group (``qknorm_sim``).

Every probe takes the judge's tensors (per-rank shards, drawn by the judge), runs the candidate's public layer
entry and returns observations: the tensors each rank returned, how each rank called the all-reduce, the aten ops
a spy saw, or the guard elements after each allocation (the same without Triton: ``qknorm_fallback``). Nothing
here decides whether an observation is right. Speed is measured elsewhere (``qknorm_speed``, timed by the judge).

TorchDynamo is disabled in this process: a ``torch.compile``-decorated function then runs its own eager ops, with
the same semantics, without a CPU compile of about 12 s per specialization, and the spy sees what the compiled
function's dataflow does. The speed probes run in subjects of their own, where compiled code is compiled.
"""

from __future__ import annotations

import torch
import torch._dynamo.config as _dynamo_config

import qknorm_sim
from probe_support import Patches

_dynamo_config.disable = True

_MODULE = []


def layer_module():
    """The candidate's ``rms_norm_tp``, imported once, after the custom-op spy window is installed; an import
    error propagates (the probe raises)."""
    if not _MODULE:
        with qknorm_sim.vllm_config():
            undo = qknorm_sim.install_custom_op_window()
            try:
                from vllm.model_executor.layers.minimax_rms_norm import rms_norm_tp
            finally:
                undo()
        _MODULE.append(rms_norm_tp)
    return _MODULE[0]


def _on(device: str, tensors: list) -> list:
    return [t.to(device) for t in tensors]


def simulate(qkv: list, q_weight: list, k_weight: list, q_size: int, kv_size: int, eps: float, device: str,
             guard_elements: int = 0, guard_value: float = 0.0, report_inputs: bool = False) -> dict:
    """``forward_qkv`` on ``len(qkv)`` simulated ranks (``qknorm_sim.run_ranks``) with rank r's shards ``qkv[r]``,
    ``q_weight[r]``, ``k_weight[r]``. With ``guard_elements``, every plain ``torch.empty`` made during the run gets
    that many elements after it, set to ``guard_value``; ``guards`` lists ``[numel, dtype name, the guard elements
    after the run as fp64]`` per allocation. With ``report_inputs``, ``inputs_after`` holds each rank's qkv and
    weights as the run left them."""
    mod = layer_module()
    qkv, q_weight, k_weight = _on(device, qkv), _on(device, q_weight), _on(device, k_weight)
    guards: list = []
    with qknorm_sim.vllm_config(), Patches() as patches:
        if guard_elements:
            patches.set(torch, "empty", _guarded_empty(torch.empty, guards, guard_elements, guard_value))
        obs = qknorm_sim.run_ranks(mod, qkv, q_weight, k_weight, q_size, kv_size, eps, report_inputs=report_inputs)
    # The guard elements as fp64 values, with the allocation's dtype (the judge casts its guard value the same way).
    obs["guards"] = [[numel, str(buf.dtype).removeprefix("torch."), buf[numel:].to(torch.float64)]
                     for buf, numel in guards]
    return obs


def simulate_single_tensor(x: list, weight: list, eps: float, device: str) -> dict:
    """The layer's single-tensor entries, ``forward(x)`` and ``_forward(x)`` (the norm MiniMax-Text-01's linear
    attention calls), on ``len(x)`` simulated ranks with rank r's activations ``x[r]`` and weight shard
    ``weight[r]``: each rank's outputs are ``[forward(x[r]), _forward(x[r])]`` (``run_ranks`` observations)."""
    mod = layer_module()
    x, weight = _on(device, x), _on(device, weight)

    def both_entries(norm, _unused, xr):
        return norm.forward(xr), norm._forward(xr)

    with qknorm_sim.vllm_config():
        obs = qknorm_sim.run_ranks(mod, x, weight, weight, x[0].shape[-1], 0, eps, call=both_entries)
    if obs["outputs"] is not None:
        obs["outputs"] = [[t.cpu() if isinstance(t, torch.Tensor) else t for t in rank] for rank in obs["outputs"]]
    return obs


def _guarded_empty(real_empty, guards: list, extra: int, value: float):
    """A ``torch.empty`` whose every plain allocation has ``extra`` more elements after it, set to ``value``: a
    write past the end of a tensor the op allocates lands there (under the interpreter such a write is otherwise
    overwritten by the next row's program, or goes unseen past the last row)."""

    def guarded_empty(*size, **kwargs):
        if set(kwargs) - {"dtype", "device"}:
            return real_empty(*size, **kwargs)
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
        numel = 1
        for n in shape:
            numel *= int(n)
        buf = real_empty(numel + extra, **kwargs)
        buf[numel:] = value
        guards.append((buf, numel))
        return buf[:numel].view(shape)

    return guarded_empty


def op_events(tp_world: int, qkv, q_weight, k_weight, q_size: int, kv_size: int, eps: float, device: str) -> list:
    """The aten ops (with their outputs' dtypes and shapes) one ``forward_qkv`` call dispatches, on rank 0 of a
    ``tp_world`` group whose all-reduce is an identity, after one warm-up call outside the spy (kernel
    compilation, caches). Distinct records, each with its count (``qknorm_sim.OpSpy.summary``)."""
    mod = layer_module()
    qkv, q_weight, k_weight = qkv.to(device), q_weight.to(device), k_weight.to(device)
    group = qknorm_sim.FakeTPGroup(tp_world)
    with qknorm_sim.vllm_config(), qknorm_sim.installed_group(group):
        q_norm = mod.MiniMaxText01RMSNormTP(q_size * tp_world, eps=eps)
        k_norm = mod.MiniMaxText01RMSNormTP(kv_size * tp_world, eps=eps)
        with torch.no_grad():
            q_norm.weight.data = q_weight.clone()
            k_norm.weight.data = k_weight.clone()
        mod.MiniMaxText01RMSNormTP.forward_qkv(q_norm, k_norm, qkv, q_size, kv_size)
        with qknorm_sim.OpSpy() as spy:
            mod.MiniMaxText01RMSNormTP.forward_qkv(q_norm, k_norm, qkv, q_size, kv_size)
    return spy.summary()
