"""Hidden tests for minimax-qk-norm: MiniMax QK RMSNorm under tensor parallelism.

Everything goes through the public layer entry ``MiniMaxText01RMSNormTP.forward_qkv``, run in the subject by the
probes (``probes/qknorm_probes.py``) with the TP group faked there (``probes/qknorm_sim.py``); TP runs are simulated
on one process by sharding q/k heads and summing the ranks' all-reduce inputs. The inputs are drawn here (from the
judge's secret), sharded here, and the gathered outputs are checked here against an fp32 (fp64-computed) RMSNorm.
CPU grading dtypes: fp32 and fp16 (the Triton interpreter mishandles bf16); bf16 runs on the GPU.
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
import statistics
from pathlib import Path

import pytest
import torch

from rubric_support import gpu_enabled, load_beside

# The interval statistics the kernel benchmarks use too (bench/stats.py; the rubric fingerprint covers it).
timing_stats = load_beside(Path(__file__).resolve().parents[3] / "bench" / "stats.py", "stats")

EPS = 1e-6
TOL = {torch.float32: 1e-4, torch.float16: 3e-2, torch.bfloat16: 3e-2}
CPU_DTYPES = [pytest.param(torch.float32, id="fp32", marks=pytest.mark.cases(precision="fp32")),
              pytest.param(torch.float16, id="fp16", marks=pytest.mark.cases(precision="fp16"))]


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if gpu_enabled() else "cpu"


def _module_generator(label: str) -> torch.Generator:
    """As the ``secret_generator`` fixture, for a module-scoped fixture (one draw shared by its tests)."""
    secret = os.environ.get("GRADER_SECRET", "")
    seed = int.from_bytes(hashlib.sha256(f"{secret}\0{__name__}::{label}".encode()).digest()[:8], "big")
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------- judge-side oracle


def rms_norm_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Full-width fp32 eager RMSNorm with per-channel weights (the test's reference), computed in fp64."""
    xf = x.double()
    ms = xf.pow(2).mean(dim=-1, keepdim=True)
    return (xf * torch.rsqrt(ms + eps) * w.double()).float()


def make_inputs(gen: torch.Generator, tokens, q_full, kv_full, skew=True):
    """Full-width fp32 q, k, v activations and per-channel weights, drawn from ``gen``.

    With ``skew`` the channel magnitudes grow along the hidden dimension, so the TP shards have very different
    mean squares and a wrong aggregation (local-only, missing or doubled /tp_world) shows.
    """
    def rnd(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float32)

    q, k, v = rnd(tokens, q_full), rnd(tokens, kv_full), rnd(tokens, kv_full)
    if skew:
        q = q * torch.linspace(0.2, 3.0, q_full)
        k = k * torch.linspace(3.0, 0.3, kv_full)
    qw = 1.0 + 0.5 * rnd(q_full)
    kw = 1.0 + 0.5 * rnd(kv_full)
    return q, k, v, qw, kw


def shard(inputs, tp: int, eps: float = EPS) -> dict:
    """Rank r's qkv (its q heads, k heads and v heads side by side) and weight shards, as probe arguments."""
    q, k, v, qw, kw = inputs
    qs, ks = q.shape[1] // tp, k.shape[1] // tp
    assert q.shape[1] % tp == 0 and k.shape[1] % tp == 0
    args = {"qkv": [], "q_weight": [], "k_weight": [], "q_size": qs, "kv_size": ks, "eps": eps}
    for r in range(tp):
        sl_q, sl_k = slice(r * qs, (r + 1) * qs), slice(r * ks, (r + 1) * ks)
        args["qkv"].append(torch.cat([q[:, sl_q], k[:, sl_k], v[:, sl_k]], dim=-1).contiguous())
        args["q_weight"].append(qw[sl_q].contiguous())
        args["k_weight"].append(kw[sl_k].contiguous())
    return args


def check_observations(obs: dict, inputs, tp: int, dtype, tol, eps: float = EPS) -> list[str]:
    """Gather the ranks' outputs and compare with full-width fp32 RMSNorm (epsilon ``eps``, the norms' own);
    returns a list of problems."""
    q, k, v, qw, kw = inputs
    if obs.get("outputs") is None:
        raise AssertionError(f"ranks made different numbers of all-reduce calls: {obs.get('record_counts')}")
    tokens, q_full, kv_full = q.shape[0], q.shape[1], k.shape[1]
    qs, ks = q_full // tp, kv_full // tp
    outs = obs["outputs"]
    assert len(outs) == tp, f"{len(outs)} rank outputs for tp_world={tp}"
    q_out = torch.zeros(tokens, q_full, dtype=torch.float32)
    k_out = torch.zeros(tokens, kv_full, dtype=torch.float32)
    v_out = torch.zeros(tokens, kv_full, dtype=dtype)
    v_ok = True
    problems = []
    for r, out in enumerate(outs):
        assert len(out) == 3, f"rank {r}: forward_qkv returned {len(out)} values, not (q, k, v)"
        qo, ko, vo = out
        for name, got, width in (("q", qo, qs), ("k", ko, ks), ("v", vo, ks)):
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != (tokens, width):
                shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
                problems.append(f"rank {r}: {name} has shape {shape}, not {(tokens, width)}")
        if problems:
            return problems
        # q and k go on to rotary and attention in the activations' dtype: an output in another dtype (an fp32
        # result of a 16-bit qkv) is not the layer's result, however close its values are.
        problems += [f"rank {r}: {name} is {str(got.dtype).removeprefix('torch.')}, not qkv's "
                     f"{str(dtype).removeprefix('torch.')}" for name, got in (("q", qo), ("k", ko)) if got.dtype != dtype]
        q_out[:, r * qs:(r + 1) * qs] = qo.float()
        k_out[:, r * ks:(r + 1) * ks] = ko.float()
        v_ok = v_ok and vo.dtype == dtype
        if vo.dtype == dtype:
            v_out[:, r * ks:(r + 1) * ks] = vo
    ref_q = rms_norm_ref(q.float(), qw.float(), eps)
    ref_k = rms_norm_ref(k.float(), kw.float(), eps)
    for name, got, ref in (("q", q_out, ref_q), ("k", k_out, ref_k)):
        if not torch.isfinite(got).all():
            problems.append(f"{name}: non-finite output")
            continue
        if not torch.allclose(got, ref, atol=tol, rtol=tol):
            err = (got - ref).abs().max().item()
            ratio = (got.norm() / ref.norm()).item()
            problems.append(f"{name}: max abs err {err:.4g} (output/ref norm ratio {ratio:.4f})")
    if not v_ok or not torch.equal(v_out, v):
        problems.append("v: not the unchanged v slice of qkv")
    return problems


