"""Hidden tests for triton-kv-past-seq-len: the Triton paged-attention kernels must not read KV past seq_len.

Every batch is drawn here with ``secret_generator``; the cache slots that hold no written key (the tail of each
sequence's last block, stale block-table entries, spare blocks) are filled here with NaN or an infinity (a kernel
that loads one of them into the output cannot hide it: its softmax weight is 0, and 0 * NaN is NaN) or with loud
finite garbage (a kernel that attends to one of them moves its output). The subject runs the candidate's
launchers on them (``probes/triton_kv_past_seq_len_probes.py``); the fp32 oracle is computed here
(``attn_cases.attention_oracle``).

Shapes: 4 query heads over 2 KV heads (BLOCK_M 16, so a query block holds 8 query positions), head size 32,
blocks of 16 slots; the unified kernel's 2D launch reads tiles of 32 keys, its 3D launch tiles of 16.
"""

from __future__ import annotations

import pytest
import torch

from rubric_support import load_beside

cases = load_beside(__file__, "attn_cases")
DEVICES, POISONS, POISON_IDS = cases.DEVICES, cases.POISONS, cases.POISON_IDS
PROBES = "triton_kv_past_seq_len_probes"
BLOCK_Q = 8  # query positions per query block of the unified kernel at these shapes


def _check(got, want, dtype, device, what: str) -> None:
    why = cases.mismatch(got, want, dtype, device)
    assert why is None, f"{what}: {why}"


def _check_all(outputs, expected, labels, dtype, device) -> None:
    """Every labelled output matches its oracle; the failures are listed together."""
    failures = [f"{label}: {why}" for got, want, label in zip(outputs, expected, labels)
                if (why := cases.mismatch(got, want, dtype, device)) is not None]
    assert not failures, "; ".join(failures)


# --- c1: non-causal unified attention stops at seq_len ---------------------------------------------------------

# Non-causal batches (cross-attention over an encoder's keys, bidirectional decoders). Every sequence has at most
# BLOCK_Q queries, so its single query block's causal-style bound lies past seq_len: the base's loop bound
# max(bound, seq_len) reaches into the unwritten tail. Lengths cover a tail inside the tile and a sequence that
# ends exactly at a tile edge (32), where the over-read starts a tile of its own.
NON_CAUSAL_PREFILL = ([5, 1, 8], [21, 13, 32])
NON_CAUSAL_DECODE = ([1, 1, 1, 1], [20, 45, 7, 32])


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", POISON_IDS)
def test_non_causal_prefill_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """Non-causal unified attention (2D launch) gives finite, exact outputs when unwritten KV slots hold NaN/inf."""
    batch = cases.make_batch(secret_generator, *NON_CAUSAL_PREFILL)
    got = attention.unified(batch, device, POISONS[poison], secret_generator, causal=False)
    _check(got, cases.attention_oracle(batch, causal=False), batch.dtype, device,
           f"non-causal prefill, unwritten slots = {poison}")


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", POISON_IDS)
def test_non_causal_split_kv_decode_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """Non-causal decode through the split-KV (3D) launch is finite and exact with NaN/inf past seq_len."""
    batch = cases.make_batch(secret_generator, *NON_CAUSAL_DECODE)
    got = attention.unified(batch, device, POISONS[poison], secret_generator, causal=False, segments=4)
    _check(got, cases.attention_oracle(batch, causal=False), batch.dtype, device,
           f"non-causal 3D decode, unwritten slots = {poison}")


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_decode_2d_and_fp16_ignore_unwritten_slots(attention, secret_generator, device):
    """Non-causal decode through the 2D launch, in fp32 and in fp16, stays finite and exact with NaN/inf past seq_len."""
    fp32 = cases.make_batch(secret_generator, *NON_CAUSAL_DECODE)
    fp16 = cases.make_batch(secret_generator, *NON_CAUSAL_PREFILL, dtype=torch.float16)
    got = attention.unified_many([(fp32, "mixed", {"causal": False}),
                                  (fp16, "mixed", {"causal": False})], device, secret_generator)
    _check(got[0], cases.attention_oracle(fp32, causal=False), fp32.dtype, device, "fp32 non-causal 2D decode")
    _check(got[1], cases.attention_oracle(fp16, causal=False), fp16.dtype, device, "fp16 non-causal prefill")


# --- c2: the paged-decode kernel stops at seq_len --------------------------------------------------------------

