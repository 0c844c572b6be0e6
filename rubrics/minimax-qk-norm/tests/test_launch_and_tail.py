"""Hidden tests for minimax-qk-norm: the row widths where a blocked kernel's last block is a single element, and
the launch options a kernel asks of the GPU.

A kernel that walks a row in blocks of a power of two (capped, as Triton needs a compile-time block) has a partial
last block on every width that is not a multiple of the block; a loop bound off by one drops that block only when
it holds one element (widths 1 and one past a multiple of the block, e.g. 2049 with blocks of 2048). These widths
are narrow/wide rows of c2 and c3 like any other, so they are checked as such.

Under the Triton interpreter (CPU grading) launch options such as ``num_warps`` are dropped, so a launch that the
GPU backend refuses (a warp count that is not a positive power of two) still runs here. The probe records the
options each launch asks for; this module decides, as the GPU's backend would, whether they can launch.
"""

from __future__ import annotations

import pytest
import torch

from rubric_support import load_beside

# The oracle, input drawing, sharding and simulation driver of the task's main test module (loaded by path, as
# task folders are not packages); its ``device`` fixture is this module's too.
qk = load_beside(__file__, "test_minimax_qk_norm")
device = qk.device
CPU_DTYPES = qk.CPU_DTYPES


def _last_channel_heavy(inputs, tp: int):
    """The inputs with the last q and k channel of every rank's shard set to at least 20 in magnitude (the drawn
    sign kept): that channel then dominates its row's mean square and output, so a kernel that skips it is wrong
    by far more than the tolerance whatever the draw."""
    q, k, v, qw, kw = (t.clone() for t in inputs)
    for x in (q, k):
        last = x[:, x.shape[1] // tp - 1::x.shape[1] // tp]
        x[:, x.shape[1] // tp - 1::x.shape[1] // tp] = torch.where(last >= 0, 1.0, -1.0) * (20 + last.abs())
    return q, k, v, qw, kw


def _sim_problems(subject, device, gen, tokens, q_full, kv_full, tp, dtype) -> list[str]:
    """Draw full-width inputs (their shards' last channels heavy), run forward_qkv on ``tp`` simulated ranks in the
    subject, check them here."""
    drawn = _last_channel_heavy(qk.make_inputs(gen, tokens, q_full, kv_full), tp)
    inputs = tuple(t.to(dtype) for t in drawn)
    obs = subject.call("qknorm_probes.simulate", device=device, **qk.shard(inputs, tp))
    return qk.check_observations(obs, inputs, tp, dtype, qk.TOL[dtype])

# Per-rank (q, kv) widths whose last block, with blocks of min(next_pow2(width), 2048), holds one element; and one
# just below a block boundary, so a bound that overshoots by a block is covered too.
ONE_PAST_A_BLOCK_TP1 = [
    pytest.param(2049, 4097, id="q2049_kv4097", marks=pytest.mark.cases(shape=["wide", "non-pow2"])),
    pytest.param(4095, 2049, id="q4095_kv2049", marks=pytest.mark.cases(shape=["wide", "non-pow2"])),
    pytest.param(3, 1, id="q3_kv1", marks=pytest.mark.cases(shape=["narrow", "non-pow2"])),
]


@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence="values", tp="1")
@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("q_size,kv_size", ONE_PAST_A_BLOCK_TP1)
def test_rows_with_a_one_element_last_block(subject, device, secret_generator, dtype, q_size, kv_size):
    """forward_qkv (tp_world 1) equals fp32 RMSNorm on rows whose last block holds a single element."""
    problems = _sim_problems(subject, device, secret_generator, 2, q_size, kv_size, 1, dtype)
    assert not problems, f"q {q_size} / kv {kv_size}: {problems}"


@pytest.mark.criterion("c3")
@pytest.mark.cases(eps="default-eps", width="wide", tp="2")
@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_tp_rows_with_a_one_element_last_block(subject, device, secret_generator, dtype):
    """Sharded over 2 ranks, rows of 2049 q and 2049 kv channels a rank (a one-element last block) give the
    full-width RMSNorm."""
    problems = _sim_problems(subject, device, secret_generator, 2, 2 * 2049, 2 * 2049, 2, dtype)
    assert not problems, f"tp_world=2, q 2049 / kv 2049 a rank: {problems}"


# Per-rank (q, kv) widths from the narrowest to MiniMax-M2's at TP1, so every block size a width-derived launch
# option can come from is launched; at tp 1 (one launch) and tp 2 (statistics and apply launches).
LAUNCH_WIDTHS = [(8, 8), (64, 32), (96, 32), (256, 64), (768, 128), (3072, 512), (6144, 1024)]


def _refused_by_gpu_backend(launch: dict) -> list[str]:
    """The options of one launch that Triton's GPU backend refuses: a warp or CTA count that is not a positive
    power of two, a negative stage count."""
    wrong = []
    for option in ("num_warps", "num_ctas"):
        value = launch.get(option)
        if value is not None and (not isinstance(value, int) or value <= 0 or value & (value - 1)):
            wrong.append(f"{launch['kernel']}: {option}={value}")
    stages = launch.get("num_stages")
    if stages is not None and (not isinstance(stages, int) or stages < 0):
        wrong.append(f"{launch['kernel']}: num_stages={stages}")
    return wrong


@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence="values", precision="fp32", shape=["narrow", "non-pow2", "wide"], tp=["1", "2"])
@pytest.mark.parametrize("tp", [1, 2], ids=lambda t: f"tp{t}")
def test_kernel_launches_the_gpu_accepts(subject, device, secret_generator, tp):
    """Every kernel forward_qkv launches, at every row width from 8 to 6144 channels a rank, asks for launch
    options the GPU backend accepts (else the narrow or wide rows give no values on the GPU). Only the options are
    judged here: the values at tp > 1 are c3's."""
    wrong = []
    for q_size, kv_size in LAUNCH_WIDTHS:
        inputs = qk.make_inputs(secret_generator, 1, q_size * tp, kv_size * tp)
        obs = subject.call("qknorm_launches.simulate_launches", device=device, **qk.shard(inputs, tp))
        # Each rank (and, at tp > 1, each of the simulation's two phases) launches the same kernels: one line each.
        refused = list(dict.fromkeys(p for launch in obs["launches"] for p in _refused_by_gpu_backend(launch)))
        wrong += [f"q {q_size} / kv {kv_size} a rank: {p}" for p in refused]
    assert not wrong, f"{len(wrong)} problem(s): " + "; ".join(wrong[:6])