def _cast(inputs, dtype):
    return tuple(t.to(dtype) for t in inputs)


def _run_sim(subject, device, gen, tokens, q_full, kv_full, tp, dtype, inputs=None, eps=EPS, **probe_args):
    """Draw (or take) the inputs, run forward_qkv on ``tp`` simulated ranks in the subject (norms built with
    epsilon ``eps``), check them here."""
    inputs = _cast(inputs if inputs is not None else make_inputs(gen, tokens, q_full, kv_full), dtype)
    obs = subject.call("qknorm_probes.simulate", device=device, **shard(inputs, tp, eps), **probe_args)
    return obs, inputs, check_observations(obs, inputs, tp, dtype, TOL[dtype], eps)


# --------------------------------------------------------------------------------------------- c1


def _float_bits(dtype_name: str):
    dt = getattr(torch, dtype_name, None)
    return torch.finfo(dt).bits if isinstance(dt, torch.dtype) and dt.is_floating_point else None


def wide_copies(events: list[dict], act_dtype: torch.dtype, min_numel: int) -> list[str]:
    """Ops that produced a floating tensor wider than the activations with >= min_numel elements."""
    hits = []
    for event in events:
        for dtype_name, shape in event["outputs"]:
            bits = _float_bits(dtype_name)
            if bits is not None and bits > torch.finfo(act_dtype).bits and math.prod(shape) >= min_numel:
                hits.append(f"{event['op']} -> {dtype_name} {tuple(shape)}")
    return hits


JOIN_OPS = ("cat.", "stack.", "hstack.", "vstack.", "concat.", "concatenate.", "chunk.", "split.Tensor",
            "unsafe_chunk.", "unsafe_split.Tensor")


def concat_ops(events: list[dict]) -> list[str]:
    """cat/stack/chunk-style ops (materializing joins, and the chunk that undoes them)."""
    return [event["op"] for event in events if event["op"].startswith(JOIN_OPS)]


SPY_TPS = [1, 2, 4, 8]
# The op-trace is taken over a covering set of what a fast path may be gated on: token count (1, a 16-token
# batch, a prefill-sized 320), row width (narrow 64/32 per rank, MiniMax-M2's TP1 6144/1024, wider than one
# 2048-wide block) and 16-bit dtype (fp16, bf16: only the ops are traced, so the interpreter's bf16 arithmetic does
# not matter). A path that keeps fp32 copies for one of them loses that tp's check. The prefill-sized batch runs at
# tp 1 and 2 only: the Triton interpreter runs one program per token and segment, and it is the slow one.
SPY_SHAPES = [
    # (tokens, tokens case, q, kv, width case, dtype, tp sizes)
    (1, "1", 64, 32, "narrow", torch.float16, SPY_TPS),
    (1, "1", 6144, 1024, "wide", torch.bfloat16, SPY_TPS),
    (16, "16", 64, 32, "narrow", torch.bfloat16, SPY_TPS),
    (16, "16", 6144, 1024, "wide", torch.float16, SPY_TPS),
    (320, "large", 64, 32, "narrow", torch.float16, [1, 2]),
]
SPY_CASE_MARK = pytest.mark.cases(evidence="op-trace", width=["narrow", "wide"], precision=["fp16", "bf16"])


def _spy_tokens_mark(tp: int):
    """The token-count cases ``SPY_SHAPES`` traces at ``tp``."""
    return pytest.mark.cases(tokens=sorted({case for _, case, *_, tps in SPY_SHAPES if tp in tps}))


def _spy_problems(subject, device, tp: int) -> list[str]:
    """fp32 copies of q/k-sized tensors and cat/chunk ops forward_qkv makes on 16-bit qkv at ``tp``, over
    ``SPY_SHAPES`` (inputs drawn from the judge's secret, one draw per tp shared by the tests that judge it)."""
    problems = []
    for tokens, _, q, kv, _, dtype, tps in SPY_SHAPES:
        if tp not in tps:
            continue
        gen = _module_generator(f"spy:tp{tp}:{tokens}x{q}x{kv}")
        q_weight = (torch.rand(q, generator=gen) + 0.5).to(dtype)
        k_weight = (torch.rand(kv, generator=gen) + 0.5).to(dtype)
        qkv = torch.randn(tokens, q + 2 * kv, generator=gen).to(dtype)
        events = subject.call("qknorm_probes.op_events", tp_world=tp, qkv=qkv, q_weight=q_weight,
                              k_weight=k_weight, q_size=q, kv_size=kv, eps=EPS, device=device, timeout=600)
        wide = wide_copies(events, dtype, tokens * kv)
        joins = concat_ops(events)
        if wide or joins:
            name = str(dtype).removeprefix("torch.")
            problems.append(f"{tokens} tokens, q {q} / kv {kv}, {name}: fp32 copies of q/k-sized tensors: "
                            f"{wide[:4]}; cat/chunk ops: {joins[:4]}")
    return problems


_SPY_RESULTS: dict = {}


def _spy_problems_cached(subject, device, tp: int) -> list[str]:
    """As ``_spy_problems``, run once per tp in this session (the per-tp tests and the every-tp test judge the
    same observations)."""
    if tp not in _SPY_RESULTS:
        _SPY_RESULTS[tp] = _spy_problems(subject, device, tp)
    return _SPY_RESULTS[tp]


