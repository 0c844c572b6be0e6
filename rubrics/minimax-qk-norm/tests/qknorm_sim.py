"""Single-process tensor-parallel simulation for the MiniMax QK RMSNorm tests.

Owned by the hidden tests. It stands in for vLLM's tensor-parallel group object (``parallel_state._TP``)
so every accessor a candidate may use (``get_tp_group()``, ``get_tensor_model_parallel_world_size/rank()``,
``tensor_model_parallel_all_reduce``) sees a world of ``tp_world`` ranks, and it replaces the all-reduce by
a sum over the simulated ranks.

TP is simulated in two phases, one rank after another: phase 1 runs every rank and records the tensors
each rank hands to the all-reduce (the call returns a placeholder); phase 2 runs every rank again and the
k-th all-reduce call of every rank returns the elementwise sum of all ranks' k-th phase-1 inputs. The
phase-2 outputs are the simulated TP results. This needs no threads (the Triton interpreter is not
thread-safe) and works for any design that calls the all-reduce in a deterministic order.

This module is loaded by explicit path (tests run with --import-mode=importlib) and is also used by the
fallback subprocess script.
"""

from __future__ import annotations

import contextlib
import traceback
import types

import torch


class FakeTPGroup:
    """Duck-typed stand-in for vLLM's GroupCoordinator of the TP group."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.rank_in_group = 0
        self.rank = 0
        self.local_rank = 0
        self.ranks = list(range(world_size))
        self.unique_name = "tp:fake"
        self.cpu_group = None
        self.device_group = None
        self.mode = "identity"  # identity | record | replay | count
        self.records: dict[int, list[torch.Tensor]] = {}
        self.sums: list[torch.Tensor] = []
        self.calls: dict[int, int] = {}
        self.total_calls = 0

    @property
    def is_first_rank(self) -> bool:
        return self.rank_in_group == 0

    @property
    def is_last_rank(self) -> bool:
        return self.rank_in_group == self.world_size - 1

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        self.total_calls += 1
        r = self.rank_in_group
        idx = self.calls.get(r, 0)
        self.calls[r] = idx + 1
        if self.mode == "record":
            self.records.setdefault(r, []).append(x.detach().clone())
            return x.clone()
        if self.mode == "replay":
            if idx >= len(self.sums):
                raise AssertionError(
                    f"rank {r} made more all-reduce calls in phase 2 than in phase 1"
                )
            s = self.sums[idx]
            if s.shape != x.shape:
                raise AssertionError(
                    f"all-reduce call {idx} of rank {r}: shape {tuple(x.shape)} in phase 2, "
                    f"{tuple(s.shape)} in phase 1"
                )
            return s.clone().to(x.dtype)
        return x.clone()

    # Some designs may call these; keep them harmless.
    def barrier(self):
        return None


@contextlib.contextmanager
def installed_group(group: FakeTPGroup):
    """Install ``group`` as vLLM's TP group for the duration of the block."""
    from vllm.distributed import parallel_state as ps

    old = ps._TP
    ps._TP = group
    try:
        yield group
    finally:
        ps._TP = old


