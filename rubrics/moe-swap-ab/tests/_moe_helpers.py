"""Helpers for the moe-swap-ab hidden tests, in the judge (loaded by conftest.py through an explicit path).

Nothing here imports vLLM or runs the candidate's code: the judge draws every launch's operands here, hands them
to the subject's probes (``probes/moe_swap_probes.py``: the launch recorder, the numerics run, the compiled TTIR)
and decides from what comes back. A recorded launch is normalised to the kernel's parameter names, so that it can
be compared with the base's launch for the same inputs (``base_launches.json``, an expectation the judge owns).
Static checks (``Flow``) read the patched ``fused_moe.py`` as text.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
SNAPSHOT = HERE / "base_launches.json"
KERNEL_FILE = "vllm/model_executor/layers/fused_moe/fused_moe.py"
CAPS = [(8, 0), (8, 9), (9, 0), (10, 0), (12, 0)]
PROBES = "moe_swap_probes"


# --------------------------------------------------------------------------------------------- inputs
def align(topk_ids, n_experts, block_m):
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
    st = torch.tensor(sorted_ids, dtype=torch.int32)
    ex = torch.tensor(expert_ids, dtype=torch.int32)
    ntp = torch.tensor([len(sorted_ids)], dtype=torch.int32)
    return st, ex, ntp


def make_case(quant, M, BM, BN, *, E=4, N=256, K=256, topk=2, bias=False, routed=True, seed=0, generator=None,
              out_dtype="bf16", group_n=128, naive=False):
    """Inputs and launcher keyword arguments for one fused-MoE launch, drawn here (CPU tensors; ``compute_type``
    by name: the probe turns it into the Triton dtype). Values come from ``generator`` (else a generator seeded
    with ``seed``); routing, hence the launch grid, is fixed. Block scales cover ``group_n`` output channels by 128
    input channels. With ``naive`` the launch has no sorted token list: vLLM's naive block assignment (decode
    batches whose tokens x top_k x 4 do not exceed the experts), one block per (token, expert) slot, expert ids
    the flat top-k ids."""
    import torch

    g = generator if generator is not None else torch.Generator().manual_seed(seed)
    gn, gk = group_n, 128
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
    gr = torch.Generator().manual_seed(1234)  # routing (hence the launch grid) does not depend on the values
    topk_ids = torch.stack([torch.randperm(E, generator=gr)[:topk] for _ in range(M)])
    topk_w = torch.rand(M, topk, generator=g)
    if naive:
        st, ex = None, topk_ids.flatten().to(torch.int32)
        ntp = torch.tensor([topk_ids.numel() * BM], dtype=torch.int32)
    else:
        st, ex, ntp = align(topk_ids, E, BM)
    b_bias = torch.randn(E, N, generator=g) * 0.5 if bias else None
    odt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[out_dtype]
    C = torch.zeros(M, topk, N, dtype=odt)
    launch = dict(A=A, B=B, C=C, A_scale=a_scale, B_scale=b_scale, topk_weights=topk_w,
                  sorted_token_ids=st, expert_ids=ex, num_tokens_post_padded=ntp, mul_routed_weight=routed,
                  top_k=topk, config={"BLOCK_SIZE_M": BM, "BLOCK_SIZE_N": BN, "BLOCK_SIZE_K": 128,
                                      "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3},
                  compute_type=out_dtype, B_bias=b_bias, **kwargs)
    return launch, dict(topk_ids=topk_ids, topk_w=topk_w, a32=a32)


def judge_generator(label: str):
    """A ``torch.Generator`` seeded from the judge's secret and ``label`` (a case, not a test: a criterion's
    per-case tests and its all-cases test judge the same draw), for operands that decide pass/fail."""
    import torch

    secret = os.environ.get("GRADER_SECRET", "")
    digest = hashlib.sha256(f"{secret}\0moe-swap-ab\0{label}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big"))


def scenario_key(quant, M, BM, BN, **extra) -> str:
    tail = "".join(f",{k}={v}" for k, v in sorted(extra.items()))
    return f"{quant},M={M},BM={BM},BN={BN}{tail}"


# --------------------------------------------------------------------------------------------- launches
class LaunchFailed(AssertionError):
    """The launcher raised, or did not make exactly one kernel launch, where the base makes one."""


def record(call, items) -> tuple[list, dict]:
    """Record the launch of each ``(scenario, capability, generator or None)`` through the probe (``call`` is
    ``subject.call`` or, outside the grader, a direct call). Returns, in order, each launch (the one the launcher
    made) or the ``LaunchFailed`` that says why there is none, and the kernels' signatures."""
    cases = []
    for s, cap, gen in items:
        launch, _ = launch_of(s, generator=gen)
        cases.append({"launch": launch, "cap": list(cap)})
    answer = call(f"{PROBES}.record_launches", cases=cases)
    outcomes, kernels = answer["outcomes"], answer["kernels"]
    if len(outcomes) != len(items):
        raise LaunchFailed(f"{len(outcomes)} launch observations for {len(items)} launches")
    records = []
    for (s, cap, _), seen in zip(items, outcomes):
        if "raised" in seen:
            records.append(LaunchFailed(f"{key_of(s)} on SM{tuple(cap)}: the launcher raised {seen['raised']}: "
                                        f"{seen['message']}"))
        elif len(seen["returned"]) != 1:
            records.append(LaunchFailed(f"{key_of(s)} on SM{tuple(cap)}: expected exactly one kernel launch, "
                                        f"saw {len(seen['returned'])}"))
        else:
            records.append(seen["returned"][0])
    return records, kernels