# c1 names tp_world 1 and tp_world above 1 as the cases of "no fp32 copies or cat/chunk". The tp 1 check weighs
# 1.3, the others 1, and test_no_fp32_copies_or_concat_at_every_tp (1.0) asks for every tp at once. So one tp
# failing entirely leaves c1 below met on CPU (tp 1: 3.5/5.8 = 0.60; tp 2, 4 or 8: 3.8/5.8 = 0.66) and on the GPU
# with every speed case passing (5.5/7.8 = 0.71; 5.8/7.8 = 0.74), while failing all five speed cases still does
# too (5.8/7.8 = 0.74). tp1-only-fast-path keeps its designed statuses: unmet on CPU (1.3/5.8 = 0.22) and
# partial on the GPU ((1.3 + 0.8)/7.8 = 0.27 with two TP1 speed cases, 0.32 with three).
@pytest.mark.parametrize("tp", [
    pytest.param(1, id="tp1", marks=[pytest.mark.criterion("c1", weight=1.3), _spy_tokens_mark(1)]),
    pytest.param(2, id="tp2", marks=[pytest.mark.criterion("c1"), _spy_tokens_mark(2)]),
    pytest.param(4, id="tp4", marks=[pytest.mark.criterion("c1"), _spy_tokens_mark(4)]),
    pytest.param(8, id="tp8", marks=[pytest.mark.criterion("c1"), _spy_tokens_mark(8)]),
])
@SPY_CASE_MARK
def test_no_fp32_copies_or_concat(subject, device, tp):
    """forward_qkv on 16-bit qkv makes no fp32 copy of q/k and no cat/chunk of the statistics, at 1 and 16 tokens
    (and 320 at tp 1 and 2), narrow and wide rows, fp16 and bf16."""
    problems = _spy_problems_cached(subject, device, tp)
    assert not problems, f"{len(problems)} shapes: " + "; ".join(problems)


@pytest.mark.criterion("c1", weight=1.0)
@SPY_CASE_MARK
@pytest.mark.cases(tp=[str(tp) for tp in SPY_TPS], tokens=["1", "16", "large"])
def test_no_fp32_copies_or_concat_at_every_tp(subject, device):
    """At tp_world 1, 2, 4 and 8 alike forward_qkv makes no fp32 copy of q/k and no cat/chunk temporaries."""
    wrong = [f"tp_world={tp}: {p}" for tp in SPY_TPS for p in _spy_problems_cached(subject, device, tp)]
    assert not wrong, f"{len(wrong)} of {len(SPY_TPS)} tp sizes make copies or joins: " + "; ".join(wrong)