PAGED_DECODE = ([1, 1, 1, 1], [20, 45, 7, 33])


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", POISON_IDS)
def test_paged_decode_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """chunked_prefill_paged_decode's Triton kernel is finite and exact when the last block's tail holds NaN/inf."""
    batch = cases.make_batch(secret_generator, *PAGED_DECODE)
    got = attention.paged(batch, device, POISONS[poison], secret_generator)
    _check(got, cases.attention_oracle(batch), batch.dtype, device, f"paged decode, unwritten slots = {poison}")


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("device", DEVICES)
def test_paged_decode_features_ignore_unwritten_slots(attention, secret_generator, device):
    """Paged decode with a sliding window, ALiBi, sinks, fp16, or a 48-slot block stays finite past seq_len."""
    gen = secret_generator
    base = cases.make_batch(gen, *PAGED_DECODE)
    fp16 = cases.make_batch(gen, *PAGED_DECODE, dtype=torch.float16)
    # A block size that is not a power of two: the kernel walks it in tiles of 32 that straddle blocks.
    odd_block = cases.make_batch(gen, [1, 1, 1], [50, 17, 40], block_size=48)
    alibi = torch.rand(cases.HEADS, generator=gen) * 0.5
    sinks = torch.randn(cases.HEADS, generator=gen)
    runs = [(base, "mixed", {"window": 12}), (base, "mixed", {"alibi": alibi}),
            (base, "mixed", {"sinks": sinks}), (fp16, "mixed", {}), (odd_block, "mixed", {})]
    got = attention.paged_many(runs, device, gen)
    expected = [cases.attention_oracle(base, window=12), cases.attention_oracle(base, alibi=alibi),
                cases.attention_oracle(base, sinks=sinks), cases.attention_oracle(fp16),
                cases.attention_oracle(odd_block)]
    labels = ["sliding window 12", "alibi", "sinks", "fp16", "48-slot blocks"]
    failures = [f"{label}: {why}" for g, w, label, (b, _, _) in zip(got, expected, labels, runs)
                if (why := cases.mismatch(g, w, b.dtype, device)) is not None]
    assert not failures, "; ".join(failures)


# --- c3: prefix-LM and mixed causal batches stop at seq_len ---------------------------------------------------

MM_BATCH = ([1, 6], [23, 30])
MM_RANGES = [[(2, 9)], [(10, 20), (24, 27)]]
MIXED_BATCH = ([3, 1, 7], [19, 26, 40])
MIXED_CAUSAL = [True, False, True]


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", ["nan", "mixed"])
def test_mm_prefix_batch_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """Unified attention with bidirectional multimodal ranges (PrefixLM) is finite and exact with NaN/inf past seq_len."""
    batch = cases.make_batch(secret_generator, *MM_BATCH)
    got = attention.unified(batch, device, POISONS[poison], secret_generator, mm_ranges=MM_RANGES)
    _check(got, cases.attention_oracle(batch, mm_ranges=MM_RANGES), batch.dtype, device,
           f"mm_prefix ranges {MM_RANGES}, unwritten slots = {poison}")


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", ["nan", "mixed"])
def test_per_sequence_causal_batch_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """A batch mixing causal and non-causal sequences (per-sequence flags) is finite and exact with NaN/inf past seq_len."""
    batch = cases.make_batch(secret_generator, *MIXED_BATCH)
    got = attention.unified(batch, device, POISONS[poison], secret_generator, causal=MIXED_CAUSAL)
    _check(got, cases.attention_oracle(batch, causal=MIXED_CAUSAL), batch.dtype, device,
           f"per-sequence causal {MIXED_CAUSAL}, unwritten slots = {poison}")


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("device", DEVICES)
def test_mm_prefix_split_kv_decode_ignores_unwritten_slots(attention, secret_generator, device):
    """A decode batch with multimodal ranges through the split-KV (3D) launch is finite and exact with NaN/inf past seq_len."""
    batch = cases.make_batch(secret_generator, [1, 1, 1], [23, 40, 9])
    ranges = [[(3, 12)], [(0, 30)], []]
    got = attention.unified(batch, device, "mixed", secret_generator, mm_ranges=ranges, segments=4)
    _check(got, cases.attention_oracle(batch, mm_ranges=ranges), batch.dtype, device, f"3D decode, ranges {ranges}")


# --- c4: full-range modes still see the whole sequence (conditional on c1) ------------------------------------

# Sequences with more than BLOCK_Q queries: the first query blocks' causal-style bound lies far before seq_len,
# so a kernel that bounds their reads by it drops keys they must attend to. Unwritten slots hold finite garbage:
# this criterion judges what is attended, not what is read.