def _subject_call(subject):
    return lambda probe, **kwargs: subject.call(probe, **kwargs)


def diff(kernels: dict, cand: dict, base: dict) -> set:
    """Keys in which a candidate's launch differs from the base's launch for the same inputs.

    A parameter the base does not have counts only when it is passed 'on' (not False/0/None and not its
    default, as the probe read the launched kernel's signature): a new switch left off launches the same code.
    """
    out = set()
    if cand["kernel"] != base["kernel"]:
        out.add("kernel")
    for k, v in base["args"].items():
        if k not in cand["args"] or cand["args"][k] != v:
            out.add(k)
    defaults = kernels.get(cand["kernel"], {}).get("defaults", {}) if "kernel" not in out else {}
    for k, v in cand["args"].items():
        if k in base["args"]:
            continue
        if v in (False, None, 0) or (k in defaults and defaults[k] == v):
            continue
        out.add(k)
    for k in set(cand["options"]) | set(base["options"]):
        if cand["options"].get(k) != base["options"].get(k):
            out.add("opt:" + k)
    if cand["grid"] != base["grid"]:
        out.add("grid")
    return out


def constexpr_params(kernels: dict, kernel_name: str) -> set:
    return set(kernels.get(kernel_name, {}).get("constexprs", []))


@functools.lru_cache(maxsize=1)
def snapshot() -> dict:
    return json.loads(SNAPSHOT.read_text())


def _diffs(subject, items) -> tuple[list, dict]:
    items = [(it[0], it[1], it[2] if len(it) > 2 else None) for it in items]
    records, kernels = record(_subject_call(subject), items)
    snap = snapshot()
    return [rec if isinstance(rec, LaunchFailed) else (diff(kernels, rec, snap[key_of(s)]), rec)
            for (s, _, _), rec in zip(items, records)], kernels


def diffs_vs_base(subject, items) -> tuple[list[tuple[set, dict]], dict]:
    """For each ``(scenario, capability)`` or ``(scenario, capability, generator)``: how the candidate's launch
    differs from the base's, and the launch; with the kernels' signatures. A launch that failed raises."""
    found, kernels = _diffs(subject, items)
    for f in found:
        if isinstance(f, LaunchFailed):
            raise f
    return found, kernels


def diff_vs_base(subject, s, cap, generator=None) -> tuple[set, dict]:
    (found,), _ = diffs_vs_base(subject, [(s, cap, generator)])
    return found


def swap_capability(subject, s, prefer=(9, 0)):
    """The first capability (``prefer`` first, then CAPS in order) where the candidate's launch of ``s`` differs
    from the base's, or None. A launch that failed before that capability raises (the launches are recorded in
    one probe call; those after it do not count)."""
    caps = [prefer] + [c for c in CAPS if c != prefer]
    found, _ = _diffs(subject, [(s, cap) for cap in caps])
    for cap, f in zip(caps, found):
        if isinstance(f, LaunchFailed):
            raise f
        if f[0]:
            return cap
    return None