def _compiled_fp32_regressions(tree: Path) -> list[str]:
    """Functions in rms_norm_tp.py decorated with torch.compile that upcast to fp32 and concatenate."""
    src = tree / "vllm/model_executor/layers/minimax_rms_norm/rms_norm_tp.py"
    if not src.exists():
        return []
    found = []
    for node in ast.walk(ast.parse(src.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        compiled = any("compile" in ast.unparse(d) for d in node.decorator_list)
        if not compiled:
            continue
        body = ast.unparse(node)
        upcast = "float32" in body or ".float()" in body
        joins = any(f in body for f in ("torch.cat", "torch.stack", ".chunk(", "torch.chunk"))
        if upcast and joins:
            found.append(node.name)
    return found


@pytest.mark.static
@pytest.mark.criterion("c1", weight=0.5)
@pytest.mark.cases(evidence="static")
def test_regressed_compiled_path_removed(vllm_tree):
    """rms_norm_tp.py no longer carries a torch.compile'd fp32-upcast + cat/chunk QK-norm path."""
    found = _compiled_fp32_regressions(vllm_tree)
    assert not found, f"torch.compile'd fp32 + cat/chunk path still present: {found}"


# Cases where the real fix is clearly faster than the base. Recorded on an H200 (docs/gpu-run/bench.txt),
# base / reference: at TP1 the base's compiled path runs as it does in vLLM (no all-reduce), and the fix wins
# host-inclusive (1 token 97.5 / 53.2 us, 16 tokens 193.6 / 49.3 us) and under CUDA graphs (16 tokens
# 3.8 / 2.3 us). That bench's TP4/TP8 base numbers cannot be used: its counting all-reduce made the base
# recompile until Dynamo ran it eagerly. At TP4/TP8 with few tokens the fix makes two launches around the
# all-reduce, where Inductor's graph for the base has about four kernels; the corrected bench (H200, 2026-11-30,
# docs/gpu-run/run5/bench-qk.txt) gives 6.0 / 3.6 us at TP4, 1 token, and 6.1 / 3.8 us at TP8, 16 tokens. Large
# token counts are left out: both are memory-bound there (TP1 4096 tokens under graphs: 34.8 / 32.4 us).
SPEED_CASES = [
    # (name, q, kv, tp_world, tokens, mode)
    ("tp1_1tok_host", 6144, 1024, 1, 1, "host"),
    ("tp1_16tok_host", 6144, 1024, 1, 16, "host"),
    ("tp1_16tok_graph", 6144, 1024, 1, 16, "graph"),
    ("tp4_1tok_graph", 1536, 256, 4, 1, "graph"),
    ("tp8_16tok_graph", 768, 128, 8, 16, "graph"),
]
# The candidate passes a case when the upper end of the 95% bootstrap interval of median(candidate) /
# median(baseline) is at most this: at least 10% faster, with the interval's confidence (not one ratio).
SPEED_MARGIN = 0.9
# Timed by the judge from its side of the channel (grader.sandbox.timing), never by the subject: per round, one
# call to each side (the candidate's tree and the base's, each in a speed subject of its own), alternating which
# goes first. A call is one batch ending in a device synchronize: SPEED_CALLS forward_qkv calls on inputs made from
# that round's secret coefficients, host mode eagerly, graph mode as SPEED_REPLAYS replays of one CUDA graph of
# the batch. The batches last milliseconds (reference: 200 x ~50 us host; 100 x 20 x ~2.3 us graph), so the
# channel's round trip (well under a millisecond) is noise, and it is paid alike by both sides.
SPEED_ROUNDS = 30
SPEED_CALLS = {"host": 200, "graph": 100}
SPEED_REPLAYS = {"host": 1, "graph": 20}
# How far a round's digests (one per call, for q and for k) may be from the base's on the same inputs, as a share
# of their norm over the round's calls. bf16 rounding of the outputs moves them by well under 1% of it; all zeros
# are 100% away, and a batch that skips one call in twenty about 22%.
DIGEST_TOLERANCE = 0.05


def _speed_case_inputs(name: str, q: int, kv: int, tokens: int) -> dict:
    gen = _module_generator(f"speed:{name}")
    width = q + 2 * kv
    return {"x": torch.randn(tokens, width, generator=gen), "d": torch.randn(tokens, width, generator=gen) * 0.1,
            "q_weight": torch.rand(q, generator=gen) + 0.5, "k_weight": torch.rand(kv, generator=gen) + 0.5,
            "rq": torch.randn(tokens, q, generator=gen), "rk": torch.randn(tokens, kv, generator=gen)}


@pytest.fixture(scope="module")
def speed_results():
    """Per case: the judge-measured seconds of every round's batch on each side, and the digests they returned,
    with the coefficients each round drew."""
    from grader.sandbox import timing
    from grader.sandbox.client import subject as subject_process

    sides = {"candidate": subject_process("candidate", "speed"), "baseline": subject_process("base", "speed")}
    results = {}
    for name, q, kv, tp, tokens, mode in SPEED_CASES:
        inputs = _speed_case_inputs(name, q, kv, tokens)
        calls, replays = SPEED_CALLS[mode], SPEED_REPLAYS[mode]
        for side in sides.values():
            side.call("qknorm_speed.prepare", name=name, q_size=q, kv_size=kv, tp=tp, mode=mode, calls=calls,
                      replays=replays, timeout=300, **inputs)
        gen = _module_generator(f"speed-coefficients:{name}")
        coefficients = [(torch.rand(calls, generator=gen) + 0.5).tolist() for _ in range(SPEED_ROUNDS)]
        samples = timing.interleaved(
            {label: (lambda r, side=side: side.call("qknorm_speed.run", name=name, coeffs=coefficients[r],
                                                    timeout=120))
             for label, side in sides.items()}, SPEED_ROUNDS)
        results[name] = samples
    return results


def _digest_problems(samples) -> list[str]:
    """Rounds where the candidate's timed batch did not give what the base's gave on the same inputs."""
    wrong = []
    for r, (cand, base) in enumerate(zip(samples["candidate"].answers, samples["baseline"].answers)):
        got, want = torch.tensor(cand, dtype=torch.float64), torch.tensor(base, dtype=torch.float64)
        if got.shape != want.shape:
            wrong.append(f"round {r}: digests of shape {tuple(got.shape)}, not {tuple(want.shape)}")
            continue
        if not bool(torch.isfinite(got).all()):
            wrong.append(f"round {r}: non-finite digests")
            continue
        for column, output in enumerate(("q", "k")):
            off = float((got[:, column] - want[:, column]).norm() / want[:, column].norm().clamp_min(1e-12))
            if off > DIGEST_TOLERANCE:
                wrong.append(f"round {r}: the {output} digests are {off:.3f} of their norm away from the base's")
    return wrong


# Five cases of weight 0.4 each (2.0 in all).
@pytest.mark.gpu
@pytest.mark.criterion("c1", weight=0.4)
@pytest.mark.cases(evidence="speed")
@pytest.mark.parametrize("case", [c[0] for c in SPEED_CASES])
def test_faster_than_regressed_path(speed_results, case):
    """forward_qkv takes at most 0.9x the time of the base's regressed compiled fp32 path (H200, bf16), as the judge
    times both from outside their subjects: the whole 95% interval of the ratio of medians, rounds resampled in
    pairs, lies at or below 0.9, and every timed batch gives the base's outputs on the same secret inputs."""
    samples = speed_results[case]
    wrong = _digest_problems(samples)
    assert not wrong, "the timed calls did not compute forward_qkv on the judge's inputs: " + "; ".join(wrong[:3])
    cand, base = samples["candidate"].seconds, samples["baseline"].seconds
    ratio = timing_stats.ratio_of_medians(cand, base)
    low, high = timing_stats.bootstrap_ratio_ci(cand, base, paired=True, seed=timing_stats.seed_of(case))
    assert high <= SPEED_MARGIN, (
        f"candidate {statistics.median(cand) * 1e3:.2f} ms vs base {statistics.median(base) * 1e3:.2f} ms per batch "
        f"as the judge measured them; time ratio {ratio:.2f} (95% CI {low:.2f}-{high:.2f}) over {len(cand)} "
        f"interleaved rounds: its upper end is above {SPEED_MARGIN}"
    )


# --------------------------------------------------------------------------------------------- c2

# (tokens, q width, kv width, activation scale, the norms' epsilon). Every other case builds the norms with the
# constructor's default epsilon (1e-6, also MiniMax-M2's), which a kernel that ignores the norm's own epsilon
# reproduces; the last case gives the norms 1e-2, as large as the mean square of its small activations.
# One token and none are the batch corners (a decode step; an empty step, which must give empty q and k).
C2_SHAPES = [
    pytest.param(7, 96, 32, 1.0, EPS, id="t7_q96_kv32", marks=pytest.mark.cases(shape="narrow")),
    pytest.param(3, 80, 24, 1.0, EPS, id="t3_q80_kv24_nonpow2", marks=pytest.mark.cases(shape="non-pow2")),
    pytest.param(2, 6144, 1024, 1.0, EPS, id="t2_q6144_kv1024", marks=pytest.mark.cases(shape="wide")),
    pytest.param(5, 192, 64, 200.0, EPS, id="t5_large_values", marks=pytest.mark.cases(shape="large-values")),
    pytest.param(6, 128, 32, 0.05, 1e-2, id="t6_small_values_eps1e-2", marks=pytest.mark.cases(shape="own-eps")),
    pytest.param(1, 96, 32, 1.0, EPS, id="t1_q96_kv32", marks=pytest.mark.cases(shape="one-token")),
    pytest.param(0, 96, 32, 1.0, EPS, id="t0_q96_kv32", marks=pytest.mark.cases(shape="zero-tokens")),
]


@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence="values", tp="1")
@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("tokens,q_full,kv_full,scale,eps", C2_SHAPES)
def test_matches_fp32_rmsnorm(subject, device, secret_generator, dtype, tokens, q_full, kv_full, scale, eps):
    """forward_qkv (tp_world 1) equals fp32 eager RMSNorm with per-channel weights and the norms' own epsilon; v is passed through."""
    q, k, v, qw, kw = make_inputs(secret_generator, tokens, q_full, kv_full)
    inputs = (q * scale, k * scale, v, qw, kw)
    _, _, problems = _run_sim(subject, device, None, tokens, q_full, kv_full, 1, dtype, inputs=inputs, eps=eps)
    assert not problems, problems


GUARD_ELEMENTS = 64
GUARD_VALUE = 77


def _overruns(guards: list) -> list[int]:
    """Sizes of the allocations whose guard elements changed (compared with GUARD_VALUE in each one's dtype)."""
    overrun = []
    for numel, dtype_name, tail in guards:
        expected = torch.tensor([float(GUARD_VALUE)]).to(getattr(torch, dtype_name)).to(torch.float64)
        if tail.shape != (GUARD_ELEMENTS,) or not torch.equal(tail, expected.expand(GUARD_ELEMENTS)):
            overrun.append(numel)
    return overrun


# A write past a row's end is a memory-safety defect whatever the numbers say: an op that overruns fails both
# cases, which takes c2 below met.
@pytest.mark.criterion("c2", weight=3)
@pytest.mark.cases(evidence="writes-in-bounds", precision="fp32", shape="non-pow2")
@pytest.mark.parametrize("tp", [1, 2], ids=lambda t: f"tp{t}")
def test_writes_stay_inside_allocated_tensors(subject, device, secret_generator, tp):
    """forward_qkv writes nothing past the end of the tensors it allocates (row widths not a power of two)."""
    # Only the writes are judged here: the values are c2's other checks at tp 1 and c3's at tp > 1.
    obs, _, _ = _run_sim(subject, device, secret_generator, 3, 96 * tp, 32 * tp, tp, torch.float32,
                         guard_elements=GUARD_ELEMENTS, guard_value=float(GUARD_VALUE))
    overrun = _overruns(obs["guards"])
    assert not overrun, f"written past the end of {len(overrun)} allocated tensor(s) (their sizes: {overrun})"


def input_changes(obs: dict, shards: dict) -> list[str]:
    """The given tensors (each rank's qkv, its norms' weights) that the run left other than the judge sent them."""
    after = obs.get("inputs_after")
    if after is None:
        return ["the probe reported no inputs after the run"]
    changed = []
    for name in ("qkv", "q_weight", "k_weight"):
        for r, (sent, got) in enumerate(zip(shards[name], after[name])):
            if got.shape != sent.shape or got.dtype != sent.dtype or not torch.equal(got, sent):
                changed.append(f"rank {r}: {name}")
    return changed


# forward_qkv's outputs are its own tensors: a fix that normalizes q and k inside qkv (returning views of it) gives
# the right q, k and v, but it writes into a tensor it was given, which the caller (and, under torch.compile, a
# custom op declared as mutating nothing) does not expect. The judge sends the shards and compares them with what
# the run left.
@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence="writes-in-bounds", shape="narrow")
@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("tp", [1, 2], ids=lambda t: f"tp{t}")
def test_given_tensors_left_unchanged(subject, device, secret_generator, dtype, tp):
    """forward_qkv writes nothing into the qkv and weight tensors it is given."""
    inputs = _cast(make_inputs(secret_generator, 5, 96 * tp, 32 * tp), dtype)
    shards = shard(inputs, tp)
    obs = subject.call("qknorm_probes.simulate", device=device, report_inputs=True, **shards)
    changed = input_changes(obs, shards)
    assert not changed, f"tp_world={tp}: forward_qkv changed the tensors it was given: {changed}"