@pytest.mark.criterion("c4", weight=2)
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_long_queries_attend_every_key(attention, secret_generator, device):
    """Non-causal queries of every query block attend to all seq_len keys, not only those a causal mask allows."""
    batch = cases.make_batch(secret_generator, [30, 9, 17], [33, 50, 17])
    got = attention.unified(batch, device, "garbage", secret_generator, causal=False)
    _check(got, cases.attention_oracle(batch, causal=False), batch.dtype, device, "non-causal, 30/9/17 queries")


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("device", DEVICES)
def test_mm_prefix_range_ahead_of_queries_is_attended(attention, secret_generator, device):
    """Prefill queries inside a multimodal range attend to the range's keys ahead of them, to its end."""
    batch = cases.make_batch(secret_generator, [40, 12], [40, 30])
    ranges = [[(0, 35)], [(20, 29)]]
    got = attention.unified(batch, device, "garbage", secret_generator, mm_ranges=ranges)
    _check(got, cases.attention_oracle(batch, mm_ranges=ranges), batch.dtype, device, f"mm ranges {ranges}")


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("device", DEVICES)
def test_per_sequence_non_causal_long_queries_attend_every_key(attention, secret_generator, device):
    """In a mixed batch, a non-causal sequence's long prefill attends to all of its keys; causal ones stay causal."""
    batch = cases.make_batch(secret_generator, [24, 20, 3], [24, 37, 21])
    flags = [False, False, True]
    got = attention.unified(batch, device, "garbage", secret_generator, causal=flags)
    _check(got, cases.attention_oracle(batch, causal=flags), batch.dtype, device, f"per-sequence causal {flags}")


# --- c5: causal attention and the paged decode's other behaviour unchanged -------------------------------------


@pytest.mark.criterion("c5", weight=2)
@pytest.mark.parametrize("device", DEVICES)
def test_causal_unified_attention_unchanged(attention, secret_generator, device):
    """Causal unified attention (2D prefill+decode, 3D decode, sliding window with softcap, sinks) matches the oracle."""
    gen = secret_generator
    prefill_mix = cases.make_batch(gen, [12, 1, 20, 5], [40, 17, 20, 29])
    decode = cases.make_batch(gen, [1, 1, 1], [33, 16, 70])
    sinks = torch.randn(cases.HEADS, generator=gen)
    runs = [(prefill_mix, "mixed", {}), (decode, "mixed", {"segments": 4}),
            (prefill_mix, "garbage", {"window": 9, "softcap": 2.0}),
            (decode, "garbage", {"sinks": sinks, "segments": 4})]
    got = attention.unified_many(runs, device, gen)
    expected = [cases.attention_oracle(prefill_mix), cases.attention_oracle(decode),
                cases.attention_oracle(prefill_mix, window=9, softcap=2.0), cases.attention_oracle(decode, sinks=sinks)]
    labels = ["2D, NaN/inf past seq_len", "3D decode, NaN/inf past seq_len", "sliding window 9 with softcap 2",
              "3D decode with sinks"]
    _check_all(got, expected, labels, prefill_mix.dtype, device)


@pytest.mark.criterion("c5", weight=2)
@pytest.mark.parametrize("device", DEVICES)
def test_paged_decode_unchanged(attention, secret_generator, device):
    """Paged decode still matches the oracle: block-aligned lengths, GQA, sliding window, ALiBi, sinks, 48-slot blocks."""
    gen = secret_generator
    aligned = cases.make_batch(gen, [1, 1, 1], [16, 32, 64])
    ragged = cases.make_batch(gen, [1, 1, 1, 1], [20, 45, 7, 33])
    odd_block = cases.make_batch(gen, [1, 1], [96, 49], block_size=48)
    alibi = torch.rand(cases.HEADS, generator=gen) * 0.5
    sinks = torch.randn(cases.HEADS, generator=gen)
    runs = [(aligned, float("nan"), {}), (ragged, "garbage", {}), (ragged, "garbage", {"window": 10}),
            (ragged, "garbage", {"alibi": alibi}), (ragged, "garbage", {"sinks": sinks}),
            (odd_block, "garbage", {})]
    got = attention.paged_many(runs, device, gen)
    expected = [cases.attention_oracle(aligned), cases.attention_oracle(ragged),
                cases.attention_oracle(ragged, window=10), cases.attention_oracle(ragged, alibi=alibi),
                cases.attention_oracle(ragged, sinks=sinks), cases.attention_oracle(odd_block)]
    labels = ["block-aligned, NaN in spare blocks", "ragged", "sliding window 10", "alibi", "sinks", "48-slot blocks"]
    _check_all(got, expected, labels, torch.float32, device)


MODULES = ["vllm.v1.attention.ops.triton_attention_helpers", "vllm.v1.attention.ops.triton_unified_attention"]


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("module", MODULES)
def test_module_keeps_its_public_names(subject, base_subject, module):
    """The attention modules still import and keep every public name the base defines."""
    before = set(base_subject.call(f"{PROBES}.public_names", module=module))
    after = set(subject.call(f"{PROBES}.public_names", module=module))
    assert before <= after, f"public names gone from {module}: {sorted(before - after)}"