# --------------------------------------------------------------------------------------------- static
def kernel_module_source(tree: Path) -> str:
    return (Path(tree) / KERNEL_FILE).read_text()



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
    # FP8 w8a8 is not only block-quantized: per-tensor and per-channel scales are FP8 w8a8 launches too
    ("fp8_tensor", 5, 16, 64, {"N": 200, "K": 320, "bias": True}),
    ("fp8_channel", 5, 16, 64, {"N": 200, "K": 320}),
    # an FP8 w8a8 model may compute in float16 as well as in bfloat16
    ("fp8_block", 4, 16, 128, {"out_dtype": "fp16"}),
    # the condition is on the tile, not the token count: a tuned config may give BLOCK_M 16 to a 128-token batch
    ("fp8_block", 128, 16, 64, {}),
    # a decode batch under the naive block assignment (no sorted token list), and a launch that multiplies no
    # routed weights (the first GEMM of the pair)
    ("fp8_block", 2, 16, 64, {"naive": True}),
    ("fp8_block", 4, 16, 128, {"routed": False}),
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
    "fp8_tensor_sm100": (4, ("fp8_tensor", 5, 16, 64, {"N": 200, "K": 320, "bias": True}), (10, 0)),
    "fp8_channel_sm89": (5, ("fp8_channel", 5, 16, 64, {"N": 200, "K": 320}), (8, 9)),
    # the other members of the GPU families above: Ampere SM86, Blackwell SM103 and SM110, and SM121
    "sm86": (0, ("fp8_block", 1, 16, 64, {}), (8, 6)),
    "sm103": (2, ("fp8_block", 16, 16, 64, {}), (10, 3)),
    "sm110": (1, ("fp8_block", 4, 16, 128, {}), (11, 0)),
    "sm121": (3, ("fp8_block", 24, 32, 128, {}), (12, 1)),
    "fp16_out_sm100": (6, ("fp8_block", 4, 16, 128, {"out_dtype": "fp16"}), (10, 0)),
    # BLOCK_M 16 with 128 tokens swaps; BLOCK_M 64 with 4 tokens does not
    "small_m_block_m_64": (7, ("fp8_block", 4, 64, 128, {}), (9, 0)),
    "naive_sm89": (8, ("fp8_block", 2, 16, 64, {"naive": True}), (8, 9)),
    "unrouted_sm100": (9, ("fp8_block", 4, 16, 128, {"routed": False}), (10, 0)),
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
    # the rest of the GPU families, and platforms that report no capability: the launch is the base's (its
    # numerics then are the SM80 launch's, which runs the same kernel with the same arguments)
    "fp8_block_sm86": (("fp8_block", 4, 16, 128, {"N": 200, "K": 320}), (8, 6)),
    "fp8_block_sm103": (("fp8_block", 4, 16, 128, {"N": 200, "K": 320}), (10, 3)),
    "fp8_block_sm110": (("fp8_block", 4, 16, 128, {"N": 200, "K": 320}), (11, 0)),
    "fp8_block_sm121": (("fp8_block", 4, 16, 128, {"N": 200, "K": 320}), (12, 1)),
    "fp8_block_rocm_gfx942": (("fp8_block", 4, 16, 128, {}), (9, 4, "rocm")),
    "fp8_block_rocm_gfx950": (("fp8_block", 4, 16, 128, {}), (9, 5, "rocm")),
    "fp8_block_xpu": (("fp8_block", 4, 16, 128, {"N": 200, "K": 320}), (0, 0, "xpu")),
    # a bf16 decode batch under the naive block assignment
    "bf16_naive_sm90": (("bf16", 2, 16, 64, {"naive": True}), (9, 0)),
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
    # scale groups of 64 output channels: a BLOCK_N 128 weight tile spans two of them
    "block_group_n64": ("fp8_block", 5, 16, 128, {"N": 256, "K": 256, "group_n": 64}),
    "tensor_nk_ragged_bias": ("fp8_tensor", 5, 16, 64, {"N": 200, "K": 320, "bias": True}),
    "channel_nk_ragged": ("fp8_channel", 5, 16, 64, {"N": 200, "K": 320}),
    # the naive block assignment: no sorted token list, one (token, expert) slot a block
    "block_naive_m2": ("fp8_block", 2, 16, 64, {"naive": True, "N": 200, "K": 320}),
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


def launch_of(s, seed=0, generator=None, out_dtype=None):
    """The launch of scenario ``s``; its output dtype is ``out_dtype`` where given (the numerics runs choose
    theirs), else the scenario's own (bf16 unless it names one)."""
    quant, M, BM, BN, extra = s
    extra = dict(extra)
    own = extra.pop("out_dtype", "bf16")
    return make_case(quant, M, BM, BN, seed=seed, generator=generator, out_dtype=out_dtype or own, **extra)