# The layer is also a plain RMSNorm: MiniMax-Text-01's linear attention calls its single-tensor entry (`_forward`,
# which `forward` calls). A fix that rewrites it too (say, squaring 16-bit activations to spare the fp32 copy) changes
# another model's numerics, which the forward_qkv checks never see. Large fp16 values are where such a rewrite
# overflows.
SINGLE_TENSOR_CASES = [
    pytest.param(1, torch.float32, 1.0, id="tp1_fp32", marks=pytest.mark.cases(tp="1", precision="fp32")),
    pytest.param(1, torch.float16, 200.0, id="tp1_fp16_x200",
                 marks=pytest.mark.cases(tp="1", precision="fp16", shape="large-values")),
    pytest.param(2, torch.float16, 1.0, id="tp2_fp16", marks=pytest.mark.cases(tp="2", precision="fp16")),
    pytest.param(2, torch.float32, 200.0, id="tp2_fp32_x200",
                 marks=pytest.mark.cases(tp="2", precision="fp32", shape="large-values")),
]


@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence="other-entries", shape="non-pow2")
@pytest.mark.parametrize("world,dtype,scale", SINGLE_TENSOR_CASES)
def test_single_tensor_entries_unchanged(subject, device, secret_generator, world, dtype, scale):
    """The layer's single-tensor entries (forward, _forward) still give fp32 RMSNorm with per-channel weights, in
    the activations' dtype, over tp_world ranks."""
    tokens, width = 5, 48 * world
    x = (torch.randn(tokens, width, generator=secret_generator) * torch.linspace(0.2, 3.0, width) * scale).to(dtype)
    w = (1.0 + 0.5 * torch.randn(width, generator=secret_generator)).to(dtype)
    per = width // world
    obs = subject.call("qknorm_probes.simulate_single_tensor", device=device, eps=EPS,
                       x=[x[:, r * per:(r + 1) * per].contiguous() for r in range(world)],
                       weight=[w[r * per:(r + 1) * per].contiguous() for r in range(world)])
    assert obs.get("outputs") is not None, f"ranks made different numbers of all-reduce calls: {obs}"
    ref = rms_norm_ref(x.float(), w.float(), EPS)
    wrong = []
    for i, entry in enumerate(("forward", "_forward")):
        got = [out[i] for out in obs["outputs"]]
        if any(not isinstance(t, torch.Tensor) or t.dtype != dtype or tuple(t.shape) != (tokens, per) for t in got):
            wrong.append(f"{entry}: returned {[(getattr(t, 'dtype', t), tuple(getattr(t, 'shape', ()))) for t in got]}")
            continue
        full = torch.cat([t.float() for t in got], dim=-1)
        if not torch.isfinite(full).all():
            wrong.append(f"{entry}: non-finite output")
        elif not torch.allclose(full, ref, atol=TOL[dtype], rtol=TOL[dtype]):
            wrong.append(f"{entry}: max abs err {(full - ref).abs().max().item():.4g}")
    # The same flat all-reduce as forward_qkv's statistics (c3 reduce-form): a 2-D one takes FlashInfer's fused
    # all-reduce where it is on, whose workspace is for 16-bit activations.
    two_d = sorted({f"{tuple(shape)} {dt}" for shape, dt in obs.get("reduce_inputs") or [] if len(shape) == 2})
    if two_d:
        wrong.append(f"2-D all-reduce inputs {two_d}, not the base's flat view")
    assert not wrong, f"tp_world={world}: {wrong}"


