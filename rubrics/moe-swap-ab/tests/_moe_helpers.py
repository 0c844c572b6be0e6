"""Helpers for the moe-swap-ab hidden tests (loaded by conftest.py through an explicit path).

Nothing here imports vLLM at module import time. Launches are observed by replacing every Triton kernel object
in the fused_moe module with a recorder and calling the launcher; a launch is normalised to the kernel's
parameter names so that it can be compared with the base's launch for the same inputs (base_launches.json).
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import sys
from pathlib import Path

FM = "vllm.model_executor.layers.fused_moe.fused_moe"
HERE = Path(__file__).resolve().parent
SNAPSHOT = HERE / "base_launches.json"
CAPS = [(8, 0), (8, 9), (9, 0), (10, 0), (12, 0)]


# --------------------------------------------------------------------------------------------- environment
class _OpsShim:
    """Forward to torch.ops._C; answer missing compiled capability probes ('*supports*') with False."""

    def __init__(self, real):
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name):
        try:
            return getattr(self._real, name)
        except (AttributeError, RuntimeError):
            if "supports" in name:
                return lambda *a, **k: False
            raise


def prepare_environment() -> None:
    """Answer the compiled capability probes that fused_moe's import chain calls when they are not built (the
    compiled extension modules themselves are stood in for by rubrics/conftest.py)."""
    import torch

    if not isinstance(torch.ops._C, _OpsShim):
        torch.ops._C = _OpsShim(torch.ops._C)


def import_fm():
    import importlib

    prepare_environment()
    return importlib.import_module(FM)


# --------------------------------------------------------------------------------------------- capability
def _clear_caches() -> None:
    for name, mod in list(sys.modules.items()):
        if not name.startswith("vllm.model_executor.layers.fused_moe") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, functools._lru_cache_wrapper):
                try:
                    obj.cache_clear()
                except Exception:
                    pass


def fake_capability(monkeypatch, cap) -> None:
    """Make vLLM's platform (and torch.cuda) report compute capability ``cap`` = (major, minor) as a CUDA
    device, or as a ROCm device for (major, minor, "rocm") (MI200, gfx90a, reports 9.0 like Hopper)."""
    import torch
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability, PlatformEnum

    major, minor, *kind = cap
    cls = type(current_platform)
    monkeypatch.setattr(
        cls, "get_device_capability", classmethod(lambda c, device_id=0: DeviceCapability(major, minor))
    )
    platform = PlatformEnum.ROCM if kind == ["rocm"] else PlatformEnum.CUDA
    monkeypatch.setattr(current_platform, "_enum", platform, raising=False)
    if not torch.cuda.is_available():
        # Only where no real device exists: on a GPU, Triton compiles for what torch reports, which must stay true.
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))
    _clear_caches()


# --------------------------------------------------------------------------------------------- inputs
def align(topk_ids, n_experts, block_m, device):
    """Torch stand-in for moe_align_block_size: token slots sorted by expert, padded to block_m."""
    import torch

    flat = topk_ids.flatten().tolist()
    pad_id = len(flat)
    sorted_ids, expert_ids = [], []
    for e in range(n_experts):
        idx = [i for i, x in enumerate(flat) if x == e]
        if not idx:
            continue
        pad = (-len(idx)) % block_m
        sorted_ids += idx + [pad_id] * pad
        expert_ids += [e] * ((len(idx) + pad) // block_m)
    st = torch.tensor(sorted_ids, dtype=torch.int32, device=device)
    ex = torch.tensor(expert_ids, dtype=torch.int32, device=device)
    ntp = torch.tensor([len(sorted_ids)], dtype=torch.int32, device=device)
    return st, ex, ntp


def make_case(quant, M, BM, BN, *, E=4, N=256, K=256, topk=2, bias=False, routed=True, device="cpu", seed=0,
              out_dtype="bf16"):
    """Inputs and launcher keyword arguments for one fused-MoE launch."""
    import torch
    import triton.language as tl

    g = torch.Generator().manual_seed(seed)
    gn = gk = 128
    kwargs = dict(use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False,
                  per_channel_quant=False, block_shape=None)
    a32 = torch.randn(M, K, generator=g)
    b32 = torch.randn(E, N, K, generator=g) / K ** 0.5
    a_scale = b_scale = None
    if quant.startswith("fp8"):
        kwargs["use_fp8_w8a8"] = True
        A = a32.to(torch.float8_e4m3fn)
        B = (b32 * 8).to(torch.float8_e4m3fn)
    elif quant.startswith("int8_w8a8"):
        kwargs["use_int8_w8a8"] = True
        A = (a32 * 20).round().clamp(-127, 127).to(torch.int8)
        B = (b32 * 200).round().clamp(-127, 127).to(torch.int8)
    elif quant == "int8_w8a16":
        kwargs["use_int8_w8a16"] = True
        A = a32.to(torch.bfloat16)
        B = (b32 * 200).round().clamp(-127, 127).to(torch.int8)
        b_scale = torch.rand(E, N, generator=g) * 0.01 + 0.002
    else:
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[quant]
        A, B = a32.to(dt), b32.to(dt)
    if quant.endswith("_block"):
        kwargs["block_shape"] = [gn, gk]
        a_scale = torch.rand(M, -(-K // gk), generator=g) + 0.5
        b_scale = torch.rand(E, -(-N // gn), -(-K // gk), generator=g) * 0.2 + 0.05
    elif quant.endswith("_channel"):
        kwargs["per_channel_quant"] = True
        a_scale = torch.rand(M, 1, generator=g) + 0.5
        b_scale = torch.rand(E, N, 1, generator=g) * 0.2 + 0.05
    elif quant.endswith("_tensor"):
        a_scale = torch.rand(1, generator=g) + 0.5
        b_scale = torch.rand(E, generator=g) * 0.2 + 0.05
    if quant.startswith("int8_w8a8"):
        a_scale = a_scale / 20
        b_scale = b_scale / 25
    gr = torch.Generator().manual_seed(1234)  # routing (hence the launch grid) does not depend on ``seed``
    topk_ids = torch.stack([torch.randperm(E, generator=gr)[:topk] for _ in range(M)])
    topk_w = torch.rand(M, topk, generator=g)
    st, ex, ntp = align(topk_ids, E, BM, device)
    b_bias = torch.randn(E, N, generator=g) * 0.5 if bias else None
    odt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[out_dtype]
    C = torch.zeros(M, topk, N, dtype=odt)
    ctype = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32}[out_dtype]
    mv = lambda t: None if t is None else t.to(device)
    launch = dict(A=mv(A), B=mv(B), C=mv(C), A_scale=mv(a_scale), B_scale=mv(b_scale), topk_weights=mv(topk_w),
                  sorted_token_ids=st, expert_ids=ex, num_tokens_post_padded=ntp, mul_routed_weight=routed,
                  top_k=topk, config={"BLOCK_SIZE_M": BM, "BLOCK_SIZE_N": BN, "BLOCK_SIZE_K": 128,
                                      "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3},
                  compute_type=ctype, B_bias=mv(b_bias), **kwargs)
    return launch, dict(topk_ids=topk_ids, topk_w=topk_w, a32=a32)


def scenario_key(quant, M, BM, BN, **extra) -> str:
    tail = "".join(f",{k}={v}" for k, v in sorted(extra.items()))
    return f"{quant},M={M},BM={BM},BN={BN}{tail}"


# --------------------------------------------------------------------------------------------- recording
def _jit_of(obj):
    """The JITFunction view of a kernel object, also under TRITON_INTERPRET=1, where kernels are
    InterpretedFunctions that wrap the plain Python function (rebuilt here as a JITFunction, which compiles nothing)."""
    from triton.runtime.jit import JITFunction

    seen = 0
    while not hasattr(obj, "params") and hasattr(obj, "fn") and seen < 8:
        obj, seen = obj.fn, seen + 1
    if hasattr(obj, "params"):
        return obj
    return JITFunction(obj) if inspect.isfunction(obj) and seen else None


def kernel_objects(fm) -> dict:
    from triton.runtime.jit import KernelInterface

    return {n: v for n, v in vars(fm).items() if isinstance(v, KernelInterface) and _jit_of(v) is not None}


class _Recorder:
    def __init__(self, name, real, log):
        self.name, self.real, self.log = name, real, log

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append((self.name, self.real, grid, args, kwargs))

        return launch

    def __getattr__(self, item):
        return getattr(self.real, item)


def _norm(v, tags):
    import torch

    if isinstance(v, torch.Tensor):
        for tag, t in tags.items():
            if t is v:
                return tag
        return ["tensor", list(v.shape), str(v.dtype)]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_norm(x, tags) for x in v]
    return str(v)


def _normalise(entry, tags):
    name, real, grid, args, kwargs = entry
    jit = _jit_of(real)
    names = list(jit.arg_names)
    bound = dict(zip(names, args))
    options = {}
    for k, v in kwargs.items():
        (bound if k in names else options)[k] = v
    if callable(grid):
        grid_val = grid({**bound, **options})
    else:
        grid_val = grid
    return {
        "kernel": name,
        "args": {k: _norm(v, tags) for k, v in bound.items()},
        "options": {k: _norm(v, tags) for k, v in options.items()},
        "grid": [int(x) for x in grid_val],
    }


def record_launch(monkeypatch, fm, launch: dict, cap) -> dict:
    """Launch through invoke_fused_moe_triton_kernel with every kernel replaced by a recorder."""
    fake_capability(monkeypatch, cap)
    log = []
    with monkeypatch.context() as mp:
        for n, k in kernel_objects(fm).items():
            mp.setattr(fm, n, _Recorder(n, k, log))
        fm.invoke_fused_moe_triton_kernel(**launch)
    assert len(log) == 1, f"expected exactly one kernel launch, saw {len(log)}"
    tags = {k: launch[k] for k in ("A", "B", "C", "A_scale", "B_scale", "topk_weights", "sorted_token_ids",
                                   "expert_ids", "num_tokens_post_padded", "B_bias") if launch[k] is not None}
    return json.loads(json.dumps(_normalise(log[0], tags)))


def param_defaults(fm, kernel_name) -> dict:
    jit = _jit_of(getattr(fm, kernel_name))
    try:
        sig = inspect.signature(jit.fn)
    except (TypeError, ValueError):
        return {}
    return {n: p.default for n, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}


def constexpr_params(fm, kernel_name) -> set:
    jit = _jit_of(getattr(fm, kernel_name))
    out = set()
    for p in getattr(jit, "params", []):
        if getattr(p, "is_constexpr", False):
            out.add(p.name)
    return out


def diff(fm, cand: dict, base: dict) -> set:
    """Keys in which a candidate's launch differs from the base's launch for the same inputs.

    A parameter the base does not have counts only when it is passed 'on' (not False/0/None and not its
    default): a new switch left off launches the same code.
    """
    out = set()
    if cand["kernel"] != base["kernel"]:
        out.add("kernel")
    for k, v in base["args"].items():
        if k not in cand["args"] or cand["args"][k] != v:
            out.add(k)
    defaults = param_defaults(fm, cand["kernel"]) if "kernel" not in out else {}
    for k, v in cand["args"].items():
        if k in base["args"]:
            continue
        if v in (False, None, 0) or (k in defaults and json.loads(json.dumps(_norm(defaults[k], {}))) == v):
            continue
        out.add(k)
    for k in set(cand["options"]) | set(base["options"]):
        if cand["options"].get(k) != base["options"].get(k):
            out.add("opt:" + k)
    if cand["grid"] != base["grid"]:
        out.add("grid")
    return out


@functools.lru_cache(maxsize=1)
def snapshot() -> dict:
    return json.loads(SNAPSHOT.read_text())


# --------------------------------------------------------------------------------------------- static
def kernel_module_source(tree: Path) -> str:
    return (tree / "vllm/model_executor/layers/fused_moe/fused_moe.py").read_text()


def _is_jit(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        src = ast.unparse(d)
        if "jit" in src or "autotune" in src or "heuristics" in src:
            return True
    return False


def jit_functions(source: str) -> dict:
    mod = ast.parse(source)
    return {n.name: n for n in mod.body if isinstance(n, ast.FunctionDef) and _is_jit(n)}


def _is_dot(call) -> bool:
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "dot"


def _is_transpose(node) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("trans", "permute"):
        return True
    return isinstance(node, ast.Attribute) and node.attr == "T"


class Flow:
    """Flow-insensitive taint of a Triton kernel: which values derive from the A (1st) / B (2nd) pointer,
    and which from the result of a swapped dot (B-side operand first, A-side second)."""

    def __init__(self, fn: ast.FunctionDef):
        self.fn = fn
        params = [a.arg for a in fn.args.args]
        self.taint = {n: set() for n in params}
        if len(params) >= 2:
            self.taint[params[0]] = {"A"}
            self.taint[params[1]] = {"B"}
        self.params = params
        for _ in range(12):
            changed = False
            for node in ast.walk(fn):
                targets, value = [], None
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                    targets, value = [node.target], node.value
                if value is None:
                    continue
                t = self.expr(value)
                if isinstance(node, ast.AugAssign):
                    t = t | self.expr(node.target)
                for tgt in targets:
                    for nm in ast.walk(tgt):
                        if isinstance(nm, ast.Name):
                            old = self.taint.get(nm.id, set())
                            if not t <= old:
                                self.taint[nm.id] = old | t
                                changed = True
            if not changed:
                break

    def expr(self, node) -> set:
        out = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                out |= self.taint.get(sub.id, set())
            if _is_dot(sub) and self.swapped(sub):
                out.add("S")
        return out

    def side(self, node) -> set:
        return self.expr(node) & {"A", "B"}

    def swapped(self, call) -> bool:
        if len(call.args) < 2:
            return False
        return self.side(call.args[0]) == {"B"} and self.side(call.args[1]) == {"A"}

    def plain(self, call) -> bool:
        if len(call.args) < 2:
            return False
        return self.side(call.args[0]) == {"A"} and self.side(call.args[1]) == {"B"}

    def swapped_dots(self):
        return [n for n in ast.walk(self.fn) if _is_dot(n) and self.swapped(n)]

    def plain_dots(self):
        return [n for n in ast.walk(self.fn) if _is_dot(n) and self.plain(n)]

    def transposes_of_swapped(self):
        found = []
        for n in ast.walk(self.fn):
            if _is_transpose(n):
                operand = n.value if isinstance(n, ast.Attribute) else (n.args[0] if n.args else n.func.value)
                if "S" in self.expr(operand):
                    found.append(n)
        return found

    def guards(self):
        """Map id(node) -> list of names in the tests of enclosing if / conditional expressions."""
        out = {}

        def visit(node, names):
            out[id(node)] = names
            if isinstance(node, (ast.If, ast.IfExp)):
                test_names = names + [n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)]
                visit(node.test, names)
                for child in (node.body if isinstance(node.body, list) else [node.body]):
                    visit(child, test_names)
                for child in (node.orelse if isinstance(node.orelse, list) else [node.orelse]):
                    visit(child, test_names)
                return
            for child in ast.iter_child_nodes(node):
                visit(child, names)

        visit(self.fn, [])
        return out

    def derived_from(self, name: str) -> set:
        """Names assigned (transitively) from ``name``, including itself."""
        names = {name}
        for _ in range(6):
            for node in ast.walk(self.fn):
                if isinstance(node, ast.Assign):
                    used = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                    if used & names:
                        for tgt in node.targets:
                            names |= {n.id for n in ast.walk(tgt) if isinstance(n, ast.Name)}
        return names


# --------------------------------------------------------------------------------------------- scenarios
# (quant, M, BLOCK_M, BLOCK_N, extra make_case kwargs)
TARGETS = [
    ("fp8_block", 1, 16, 64, {}),
    ("fp8_block", 4, 16, 128, {}),
    ("fp8_block", 16, 16, 64, {}),
    ("fp8_block", 24, 32, 128, {}),
]
# each c4 pair: (index into TARGETS, twin scenario, twin capability)
C4_PAIRS = {
    "sm80": (0, ("fp8_block", 1, 16, 64, {}), (8, 0)),
    "sm89": (1, ("fp8_block", 4, 16, 128, {}), (8, 9)),
    "sm100": (2, ("fp8_block", 16, 16, 64, {}), (10, 0)),
    "sm120": (3, ("fp8_block", 24, 32, 128, {}), (12, 0)),
    "block_m_64": (1, ("fp8_block", 256, 64, 128, {}), (9, 0)),
    "block_m_128": (0, ("fp8_block", 512, 128, 128, {}), (9, 0)),
    "bf16": (2, ("bf16", 16, 16, 64, {}), (9, 0)),
    "int8_w8a8": (3, ("int8_w8a8_block", 24, 32, 128, {}), (9, 0)),
}
# c5: cases the change must not touch, with the capability they launch under
C5_CASES = {
    "bf16_sm90": (("bf16", 4, 16, 64, {}), (9, 0)),
    "fp16_sm90": (("fp16", 4, 16, 64, {"bias": True}), (9, 0)),
    "int8_w8a8_block_sm90": (("int8_w8a8_block", 4, 16, 128, {}), (9, 0)),
    "int8_w8a8_channel_sm90": (("int8_w8a8_channel", 4, 16, 64, {}), (9, 0)),
    "int8_w8a16_sm90": (("int8_w8a16", 4, 16, 64, {}), (9, 0)),
    # FP8 launches have ragged N and K: the c5 tests also run them (see test_swap_ab.py)
    "fp8_block_large_m_sm90": (("fp8_block", 256, 64, 128, {"N": 200, "K": 320}), (9, 0)),
    "fp8_tensor_large_m_sm90": (("fp8_tensor", 512, 128, 128, {"N": 200, "K": 320, "bias": True}), (9, 0)),
    "fp8_block_sm80": (("fp8_block", 4, 16, 128, {"N": 200, "K": 320}), (8, 0)),
    "fp8_channel_sm89": (("fp8_channel", 4, 16, 64, {"N": 200, "K": 320}), (8, 9)),
    "fp8_block_sm100": (("fp8_block", 4, 16, 128, {"N": 200, "K": 320}), (10, 0)),
    "fp8_block_sm120": (("fp8_block", 4, 16, 128, {"N": 200, "K": 320}), (12, 0)),
    "fp8_block_rocm_gfx90a": (("fp8_block", 4, 16, 128, {}), (9, 0, "rocm")),
}
# c2: a small grid of launches in which a switch must be seen both on and off
C2_GRID = [(("fp8_block", 4, 16, 128, {}), cap) for cap in CAPS] + [
    (("fp8_block", 256, 64, 128, {}), (9, 0)),
    (("bf16", 4, 16, 64, {}), (9, 0)),
    (("bf16", 4, 16, 64, {}), (10, 0)),
]
# c3 (GPU): edge shapes, compared with a float32 reference of the same quantised operands
C3_CASES = {
    "block_n_ragged": ("fp8_block", 5, 16, 64, {"N": 200, "K": 256}),
    "block_k_ragged": ("fp8_block", 5, 16, 128, {"N": 256, "K": 320}),
    "block_nk_ragged_bias": ("fp8_block", 5, 32, 64, {"N": 200, "K": 320, "bias": True}),
    "block_unrouted_bias_m1": ("fp8_block", 1, 16, 64, {"N": 384, "K": 384, "bias": True, "routed": False}),
    "block_m24_e8": ("fp8_block", 24, 32, 128, {"E": 8, "N": 384, "K": 448}),
    "block_m3_topk4": ("fp8_block", 3, 16, 64, {"E": 8, "topk": 4, "N": 320, "K": 640}),
    "block_deep_k": ("fp8_block", 7, 16, 64, {"N": 192, "K": 1152}),
    "tensor_nk_ragged_bias": ("fp8_tensor", 5, 16, 64, {"N": 200, "K": 320, "bias": True}),
    "channel_nk_ragged": ("fp8_channel", 5, 16, 64, {"N": 200, "K": 320}),
}


# The launch the GPU run of c1 compiles: FP8 block quant, BLOCK_M=16, BLOCK_N=64, ragged N and K.
GPU_RUN_CASE = ("fp8_block", 5, 16, 64, {"N": 200, "K": 320})


def all_scenarios():
    out = [t for t in TARGETS] + [GPU_RUN_CASE]
    out += [p[1] for p in C4_PAIRS.values()]
    out += [c[0] for c in C5_CASES.values()]
    out += [g[0] for g in C2_GRID]
    out += list(C3_CASES.values())
    uniq = {}
    for s in out:
        uniq[key_of(s)] = s
    return uniq


def key_of(s) -> str:
    quant, M, BM, BN, extra = s
    return scenario_key(quant, M, BM, BN, **extra)


GUARD = 16  # NaN elements after every row of A and B in the numerics tests


def launch_of(s, device="cpu", seed=0, out_dtype="bf16"):
    quant, M, BM, BN, extra = s
    return make_case(quant, M, BM, BN, device=device, seed=seed, out_dtype=out_dtype, **extra)


def numerics_launch(launch: dict, interpreted: bool) -> dict:
    """The launch as the numerics tests run it: A and B each followed in memory, row by row, by NaN guard elements.

    A kernel that reads past the end of a row (a K mask off by one) picks up NaN, and NaN times the zero that the
    other operand's mask gives is still NaN, so the output shows it. Under the Triton interpreter (``interpreted``),
    which computes tl.dot in numpy and mishandles float8 tensors, FP8 operands are handed over as float32 tensors
    holding the same values: the FP8 code path (use_fp8_w8a8, its scales, masks and pointer arithmetic) runs on
    them, and every FP8 value is exact in float32, so the float32 reference of the quantised operands is unchanged.
    ``C`` is shared with ``launch``: the caller reads the result there."""
    import torch

    out = dict(launch)
    for name in ("A", "B"):
        t = out[name]
        if interpreted and t.dtype == torch.float8_e4m3fn:
            t = t.float()
        guarded = torch.full((*t.shape[:-1], t.shape[-1] + GUARD), float("nan"), device=t.device).to(t.dtype)
        guarded[..., : t.shape[-1]] = t
        out[name] = guarded[..., : t.shape[-1]]
    return out


def diff_vs_base(monkeypatch, fm, s, cap, seed=0) -> tuple[set, dict]:
    launch, _ = launch_of(s, seed=seed)
    rec = record_launch(monkeypatch, fm, launch, cap)
    base = snapshot()[key_of(s)]
    return diff(fm, rec, base), rec


def build_snapshot(monkeypatch_factory) -> dict:
    """Record the base tree's launches (run once, against the base, to write base_launches.json)."""
    fm = import_fm()
    snap = {}
    for key, s in all_scenarios().items():
        recs = []
        for cap in [(8, 0), (9, 0), (10, 0)]:
            mp = monkeypatch_factory()
            try:
                recs.append(record_launch(mp, fm, launch_of(s)[0], cap))
            finally:
                mp.undo()
        assert recs[0] == recs[1] == recs[2], f"base launch depends on capability for {key}"
        snap[key] = recs[1]
    return snap
