"""Hidden tests for minimax-qk-norm: forward_qkv reads nothing outside the tensors it is given.

A blocked kernel whose loads lose their mask (or keep it on the store only) reads up to a block past the end of a
row; the lanes it reads there are dropped by a masked store or multiplied away, so no output shows it, but on the
GPU such a read faults at the end of an allocation or reads another row's data. Here each rank's qkv and weights
lie between poisoned guard elements and the probe (``qknorm_reads``) records, under the Triton interpreter, every
element the kernels load in and around them; this module decides: no read before or past a tensor, and with a
one-token qkv (the tensor is the row) none past the row. The outputs are checked against fp32 RMSNorm on the same
run, so a path with no kernel (whose torch ops read in bounds by construction) is still judged by its values
beside poisoned memory. Off the interpreter (GPU runs) the values are the evidence.
"""

from __future__ import annotations

import pytest
import torch

from rubric_support import load_beside

qk = load_beside(__file__, "test_minimax_qk_norm")
device = qk.device

GUARD = 4096  # more than the widest block a kernel of this task launches (2048), on each side
POISON = float("nan")

FP32 = torch.float32
FP16 = torch.float16


def _case(tokens, q, kv, tp, dtype, shape, id):
    """One read case: ``tokens`` rows of ``q``/``kv`` channels a rank on ``tp`` ranks."""
    token_case = {0: "0", 1: "1"}.get(tokens, "large" if tokens > 16 else "odd")
    shapes = [shape] + {0: ["zero-tokens"], 1: ["one-token"]}.get(tokens, [])
    marks = pytest.mark.cases(tokens=token_case, tp=str(tp), shape=shapes,
                              precision={FP32: "fp32", FP16: "fp16"}[dtype])
    return pytest.param(tokens, q, kv, tp, dtype, id=id, marks=marks)


# Per-rank widths: 100/3 (blocks of 128 and 4: the q block overruns the row's 106 channels), 2049/1 (a
# one-element last block of a 2048 block: a block past the row), 96/32 (the k segment's block fits), 3072/512 (wide,
# two blocks); token counts 0, 1, odd and a prefill-sized odd count.
READ_CASES = [
    _case(1, 100, 3, 1, FP32, "non-pow2", "t1_q100_kv3_tp1_fp32"),
    _case(3, 100, 3, 1, FP16, "non-pow2", "t3_q100_kv3_tp1_fp16"),
    _case(67, 100, 3, 1, FP16, "narrow", "t67_q100_kv3_tp1_fp16"),
    _case(1, 2049, 1, 1, FP32, "wide", "t1_q2049_kv1_tp1_fp32"),
    _case(3, 2049, 1, 1, FP16, "wide", "t3_q2049_kv1_tp1_fp16"),
    _case(0, 96, 32, 1, FP32, "narrow", "t0_q96_kv32_tp1_fp32"),
    _case(1, 100, 3, 2, FP16, "non-pow2", "t1_q100_kv3_tp2_fp16"),
    _case(3, 2049, 1, 2, FP32, "wide", "t3_q2049_kv1_tp2_fp32"),
    _case(5, 3072, 512, 2, FP32, "wide", "t5_q3072_kv512_tp2_fp32"),
]


def _outside(offsets: torch.Tensor, numel: int) -> list[int]:
    bad = offsets[(offsets < 0) | (offsets >= numel)]
    return [int(bad.min()), int(bad.max()), bad.numel()] if bad.numel() else []


def read_problems(obs: dict, shards: dict, tokens: int) -> list[str]:
    """Reads the interpreter recorded outside a rank's qkv or weight shard (with one token: outside the row)."""
    if obs.get("reads") is None:
        return []
    problems = []
    for r, reads in enumerate(obs["reads"]):
        for name, offsets in reads.items():
            numel = shards[name][r].numel()
            bad = _outside(offsets, numel)
            if bad:
                where = "row" if name == "qkv" and tokens == 1 else "tensor"
                problems.append(f"rank {r}: read {bad[2]} element(s) of {name} outside its {where} of {numel} "
                                f"(offsets {bad[0]}..{bad[1]})")
    return problems


@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence="reads-in-bounds")
@pytest.mark.parametrize("tokens,q,kv,tp,dtype", READ_CASES)
def test_reads_stay_inside_given_tensors(subject, device, secret_generator, tokens, q, kv, tp, dtype):
    """forward_qkv loads nothing before or past the qkv and weight shards it is given (one token: past the row),
    and its outputs beside poisoned memory are the fp32 RMSNorm."""
    inputs = tuple(t.to(dtype) for t in qk.make_inputs(secret_generator, tokens, q * tp, kv * tp))
    shards = qk.shard(inputs, tp)
    obs = subject.call("qknorm_reads.simulate_reads", device=device, guard=GUARD, poison=POISON, **shards)
    problems = read_problems(obs, shards, tokens)
    # At tp > 1 the values are c3's; here they only show a read of the poison that reaches an output.
    values = qk.check_observations(obs, inputs, tp, dtype, qk.TOL[dtype])
    problems += [p for p in values if tp == 1 or "non-finite" in p]
    assert not problems, f"{len(problems)} problem(s): " + "; ".join(problems)