BF16_GPU_TOKENS = [1, 17, 1024]


@pytest.mark.gpu
@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence="values", precision="bf16", shape="wide", tp="1")
@pytest.mark.parametrize("tokens", BF16_GPU_TOKENS)
def test_matches_fp32_rmsnorm_bf16_gpu(subject, device, secret_generator, tokens):
    """bf16 forward_qkv (MiniMax-M2 TP1 widths) equals fp32 RMSNorm within atol=rtol=3e-2 on the GPU."""
    _, _, problems = _run_sim(subject, device, secret_generator, tokens, 6144, 1024, 1, torch.bfloat16)
    assert not problems, problems



# c2 names its cases: fp32 and 16-bit (fp16 on CPU, bf16 on the GPU), wide rows, large values, the norms' own
# epsilon, one token and none, q and k and v. This test asks for every case at once; with scoring by cases any
# failing c2 check leaves c2 below met. The overrun checks judge the writes only, so wrong-tp-scaling (whose numbers
# are wrong at tp 2, c3's case) keeps c2 met.
@pytest.mark.criterion("c2", weight=4)
@pytest.mark.cases(evidence="values", precision=["fp32", "fp16"], tp="1",
                   shape=["narrow", "non-pow2", "wide", "large-values", "own-eps", "one-token", "zero-tokens"])
def test_matches_fp32_rmsnorm_every_case(subject, device, secret_generator):
    """Every c2 case at once: fp32 and 16-bit, wide rows, large values (bf16 on the GPU); v passed through."""
    wrong = []
    for dtype in (torch.float32, torch.float16):
        for param in C2_SHAPES:
            tokens, q_full, kv_full, scale, eps = param.values
            q, k, v, qw, kw = make_inputs(secret_generator, tokens, q_full, kv_full)
            inputs = (q * scale, k * scale, v, qw, kw)
            _, _, problems = _run_sim(subject, device, None, tokens, q_full, kv_full, 1, dtype, inputs=inputs,
                                      eps=eps)
            wrong += [f"{param.id} {str(dtype).removeprefix('torch.')}: {p}" for p in problems]
    if device == "cuda":  # bf16 is graded on the GPU only (the CPU interpreter mishandles it)
        for tokens in BF16_GPU_TOKENS:
            _, _, problems = _run_sim(subject, device, secret_generator, tokens, 6144, 1024, 1, torch.bfloat16)
            wrong += [f"bf16 {tokens} tokens x 6144/1024: {p}" for p in problems]
    assert not wrong, f"{len(wrong)} problem(s): " + "; ".join(wrong)


# --------------------------------------------------------------------------------------------- c3


@pytest.mark.criterion("c3")
@pytest.mark.cases(eps="default-eps", width="narrow", magnitude="unit", evidence="values", tokens="even")
@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("tp", [2, 4, 8], ids=lambda t: f"tp{t}")
def test_tp_variance_aggregation(subject, device, secret_generator, dtype, tp):
    """Sharded forward_qkv with the variance all-reduced over tp ranks equals full-width RMSNorm."""
    _, _, problems = _run_sim(subject, device, secret_generator, 6, 64 * 8, 16 * 8, tp, dtype)
    assert not problems, f"tp_world={tp}: {problems}"


# Activations in the hundreds (representable in fp16) have mean squares past fp16's range: statistics kept or
# all-reduced in the activation dtype overflow there, where the full-width fp32 RMSNorm is exact.
@pytest.mark.criterion("c3")
@pytest.mark.cases(eps="default-eps", width="narrow", magnitude="large-values")
@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("tp", [2, 4, 8], ids=lambda t: f"tp{t}")
def test_tp_variance_aggregation_large_values(subject, device, secret_generator, dtype, tp):
    """Sharded forward_qkv on activations scaled by 200 equals full-width RMSNorm."""
    q, k, v, qw, kw = make_inputs(secret_generator, 4, 64 * 8, 16 * 8)
    inputs = (q * 200.0, k * 200.0, v, qw, kw)
    _, _, problems = _run_sim(subject, device, None, 4, 64 * 8, 16 * 8, tp, dtype, inputs=inputs)
    assert not problems, f"tp_world={tp}, activations x200: {problems}"


# The norms' own epsilon must enter the rsqrt as it does at full width, after the division by tp_world: with the
# default 1e-6 an epsilon scaled by 1/tp_world (folded into the rsqrt with the sum) is invisible, so these give
# the norms 1e-2 on small activations, where it is as large as the mean square.
@pytest.mark.criterion("c3")
@pytest.mark.cases(eps="own-eps", width="narrow")
@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("tp", [2, 4, 8], ids=lambda t: f"tp{t}")
def test_tp_variance_aggregation_own_eps(subject, device, secret_generator, dtype, tp):
    """Sharded forward_qkv with norms of epsilon 1e-2 on small activations equals full-width RMSNorm."""
    q, k, v, qw, kw = make_inputs(secret_generator, 6, 64 * 8, 16 * 8)
    inputs = (q * 0.05, k * 0.05, v, qw, kw)
    _, _, problems = _run_sim(subject, device, None, 6, 64 * 8, 16 * 8, tp, dtype, inputs=inputs, eps=1e-2)
    assert not problems, f"tp_world={tp}, epsilon 1e-2: {problems}"


# MiniMax-M2's full widths sharded over 2 ranks: 3072 q channels a rank, more than one Triton block of 2048, so a
# statistics kernel that reads one block a row (no loop) is wrong only here.
@pytest.mark.criterion("c3")
@pytest.mark.cases(eps="default-eps", width="wide", precision="fp32", tp="2")
def test_tp_variance_aggregation_wide_rows(subject, device, secret_generator):
    """Sharded forward_qkv on rows wider than one block a rank equals full-width RMSNorm."""
    _, _, problems = _run_sim(subject, device, secret_generator, 2, 6144, 2048, 2, torch.float32)
    assert not problems, f"tp_world=2, q 6144 / kv 2048: {problems}"