def guarded_operands(launch: dict, interpreted: bool) -> dict:
    """The launch as the numerics tests hand it over: A and B replaced by buffers in which every row of the operand
    is followed by GUARD NaN elements (the probe's ``operand_views`` takes the operands back as views of them, so
    the kernel's row stride is GUARD elements longer than the row).

    A kernel that reads past the end of a row (a K mask off by one) picks up NaN, and NaN times the zero that the
    other operand's mask gives is still NaN, so the output shows it. Under the Triton interpreter (``interpreted``),
    which computes tl.dot in numpy and mishandles float8 tensors, FP8 operands are handed over as float32 tensors
    holding the same values: the FP8 code path (use_fp8_w8a8, its scales, masks and pointer arithmetic) runs on
    them, and every FP8 value is exact in float32, so the float32 reference of the quantised operands is unchanged.
    Every other argument is the launch's own."""
    import torch

    out = dict(launch)
    for name in ("A", "B"):
        t = out[name]
        if interpreted and t.dtype == torch.float8_e4m3fn:
            t = t.float()
        guarded = torch.full((*t.shape[:-1], t.shape[-1] + GUARD), float("nan")).to(t.dtype)
        guarded[..., : t.shape[-1]] = t
        out[name] = guarded
    return out


def reference(launch: dict, extra: dict):
    """The float32 fused-MoE output of the launch's (quantised) operands, scales, bias and routing: FP8 and int8
    w8a8 with block, per-channel or per-tensor scales, int8 w8a16 with per-channel weight scales, or bf16 / fp16."""
    import torch

    A = launch["A"].float()
    B = launch["B"].float()
    a_s, b_s = launch["A_scale"], launch["B_scale"]
    M, K = A.shape
    E, N, _ = B.shape
    if launch["block_shape"] is not None:
        gn, gk = launch["block_shape"]
        A = A * a_s.repeat_interleave(gk, 1)[:, :K]
        B = B * b_s.repeat_interleave(gn, 1)[:, :N].repeat_interleave(gk, 2)[:, :, :K]
    elif launch["per_channel_quant"]:
        A, B = A * a_s, B * b_s
    elif launch["use_int8_w8a16"]:
        B = B * b_s[:, :, None]  # one scale per weight output channel; the activations are not quantised
    elif a_s is not None:
        A, B = A * a_s.reshape(()), B * b_s.reshape(E, 1, 1)
    # else: bf16 / fp16 operands, no scales
    topk_ids, topk_w = extra["topk_ids"], extra["topk_w"]
    bias = launch["B_bias"].float() if launch["B_bias"] is not None else None
    out = torch.zeros(M, topk_ids.shape[1], N)
    for m in range(M):
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[m, j])
            v = B[e] @ A[m]
            if bias is not None:
                v = v + bias[e]
            if launch["mul_routed_weight"]:
                v = v * topk_w[m, j]
            out[m, j] = v
    return out


def output_error(out, launch: dict, extra: dict, rtol: float, cap) -> str | None:
    """Compare the output buffer a launch sent back with the float32 reference computed here from the operands
    drawn here. The failure, or None."""
    import torch

    want = tuple(launch["C"].shape)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return f"the output buffer came back as {got}, not a tensor of shape {want} (SM{cap} launch)"
    if not (out.is_floating_point()):
        return f"the output buffer came back as {out.dtype} (SM{cap} launch)"
    out = out.float()
    ref = reference(launch, extra)
    err = (out - ref).abs()
    bad = ~(err <= rtol * ref.abs().max().item() + rtol * ref.abs())  # NaN counts as off
    if not bad.any():
        return None
    return (f"{int(bad.sum())}/{bad.numel()} outputs off (SM{cap} launch); max err {err.max().item():.4g}, "
            f"max|ref| {ref.abs().max().item():.4g}")


def numerics_error(subject, s, cap) -> str | None:
    """Run one launch under capability ``cap`` compiled on the GPU, with NaN guard elements after every operand
    row; compare the output it sends back with the float32 reference (rtol 2e-2: FP8, int8 or 16-bit MMA, bf16
    output). A kernel that does not compile for the GPU fails here. The failure, or None. (The interpreted run is
    ``interpreted_run``.)"""
    launch, extra = launch_of(s, generator=judge_generator(key_of(s)), out_dtype="bf16")
    out = subject.call(f"{PROBES}.run_numerics", launch=guarded_operands(launch, False), cap=list(cap),
                       guard=GUARD, device="cuda")
    return output_error(out, launch, extra, 2e-2, cap)


