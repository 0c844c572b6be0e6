"""Hidden tests for moe-swap-ab: what the kernel READS, not only what it writes.

The sorted token list is padded per expert to a multiple of BLOCK_M with the value num_valid_tokens (M x top_k), so a
padded slot points at token row M: the row just past A. Only the token mask keeps the A load off it. Outputs cannot
show a load that ignores the mask (each output row depends on its own token row only, and the store is masked), so
these tests record every address the Triton interpreter loads (``probes/moe_swap_read_probes.py``) with A handed over
as the first rows of a larger buffer, and fail a launch that reads the rows after A or anything outside the launch's
own tensors. The swapped path (c1: masks swapped to match the swapped pointers) and every other launch (c5: the
original dot(a, b) path) are checked; every verdict is decided here.
"""

from __future__ import annotations

import pytest

from rubric_support import skip_unless_interpretable

READ_PROBE = "moe_swap_read_probes.launch_reads"
GUARD_ROWS = 4
# What a launch may read besides its own tensors: nothing. These two names are the probe's for the rest.
FORBIDDEN = ("A guard rows", "outside every argument")

# c1: launches that take the swapped path (FP8 w8a8, BLOCK_M < 64): block, per-tensor and per-channel scales,
# ragged and aligned N and K, bias and routing, BLOCK_M 16 and 32; each has padded slots in the sorted token list.
SWAPPED_CASES = ("block_n_ragged", "block_nk_ragged_bias", "block_unrouted_bias_m1", "block_m24_e8",
                 "tensor_nk_ragged_bias", "channel_nk_ragged")


def _interpreted_launch(h, s):
    """The judge's launch of scenario ``s`` as the read probe takes it: A as the first rows of a buffer followed by
    GUARD_ROWS rows of NaN; FP8 operands as float32 tensors with the same values (the interpreter computes tl.dot
    in numpy and mishandles float8 tensors; the FP8 code path, its masks and pointers, runs on them unchanged)."""
    import torch

    fp8 = s[0].startswith("fp8")  # FP8 launches compute in float32 here; the others in their own dtype
    launch, _ = h.launch_of(s, generator=h.judge_generator("reads:" + h.key_of(s)), out_dtype="fp32" if fp8 else None)
    launch = dict(launch)
    for name in ("A", "B"):
        if launch[name].dtype == torch.float8_e4m3fn:
            launch[name] = launch[name].float()
    a = launch["A"]
    buffer = torch.full((a.shape[0] + GUARD_ROWS, *a.shape[1:]), float("nan")).to(a.dtype)
    buffer[: a.shape[0]] = a
    launch["A"] = buffer
    return launch, a.shape[0]


def _padded_slots(launch, a_rows: int) -> int:
    return int((launch["sorted_token_ids"] >= a_rows * launch["top_k"]).sum())


def _read_errors(h, subject, s, cap) -> str | None:
    """Run scenario ``s`` under capability ``cap`` through the interpreter, recording its loads. The failure, or
    None."""
    launch, a_rows = _interpreted_launch(h, s)
    assert _padded_slots(launch, a_rows), f"{h.key_of(s)}: no padded slot in the sorted token list (test set-up)"
    seen = subject.call(READ_PROBE, launch=launch, cap=list(cap), a_rows=a_rows)
    reads = seen["reads"]
    bad = {k: reads[k] for k in FORBIDDEN if reads.get(k)}
    if not bad:
        return None
    return (f"{h.key_of(s)} on SM{tuple(cap)} reads {bad} elements beyond the launch's tensors (A has {a_rows} "
            f"rows; padded slots of the sorted token list point at row {a_rows}, which the token mask must keep "
            f"out of the A load)")


@pytest.mark.variant
@pytest.mark.criterion("c1")
@pytest.mark.cases(part="masks swapped to match")
@pytest.mark.parametrize("case", SWAPPED_CASES)
def test_swapped_path_reads_only_its_operands(h, subject, case):
    """Under the launch that selects the swapped path, the kernel's loads (recorded by the Triton interpreter) touch no token row past A, nor anything outside the launch's tensors: the token mask moved with the swapped A pointers."""
    skip_unless_interpretable()
    s = h.C3_CASES[case]
    cap = h.swap_capability(subject, s) or (9, 0)
    err = _read_errors(h, subject, s, cap)
    assert err is None, err


# The other launches: every CUDA one of c5 (their kernel is the original dot(a, b) path). ROCm and XPU launches are
# the SM80 launch's kernel with the same arguments (c5's launch tests check that), so they run nothing new here.
C5_READ_CASES = {
    "bf16_sm90": dict(dtype="bf16", launch="other dtype", capability="sm90"),
    "fp16_sm90": dict(dtype="fp16", launch="other dtype", capability="sm90"),
    "int8_w8a8_block_sm90": dict(dtype="int8 w8a8", launch="other dtype", capability="sm90"),
    "int8_w8a8_channel_sm90": dict(dtype="int8 w8a8", launch="other dtype", capability="sm90"),
    "int8_w8a16_sm90": dict(dtype="int8 w8a16", launch="other dtype", capability="sm90"),
    "fp8_block_large_m_sm90": dict(dtype="fp8", launch="large M", capability="sm90"),
    "fp8_tensor_large_m_sm90": dict(dtype="fp8", launch="large M", capability="sm90"),
    "fp8_block_sm80": dict(dtype="fp8", launch="other GPU", capability="sm80"),
    "fp8_channel_sm89": dict(dtype="fp8", launch="other GPU", capability="sm89"),
    "fp8_block_sm100": dict(dtype="fp8", launch="other GPU", capability="sm100"),
    "fp8_block_sm120": dict(dtype="fp8", launch="other GPU", capability="sm120"),
}


@pytest.mark.variant
@pytest.mark.criterion("c5")
@pytest.mark.parametrize("case", [pytest.param(name, id=name, marks=pytest.mark.cases(
    site="dot(a, b) path", platform="cuda", **axes)) for name, axes in sorted(C5_READ_CASES.items())])
def test_original_path_reads_only_its_operands(h, subject, case):
    """A launch outside the FP8 / small-M / SM90 target runs the original dot(a, b) path, whose loads (recorded by the Triton interpreter) touch no token row past A, nor anything outside the launch's tensors."""
    skip_unless_interpretable()
    s, cap = h.C5_CASES[case]
    err = _read_errors(h, subject, s, cap)
    assert err is None, err