# A decode step (one token), an odd count and a prefill-sized batch at tp > 1: a path chosen by the token count
# (local statistics for a one-token batch, another kernel for a large one) is wrong only there.
C3_TOKEN_COUNTS = [pytest.param(1, 2, id="t1_tp2", marks=pytest.mark.cases(tokens="1", tp="2")),
                   pytest.param(1, 4, id="t1_tp4", marks=pytest.mark.cases(tokens="1", tp="4")),
                   pytest.param(1, 8, id="t1_tp8", marks=pytest.mark.cases(tokens="1", tp="8")),
                   pytest.param(7, 4, id="t7_tp4", marks=pytest.mark.cases(tokens="odd", tp="4")),
                   pytest.param(320, 2, id="t320_tp2", marks=pytest.mark.cases(tokens="large", tp="2"))]


@pytest.mark.criterion("c3")
@pytest.mark.cases(eps="default-eps", width="narrow", magnitude="unit", evidence="values")
@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("count,world", C3_TOKEN_COUNTS)
def test_tp_variance_aggregation_token_counts(subject, device, secret_generator, dtype, count, world):
    """Sharded forward_qkv of a one-token, odd or prefill-sized batch equals full-width RMSNorm."""
    _, _, problems = _run_sim(subject, device, secret_generator, count, 32 * world, 8 * world, world, dtype)
    assert not problems, f"tp_world={world}, {count} token(s): {problems}"


# vLLM's all-reduce sends a 2-D tensor through FlashInfer's fused all-reduce where that is enabled, whose workspace
# is made for the model's 16-bit activations; fp32 statistics reduced there are corrupted on such GPUs. The base
# therefore reduces a flattened (1-D) view of its statistics. The fake group of the simulation sums any tensor, so
# the form of each all-reduce input is judged here.
@pytest.mark.criterion("c3")
@pytest.mark.cases(eps="default-eps", width="narrow", evidence="reduce-form")
@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("tp", [2, 4, 8], ids=lambda t: f"tp{t}")
def test_statistics_all_reduced_as_one_dimension(subject, device, secret_generator, dtype, tp):
    """Every all-reduce forward_qkv issues at tp_world > 1 is of a tensor that is not 2-D (the base's flat view)."""
    obs, _, _ = _run_sim(subject, device, secret_generator, 3, 32 * tp, 8 * tp, tp, dtype)
    forms = obs.get("reduce_inputs")
    assert forms, f"tp_world={tp}: no all-reduce input was recorded"
    two_d = sorted({f"{tuple(shape)} {dt}" for shape, dt in forms if len(shape) == 2})
    assert not two_d, (f"tp_world={tp}: 2-D all-reduce inputs {two_d} take FlashInfer's fused all-reduce, whose "
                       f"workspace is for 16-bit activations")


@pytest.mark.gpu
@pytest.mark.criterion("c3")
@pytest.mark.cases(eps="default-eps", width="wide", precision="bf16")
@pytest.mark.parametrize("tp", [2, 4, 8], ids=lambda t: f"tp{t}")
def test_tp_variance_aggregation_bf16_gpu(subject, device, secret_generator, tp):
    """bf16 sharded forward_qkv (MiniMax-M2 full widths) equals full-width fp32 RMSNorm on the GPU."""
    _, _, problems = _run_sim(subject, device, secret_generator, 33, 6144, 1024, tp, torch.bfloat16)
    assert not problems, f"tp_world={tp}: {problems}"


# --------------------------------------------------------------------------------------------- c4


# Each at a batch of several tokens and at a one-token (decode) batch.
C4_TOKENS = (4, 1)


def _tp1_problems(subject, device, gen: torch.Generator, dtype) -> list[str]:
    wrong = []
    for tokens in C4_TOKENS:
        obs, _, problems = _run_sim(subject, device, gen, tokens, 128, 32, 1, dtype)
        calls = [] if obs["total_calls"] == 0 else [f"all-reduce called {obs['total_calls']} time(s) at tp_world=1"]
        wrong += [f"{tokens} token(s): {p}" for p in calls + problems]
    return wrong


def _tp_gt1_problems(subject, device, gen: torch.Generator, tp: int) -> list[str]:
    # MiniMax-M2 proportions (q:kv = 6:1) scaled down, fp16 activations.
    wrong = []
    for tokens in C4_TOKENS:
        obs, _, problems = _run_sim(subject, device, gen, tokens, 48 * 8, 8 * 8, tp, torch.float16)
        calls = obs["calls_per_rank"]
        missing = [r for r in range(tp) if r >= len(calls) or calls[r] == 0]
        found = [f"ranks {missing} made no all-reduce call"] if missing else []
        wrong += [f"tp_world={tp}, {tokens} token(s): {p}" for p in found + problems]
    return wrong


@pytest.mark.criterion("c4")
@pytest.mark.cases(tp="1", tokens=["1", "several"])
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_tp1_skips_all_reduce(subject, device, secret_generator, dtype):
    """With tp_world 1 forward_qkv calls no all-reduce and still normalizes correctly."""
    problems = _tp1_problems(subject, device, secret_generator, dtype)
    assert not problems, problems


@pytest.mark.criterion("c4", weight=2 / 3)
@pytest.mark.cases(precision="fp16", tokens=["1", "several"])
@pytest.mark.parametrize("tp", [2, 4, 8], ids=lambda t: f"tp{t}")
def test_tp_gt1_handled(subject, device, secret_generator, tp):
    """With tp_world > 1 every rank all-reduces its statistics and the gathered result is correct."""
    problems = _tp_gt1_problems(subject, device, secret_generator, tp)
    assert not problems, problems


# c4 names tp_world 1, 2, 4 and 8. With the per-case checks alone one tp > 1 failing entirely kept c4 at
# (2 + 4/3)/4 = 0.83, met. This test asks for all four at once, weight 1: one of 2, 4, 8 failing entirely gives
# 3.33/5 = 0.67, tp 1 failing 2/5 = 0.4, and wrong-tp-scaling (every tp > 1 wrong) stays partial at 2/5 = 0.4.
# The same on the GPU (no GPU-only c4 check).
@pytest.mark.criterion("c4", weight=1.0)
@pytest.mark.cases(tp=["1", "2", "4", "8"], precision=["fp32", "fp16"], tokens=["1", "several"])
def test_every_tp_world_handled(subject, device, secret_generator):
    """tp_world 1 issues no all-reduce, and 2, 4 and 8 all-reduce on every rank, all with correct results."""
    wrong = [p for dtype in (torch.float32, torch.float16)
             for p in _tp1_problems(subject, device, secret_generator, dtype)]
    wrong += [p for tp in (2, 4, 8) for p in _tp_gt1_problems(subject, device, secret_generator, tp)]
    assert not wrong, f"{len(wrong)} problem(s): " + "; ".join(wrong)