# CUDA grids allow 2**31 - 1 programs on axis 0 and 65535 on axes 1 and 2; the interpreter allows any grid. A
# prefill batch can hold more than 65535 tokens, so a kernel whose grid puts the token count on axis 1 or 2 runs
# here and fails to launch on the GPU. The probe records the grids and runs no kernel, so a batch of that size
# costs nothing here.
GRID_LIMITS = (2**31 - 1, 65535, 65535)
MORE_TOKENS_THAN_A_GRID_AXIS = 70001


@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence="values", precision="fp32", shape="narrow", tokens="large", tp=["1", "2"])
@pytest.mark.parametrize("tp", [1, 2], ids=lambda t: f"tp{t}")
def test_grids_fit_the_gpu_for_large_batches(subject, device, tp):
    """Every kernel forward_qkv launches for a batch of 70001 tokens has a grid the GPU can launch (else that
    batch gives no values on the GPU)."""
    tokens = MORE_TOKENS_THAN_A_GRID_AXIS
    qkv = [torch.zeros(tokens, 64 + 2 * 32) for _ in range(tp)]
    weights = [torch.ones(64) for _ in range(tp)], [torch.ones(32) for _ in range(tp)]
    obs = subject.call("qknorm_launches.launch_grids", device=device, qkv=qkv, q_weight=weights[0],
                       k_weight=weights[1], q_size=64, kv_size=32, eps=qk.EPS, timeout=300)
    wrong = list(dict.fromkeys(
        f"{launch['kernel']}: grid {tuple(launch['grid'])}" for launch in obs["launches"]
        if any(d > limit for d, limit in zip(launch["grid"], GRID_LIMITS))))
    assert not wrong, f"{tokens} tokens at tp_world={tp}: grids past the GPU's limits {GRID_LIMITS}: " + "; ".join(wrong)