# Rows after A, and after a per-token A_scale, that no launch may load (the interpreted runs). The sorted token list
# is padded per expert to a multiple of BLOCK_M with the value M x top_k, so a padded slot points at token row M:
# the first of these rows. Only the token mask keeps the A (and A_scale) loads off it; each output row depends on
# its own token row only and the store is masked, so no output shows such a load: the loads are recorded instead.
GUARD_ROWS = 4
# The probe's names for what lies outside the launch's own tensors.
READ_BEYOND = ("A guard rows", "A_scale guard rows", "outside every argument")
INTERPRETED_RTOL = 1e-4  # float32 operands and output: only the summation order differs


def interpreted_operands(launch: dict) -> dict:
    """``guarded_operands(launch, interpreted=True)`` with GUARD_ROWS more rows after A and after a per-token
    (2-D, one row per token) A_scale: NaN, or 0 in an integer operand (what is loaded there is recorded, not used)."""
    import torch

    out = guarded_operands(launch, interpreted=True)
    tokens = launch["C"].shape[0]
    for name in ("A", "A_scale"):
        t = out[name]
        if t is None or t.dim() != 2 or t.shape[0] != tokens:
            continue
        fill = float("nan") if t.is_floating_point() else 0
        buffer = torch.full((tokens + GUARD_ROWS, t.shape[1]), fill, dtype=t.dtype)
        buffer[:tokens] = t
        out[name] = buffer
    return out


def padded_slots(launch: dict) -> int:
    """Slots of the sorted token list that point past the last token (the padding the token mask must keep off);
    under the naive assignment every row of a block but its first."""
    slots = launch["C"].shape[0] * launch["top_k"]
    if launch["sorted_token_ids"] is None:
        return slots * (launch["config"]["BLOCK_SIZE_M"] - 1)
    return int((launch["sorted_token_ids"] >= slots).sum())


def interpreted_run(subject, s, cap) -> dict:
    """Run scenario ``s`` under capability ``cap`` through the Triton interpreter in the subject, recording its loads
    (``moe_swap_probes.run_recording_reads``), on operands drawn here from the judge's secret: FP8 ones as float32
    tensors holding the FP8 values, with a float32 output (see ``guarded_operands``); others in their own dtypes.
    Returns ``{"launch", "extra", "output", "reads"}``."""
    fp8 = s[0].startswith("fp8")
    launch, extra = launch_of(s, generator=judge_generator(key_of(s)), out_dtype="fp32" if fp8 else None)
    seen = subject.call(f"{PROBES}.run_recording_reads", launch=interpreted_operands(launch), cap=list(cap),
                        guard=GUARD)
    return {"launch": launch, "extra": extra, "output": seen["output"], "reads": seen["reads"]}


def read_error(run: dict, s, cap) -> str | None:
    """What an interpreted run loaded outside the launch's own tensors (guard rows, anything else), or None."""
    reads = run["reads"]
    bad = {k: reads[k] for k in READ_BEYOND if reads.get(k)}
    if not bad:
        return None
    launch = run["launch"]
    tokens = launch["C"].shape[0]
    return (f"{key_of(s)} on SM{tuple(cap)} loads elements outside the launch's tensors: {bad} (A has {tokens} "
            f"rows; {padded_slots(launch)} padded slots of the sorted token list point at row {tokens}, which the "
            f"token mask must keep out of the A and A_scale loads)")


def build_snapshot(call) -> dict:
    """Record the base tree's launches (run once, against the base, to write base_launches.json). ``call`` runs a
    probe by name with keyword arguments: ``base_subject.call``, or outside the grader a direct call of the probe
    module imported with the base tree on ``sys.path`` (see the task's README)."""
    snap = {}
    for key, s in all_scenarios().items():
        caps = [(8, 0), (9, 0), (10, 0)]
        recs, _ = record(call, [(s, cap, None) for cap in caps])
        for rec in recs:
            if isinstance(rec, LaunchFailed):
                raise rec
        assert recs[0] == recs[1] == recs[2], f"base launch depends on capability for {key}"
        snap[key] = recs[1]
    return snap