def rms_norm_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Full-width fp32 eager RMSNorm with per-channel weights (the test's reference)."""
    xf = x.double()
    ms = xf.pow(2).mean(dim=-1, keepdim=True)
    return (xf * torch.rsqrt(ms + eps) * w.double()).float()


def make_inputs(tokens, q_full, kv_full, dtype, device, seed=0, skew=True):
    """Full-width q, k, v activations and per-channel weights.

    With ``skew`` the channel magnitudes grow along the hidden dimension, so the TP shards have very
    different mean squares and a wrong aggregation (local-only, missing or doubled /tp_world) shows.
    """
    g = torch.Generator(device="cpu").manual_seed(seed)
    def rnd(*s):
        return torch.randn(*s, generator=g, dtype=torch.float32)
    q = rnd(tokens, q_full)
    k = rnd(tokens, kv_full)
    v = rnd(tokens, kv_full)
    if skew:
        q = q * torch.linspace(0.2, 3.0, q_full)
        k = k * torch.linspace(3.0, 0.3, kv_full)
    qw = 1.0 + 0.5 * rnd(q_full)
    kw = 1.0 + 0.5 * rnd(kv_full)
    cvt = lambda t: t.to(dtype).to(device)  # noqa: E731
    return cvt(q), cvt(k), cvt(v), cvt(qw), cvt(kw)


class SimResult:
    """q/k/v gathered from the simulated ranks, plus the all-reduce call counts."""

    def __init__(self, q, k, v, v_ok, calls_per_rank, total_calls):
        self.q, self.k, self.v, self.v_ok = q, k, v, v_ok
        self.calls_per_rank = calls_per_rank
        self.total_calls = total_calls


def _build_norms(mod, group, rank, q_shard, kv_shard, qw_shard, kw_shard, eps):
    group.rank_in_group = rank
    group.rank = rank
    q_norm = mod.MiniMaxText01RMSNormTP(q_shard * group.world_size, eps=eps)
    k_norm = mod.MiniMaxText01RMSNormTP(kv_shard * group.world_size, eps=eps)
    with torch.no_grad():
        q_norm.weight.data = qw_shard.clone()
        k_norm.weight.data = kw_shard.clone()
    return q_norm, k_norm


def simulate_forward_qkv(
    tokens: int,
    q_full: int,
    kv_full: int,
    tp_world: int,
    dtype: torch.dtype,
    device: str = "cpu",
    eps: float = 1e-6,
    seed: int = 0,
    inputs=None,
) -> tuple[SimResult, tuple]:
    """Run ``MiniMaxText01RMSNormTP.forward_qkv`` on ``tp_world`` simulated ranks (two phases).

    Returns the gathered q/k/v and the full-width inputs (q, k, v, q_weight, k_weight).
    """
    from vllm.model_executor.layers.minimax_rms_norm import rms_norm_tp as mod

    assert q_full % tp_world == 0 and kv_full % tp_world == 0
    q, k, v, qw, kw = inputs if inputs is not None else make_inputs(
        tokens, q_full, kv_full, dtype, device, seed
    )
    qs, ks = q_full // tp_world, kv_full // tp_world
    group = FakeTPGroup(tp_world)
    shards = []
    for r in range(tp_world):
        sl_q = slice(r * qs, (r + 1) * qs)
        sl_k = slice(r * ks, (r + 1) * ks)
        qkv = torch.cat([q[:, sl_q], k[:, sl_k], v[:, sl_k]], dim=-1).contiguous()
        shards.append((qkv, qw[sl_q], kw[sl_k], sl_q, sl_k))

    outs = {}
    with installed_group(group):
        norms = [
            _build_norms(mod, group, r, qs, ks, shards[r][1], shards[r][2], eps)
            for r in range(tp_world)
        ]
        phases = ["record", "replay"] if tp_world > 1 else ["count"]
        for phase in phases:
            group.mode = phase
            group.calls = {}
            if phase == "replay":
                n = {len(group.records.get(r, [])) for r in range(tp_world)}
                if len(n) != 1:
                    raise AssertionError(f"ranks made different numbers of all-reduce calls: {n}")
                count = n.pop()
                group.sums = [
                    torch.stack([group.records[r][i].float() for r in range(tp_world)]).sum(0)
                    for i in range(count)
                ]
            for r in range(tp_world):
                group.rank_in_group = r
                group.rank = r
                q_norm, k_norm = norms[r]
                out = mod.MiniMaxText01RMSNormTP.forward_qkv(
                    q_norm, k_norm, shards[r][0], qs, ks
                )
                outs[r] = out
        calls = dict(group.calls)
        total = group.total_calls

    q_out = torch.empty(tokens, q_full, dtype=dtype, device=device)
    k_out = torch.empty(tokens, kv_full, dtype=dtype, device=device)
    v_out = torch.empty(tokens, kv_full, dtype=dtype, device=device)
    v_ok = True
    for r in range(tp_world):
        qo, ko, vo = outs[r]
        sl_q, sl_k = shards[r][3], shards[r][4]
        q_out[:, sl_q] = qo
        k_out[:, sl_k] = ko
        v_out[:, sl_k] = vo
        v_ok = v_ok and vo.dtype == dtype and vo.shape == (tokens, ks)
    return SimResult(q_out, k_out, v_out, v_ok, calls, total), (q, k, v, qw, kw)


def check_against_reference(res: SimResult, inputs, eps, atol, rtol):
    """Compare a simulated result with full-width fp32 RMSNorm; returns a list of problems."""
    q, k, v, qw, kw = inputs
    problems = []
    ref_q = rms_norm_ref(q.float().cpu(), qw.float().cpu(), eps)
    ref_k = rms_norm_ref(k.float().cpu(), kw.float().cpu(), eps)
    for name, got, ref in (("q", res.q, ref_q), ("k", res.k, ref_k)):
        g = got.float().cpu()
        if not torch.isfinite(g).all():
            problems.append(f"{name}: non-finite output")
            continue
        if not torch.allclose(g, ref, atol=atol, rtol=rtol):
            err = (g - ref).abs().max().item()
            ratio = (g.norm() / ref.norm()).item()
            problems.append(f"{name}: max abs err {err:.4g} (output/ref norm ratio {ratio:.4f})")
    if not res.v_ok or not torch.equal(res.v.cpu(), v.cpu()):
        problems.append("v: not the unchanged v slice of qkv")
    return problems


_ACTIVE_SPIES: list = []


def install_custom_op_window():
    """Make vLLM custom ops registered from now on visible to an active OpSpy.

    A TorchDispatchMode sees a registered custom op as one opaque call. Wrapping the implementation that
    ``direct_register_custom_op`` registers lets the spy re-enter its mode inside the op, so it also sees
    the aten ops the op's Python implementation runs. Must run before the module under test is imported.
    Returns an undo callable.
    """
    import functools

    import vllm.utils.torch_utils as tu

    original = tu.direct_register_custom_op
    if getattr(original, "_qknorm_spy_wrapped", False):
        return lambda: None

    def register(op_name, op_func, *args, **kwargs):
        @functools.wraps(op_func)
        def impl(*a, **kw):
            if _ACTIVE_SPIES:
                with _ACTIVE_SPIES[-1].reentered():
                    return op_func(*a, **kw)
            return op_func(*a, **kw)

        return original(op_name, impl, *args, **kwargs)

    register._qknorm_spy_wrapped = True
    tu.direct_register_custom_op = register

    def undo():
        tu.direct_register_custom_op = original

    return undo


class OpSpy:
    """Records every aten op dispatched inside the block (TorchDispatchMode), with its outputs."""

    def __init__(self):
        self.events: list[tuple[str, list[tuple[torch.dtype, tuple]]]] = []

    @contextlib.contextmanager
    def reentered(self):
        mode = self._make_mode()
        with mode:
            yield

    def __enter__(self):
        self._mode = self._make_mode()
        self._mode.__enter__()
        _ACTIVE_SPIES.append(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE_SPIES.remove(self)
        return self._mode.__exit__(*exc)

    def _make_mode(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        spy = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                outs = out if isinstance(out, (tuple, list)) else [out]
                spy.events.append(
                    (
                        str(func.overloadpacket.__name__) + "." + func._overloadname,
                        [
                            (o.dtype, tuple(o.shape))
                            for o in outs
                            if isinstance(o, torch.Tensor)
                        ],
                    )
                )
                return out

        return _Mode()

    def wide_copies(self, act_dtype: torch.dtype, min_numel: int):
        """Ops that produced a floating tensor wider than the activations with >= min_numel elements."""
        hits = []
        for name, outs in self.events:
            for dt, shape in outs:
                numel = 1
                for s in shape:
                    numel *= s
                if (
                    dt.is_floating_point
                    and torch.finfo(dt).bits > torch.finfo(act_dtype).bits
                    and numel >= min_numel
                ):
                    hits.append(f"{name} -> {dt} {shape}")
        return hits

    def concat_ops(self):
        """cat/stack/chunk-style ops (materializing joins, and the chunk that undoes them)."""
        bad = ("cat.", "stack.", "hstack.", "vstack.", "concat.", "concatenate.", "chunk.", "split.Tensor",
               "unsafe_chunk.", "unsafe_split.Tensor")
        return [name for name, _ in self.events if name.startswith(bad)]


@contextlib.contextmanager
def rms_norm_tp_module(out: dict):
    """vLLM's ``rms_norm_tp``, imported and used under a vLLM config that enables every custom op (as a model's
    forward runs). Yields None, with the traceback in ``out["import_error"]`` (the candidate's tree does not
    import), when it cannot be imported. The subprocess runners import ``vllm.config`` first, so a failure there
    is an environment error, not the candidate's."""
    from vllm.config import CompilationConfig, set_current_vllm_config

    cfg = types.SimpleNamespace(compilation_config=CompilationConfig(custom_ops=["all"]))
    with set_current_vllm_config(cfg):
        try:
            from vllm.model_executor.layers.minimax_rms_norm import rms_norm_tp
        except Exception:
            out["import_error"] = traceback.format_exc()[-3000:]
            rms_norm_tp = None
        yield rms_norm_tp