# --------------------------------------------------------------------------------------------- c5

# Two give the norms epsilon 1e-2 on small activations (scale 0.05), where a path that ignores the norm's own
# epsilon, or scales it by 1/tp_world, is wrong; the last two scale fp16 activations by 200, whose mean squares
# exceed fp16's range (statistics kept in the activation dtype overflow).
FALLBACK_CASES = [
    {"name": "tp1_fp32", "tokens": 5, "q": 96, "kv": 32, "tp": 1, "dtype": torch.float32},
    {"name": "tp2_fp32", "tokens": 5, "q": 128, "kv": 32, "tp": 2, "dtype": torch.float32},
    {"name": "tp4_fp16", "tokens": 4, "q": 256, "kv": 64, "tp": 4, "dtype": torch.float16},
    {"name": "tp8_fp32", "tokens": 3, "q": 384, "kv": 64, "tp": 8, "dtype": torch.float32},
    {"name": "tp1_fp32_eps1e-2", "tokens": 4, "q": 96, "kv": 32, "tp": 1, "dtype": torch.float32, "eps": 1e-2},
    {"name": "tp2_fp16_eps1e-2", "tokens": 4, "q": 128, "kv": 32, "tp": 2, "dtype": torch.float16, "eps": 1e-2},
    {"name": "tp1_fp16_x200", "tokens": 3, "q": 96, "kv": 32, "tp": 1, "dtype": torch.float16, "scale": 200.0},
    {"name": "tp4_fp16_x200", "tokens": 3, "q": 256, "kv": 64, "tp": 4, "dtype": torch.float16, "scale": 200.0},
    # A decode batch (one token) and an empty one at tp > 1: a path may branch on the batch size.
    {"name": "tp2_fp16_t1", "tokens": 1, "q": 128, "kv": 32, "tp": 2, "dtype": torch.float16},
    {"name": "tp8_fp32_t1", "tokens": 1, "q": 384, "kv": 64, "tp": 8, "dtype": torch.float32},
    {"name": "tp4_fp32_t0", "tokens": 0, "q": 256, "kv": 64, "tp": 4, "dtype": torch.float32},
]


def _fallback_marks(c: dict):
    precision = {torch.float32: "fp32", torch.float16: "fp16"}[c["dtype"]]
    return pytest.mark.cases(tp=str(c["tp"]), precision=precision, eps="own-eps" if "eps" in c else "default-eps",
                             magnitude="large-values" if "scale" in c else "unit",
                             tokens={0: "0", 1: "1"}.get(c["tokens"], "several"))


@pytest.fixture(scope="module")
def fallback_results(subject_on, device):
    """One run of the no-Triton probe over every case, in a subject on the rubric's ``without-triton`` platform;
    the inputs stay here for the oracle."""
    gen = _module_generator("fallback")
    inputs, cases = {}, []
    for c in FALLBACK_CASES:
        q, k, v, qw, kw = make_inputs(gen, c["tokens"], c["q"], c["kv"])
        scale = c.get("scale", 0.05 if "eps" in c else 1.0)
        inputs[c["name"]] = _cast((q * scale, k * scale, v, qw, kw), c["dtype"])
        cases.append({"name": c["name"], **shard(inputs[c["name"]], c["tp"], c.get("eps", EPS))})
    report = subject_on("without-triton").call("qknorm_fallback.run", cases=cases, device=device, timeout=300)
    return {"report": report, "inputs": inputs}


def _fallback_problems(fallback_results, case: str) -> list[str]:
    """What is wrong with one no-Triton case (raises AssertionError for what fails every case alike)."""
    report = fallback_results["report"]
    assert isinstance(report, dict), f"the no-Triton probe answered {type(report).__name__}, not its report"
    assert not report.get("env_error"), "vLLM does not import with Triton unavailable:\n" + report["env_error"]
    # Triton is blocked on that platform before anything imports; a tree that still says it has Triton there is
    # not running its no-Triton path (only the judge may decide a skip).
    assert report.get("has_triton") is False, (
        f"vllm.triton_utils.HAS_TRITON is {report.get('has_triton')!r} with Triton unimportable")
    assert not report.get("import_error"), (
        "rms_norm_tp does not import without Triton:\n" + report["import_error"]
    )
    obs = (report.get("cases") or {}).get(case)
    if obs is None:
        return ["case not run"]
    if "raised" in obs:
        return ["raised: " + str(obs["raised"])]
    spec = next(c for c in FALLBACK_CASES if c["name"] == case)
    return check_observations(obs, fallback_results["inputs"][case], spec["tp"], spec["dtype"], TOL[spec["dtype"]],
                              spec.get("eps", EPS))


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("case", [pytest.param(c["name"], marks=_fallback_marks(c)) for c in FALLBACK_CASES])
def test_fallback_without_triton(fallback_results, case):
    """With Triton unimportable (and no fused all-reduce op) forward_qkv still gives the RMSNorm results."""
    problems = _fallback_problems(fallback_results, case)
    assert not problems, problems


# c5 names tp_world 1, 2, 4 and 8: with one check per tp, one tp failing entirely left c5 at 3/4 = 0.75, met. This
# test asks for all four at once (the same no-Triton run), weight 1: one tp failing gives 3/5 = 0.6, on CPU and GPU.
@pytest.mark.criterion("c5", weight=1.0)
@pytest.mark.cases(tp=["1", "2", "4", "8"], precision=["fp32", "fp16"], eps=["default-eps", "own-eps"],
                   magnitude=["unit", "large-values"], tokens=["0", "1", "several"])
def test_fallback_without_triton_at_every_tp(fallback_results):
    """Without Triton forward_qkv gives the RMSNorm results at tp_world 1, 2, 4 and 8 alike, not just some."""
    wrong = []
    for c in FALLBACK_CASES:
        wrong += [f"{c['name']}: {p}" for p in _fallback_problems(fallback_results, c["name"])]
    assert not wrong, f"{len(wrong)} problem(s): " + "; ".join(wrong)
