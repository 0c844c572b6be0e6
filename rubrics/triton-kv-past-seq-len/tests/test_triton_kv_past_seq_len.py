"""Hidden tests for triton-kv-past-seq-len: the Triton paged-attention kernels must not read KV past seq_len.

Every batch is drawn here with ``secret_generator``; the cache slots that hold no written key (the tail of each
sequence's last block, stale block-table entries, spare blocks) are filled here with NaN or an infinity (a kernel
that loads one of them into the output cannot hide it: its softmax weight is 0, and 0 * NaN is NaN) or with loud
finite garbage (a kernel that attends to one of them moves its output). The subject runs the candidate's
launchers on them (``probes/triton_kv_past_seq_len_probes.py``); the fp32 oracle is computed here
(``attn_cases.attention_oracle``).

Shapes: 4 query heads over 2 KV heads (BLOCK_M 16, so a query block holds 8 query positions), head size 32 (40,
padded to 64, where a check names it),
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
# What a read criterion's check judges: the outputs against the oracle, and the loads the interpreter recorded per
# kernel program (plus the caches and other inputs as the call left them).
READS = ["outputs", "loads"]


def _judge(launches, expected, labels, *, reads: bool, outputs: bool = True) -> None:
    """Where ``outputs``, every launch's output matches its oracle and, where ``reads``, it loaded no unwritten
    slot of the caches it was given, no kernel program of it loaded another sequence's slots, it left the caches,
    block table, lengths and queries as they were, and it read the caches rather than a copy; the failures are
    listed together."""
    failures = []
    for launch, want, label in zip(launches, expected, labels):
        why = cases.mismatch(launch.output, want, launch.batch.dtype, launch.device) if outputs else None
        if why is not None:
            failures.append(f"{label}: {why}")
        if reads:
            failures.extend(f"{label}: {problem}" for problem in launch.read_problems())
    assert not failures, "; ".join(failures)


# --- c1: non-causal unified attention stops at seq_len ---------------------------------------------------------

# Non-causal batches (cross-attention over an encoder's keys, bidirectional decoders). Every sequence has at most
# BLOCK_Q queries, so its single query block's causal-style bound lies past seq_len: the base's loop bound
# max(bound, seq_len) reaches into the unwritten tail. Lengths cover one key (a block of 15 unwritten slots), a
# tail inside the tile, a sequence ending at a block edge (16) and at a tile edge (32), where the over-read
# starts a block or tile of its own, and a long one (150) that spans several split-KV segments.
NON_CAUSAL_PREFILL = ([5, 1, 8, 1], [21, 13, 32, 1])
NON_CAUSAL_DECODE = ([1, 1, 1, 1, 1, 1], [20, 45, 1, 32, 16, 150])
SEQ_LENS = ["1", "ragged", "block-aligned", "tile-aligned", "150"]


@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence=READS, launch="2d-prefill", dtype="fp32", seq_len=["1", "ragged", "tile-aligned"],
                   query_blocks="one", feature="plain", head_size="32", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", POISON_IDS)
def test_non_causal_prefill_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """Non-causal unified attention (2D launch) is exact with NaN/inf past seq_len and loads none of those slots."""
    batch = cases.make_batch(secret_generator, *NON_CAUSAL_PREFILL)
    got = attention.unified(batch, device, POISONS[poison], secret_generator, causal=False)
    _judge([got], [cases.attention_oracle(batch, causal=False)], [f"non-causal prefill, unwritten = {poison}"],
           reads=True)


@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence=READS, launch="3d-decode", dtype="fp32", seq_len=SEQ_LENS, query_blocks="one",
                   feature="plain", head_size="32", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", POISON_IDS)
def test_non_causal_split_kv_decode_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """Non-causal decode through the split-KV (3D) launch is exact with NaN/inf past seq_len and loads none."""
    batch = cases.make_batch(secret_generator, *NON_CAUSAL_DECODE)
    got = attention.unified(batch, device, POISONS[poison], secret_generator, causal=False, segments=4)
    _judge([got], [cases.attention_oracle(batch, causal=False)], [f"non-causal 3D decode, unwritten = {poison}"],
           reads=True)


@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence=READS, launch=["2d-decode", "2d-prefill", "3d-decode"], dtype=["fp32", "fp16"],
                   seq_len=SEQ_LENS, poison="mixed", query_blocks="one", feature="plain", head_size="32",
                   kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_decode_2d_and_fp16_ignore_unwritten_slots(attention, secret_generator, device):
    """Non-causal decode through the 2D launch in fp32, and 2D prefill, 2D decode and 3D decode in fp16 (other
    tile sizes), stay exact with NaN/inf past seq_len and load none of those slots."""
    fp32 = cases.make_batch(secret_generator, *NON_CAUSAL_DECODE)
    fp16_prefill = cases.make_batch(secret_generator, *NON_CAUSAL_PREFILL, dtype=torch.float16)
    fp16_decode = cases.make_batch(secret_generator, *NON_CAUSAL_DECODE, dtype=torch.float16)
    runs = [(fp32, "mixed", {"causal": False}), (fp16_prefill, "mixed", {"causal": False}),
            (fp16_decode, "mixed", {"causal": False}), (fp16_decode, "mixed", {"causal": False, "segments": 4})]
    got = attention.unified_many(runs, device, secret_generator)
    _judge(got, [cases.attention_oracle(b, causal=False) for b, _, _ in runs],
           ["fp32 2D decode", "fp16 2D prefill", "fp16 2D decode", "fp16 3D decode"], reads=True)


@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence="loads", launch="2d-prefill", dtype="fp32", seq_len=["ragged", "1"], poison="mixed",
                   query_blocks="several", feature=["sliding-window", "softcap"], head_size="32", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_long_prefill_loads_nothing_past_seq_len(attention, secret_generator, device):
    """Non-causal prefills longer than one query block (every query block, not only the last), also with a
    sliding window and softcap, load no slot past seq_len and give finite outputs with NaN/inf there. Which keys
    early query blocks attend to is c4's, so only finiteness and loads are judged here. (The base kernel's
    non-causal sliding window zeroes V by the query block's first position, not per query, so its windowed
    outputs are not those of a per-query window; that is outside this task.)"""
    gen = secret_generator
    long = cases.make_batch(gen, [30, 9, 17, 1], [33, 50, 17, 1])
    windowed = cases.make_batch(gen, *NON_CAUSAL_PREFILL)
    runs = [(long, "mixed", {"causal": False}), (windowed, "mixed", {"causal": False, "window": 6, "softcap": 3.0})]
    got = attention.unified_many(runs, device, gen)
    failures = [f"{label}: {problem}" for launch, label in zip(got, ["30/9/17/1 queries", "sliding window 6"])
                for problem in launch.read_problems()]
    failures += [f"{label}: {int((~torch.isfinite(launch.output)).sum())} output values are not finite"
                 for launch, label in zip(got, ["30/9/17/1 queries", "sliding window 6"])
                 if not bool(torch.isfinite(launch.output).all())]
    assert not failures, "; ".join(failures)


# A head size the unified kernel pads (40 to 64): its K and V loads must keep the head-dimension mask beside any
# bound at seq_len. Without it the padded lanes of a slot's last KV head address the next slot, which past seq_len
# is unwritten: NaN reaches the scores (the zero-padded query lanes do not cancel it, 0 * NaN is NaN).
@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence=READS, launch=["2d-prefill", "3d-decode"], dtype="fp32",
                   seq_len=["1", "ragged", "block-aligned", "tile-aligned", "150"], poison="mixed", query_blocks="one",
                   feature="plain", head_size="40", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_padded_head_size_ignores_unwritten_slots(attention, secret_generator, device):
    """Non-causal unified attention with head size 40 (padded to 64), 2D prefill and 3D decode, stays exact with
    NaN/inf past seq_len and loads none of those slots."""
    gen = secret_generator
    prefill = cases.make_batch(gen, *NON_CAUSAL_PREFILL, head_size=40)
    decode = cases.make_batch(gen, *NON_CAUSAL_DECODE, head_size=40)
    runs = [(prefill, "mixed", {"causal": False}), (decode, "mixed", {"causal": False, "segments": 4})]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(b, causal=False) for b, _, _ in runs],
           ["head size 40, 2D prefill", "head size 40, 3D decode"], reads=True)


# An int8 cache quantised per token and KV head: each slot's scale sits in a scale cache of its own, loaded with the
# same tile mask as the slot. A bound at seq_len on the K and V loads alone leaves the scale loads reading past it:
# a NaN value scale there multiplies a zero softmax weight, and the row turns NaN.
@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence=READS, launch=["2d-prefill", "3d-decode"], dtype="fp32", seq_len=SEQ_LENS,
                   poison="mixed", query_blocks="one", feature="plain", head_size="32",
                   kv_cache="int8-per-token-head")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_int8_per_token_head_cache_ignores_unwritten_slots(attention, secret_generator, device):
    """Non-causal unified attention over an int8 cache with per-token-head scales (NaN/inf in the scale slots past
    seq_len, random codes in the cache slots), 2D prefill and 3D decode, stays exact and loads no cache or scale
    slot past seq_len."""
    gen = secret_generator
    prefill = cases.make_batch(gen, *NON_CAUSAL_PREFILL, int8_kv=True)
    decode = cases.make_batch(gen, *NON_CAUSAL_DECODE, int8_kv=True)
    runs = [(prefill, "mixed", {"causal": False}), (decode, "mixed", {"causal": False, "segments": 4})]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(b, causal=False) for b, _, _ in runs],
           ["int8 per-token-head cache, 2D prefill", "int8 per-token-head cache, 3D decode"], reads=True)


# Query heads per KV head set the unified kernel's BLOCK_Q (16 // ratio: 16, 8, 5 and 1 query positions per query
# block) and so how far its causal-style bound reaches past seq_len in a decode (15, 7, 5 and 0 slots); head sizes
# 80 (padded to 128) and 128 (not padded) change the tile's head dimension. A bound at seq_len holds at every one.
GQA_SHAPES = {"1": (4, 4), "2": (4, 2), "3": (6, 2), "16": (16, 1)}


@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence=READS, launch=["2d-prefill", "2d-decode", "3d-decode"], dtype="fp32",
                   seq_len=SEQ_LENS, poison="mixed", query_blocks="one", feature="plain",
                   heads_per_kv=["1", "3", "16"], head_size=["80", "128"], kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_gqa_ratios_and_head_sizes_ignore_unwritten_slots(attention, secret_generator, device):
    """Non-causal unified attention with 1, 3 (odd) and 16 query heads per KV head, and head sizes 80 and 128,
    stays exact with NaN/inf past seq_len and loads none of those slots."""
    gen = secret_generator
    runs, labels = [], []
    for ratio in ("1", "3", "16"):
        heads, kv_heads = GQA_SHAPES[ratio]
        prefill = cases.make_batch(gen, *NON_CAUSAL_PREFILL, heads=heads, kv_heads=kv_heads)
        decode = cases.make_batch(gen, *NON_CAUSAL_DECODE, heads=heads, kv_heads=kv_heads)
        runs += [(prefill, "mixed", {"causal": False}), (decode, "mixed", {"causal": False, "segments": 4})]
        labels += [f"{ratio} query heads per KV head, 2D prefill", f"{ratio} query heads per KV head, 3D decode"]
    for head_size in (80, 128):
        prefill = cases.make_batch(gen, *NON_CAUSAL_PREFILL, head_size=head_size)
        decode = cases.make_batch(gen, *NON_CAUSAL_DECODE, head_size=head_size)
        runs += [(prefill, "mixed", {"causal": False}), (decode, "mixed", {"causal": False})]
        labels += [f"head size {head_size}, 2D prefill", f"head size {head_size}, 2D decode"]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(b, causal=False) for b, _, _ in runs], labels, reads=True)


# bf16, vLLM's usual activation dtype. The Triton interpreter's bf16 dot is not an IEEE product (its results are
# off by orders of magnitude, measured with Triton 3.7), so on CPU the bf16 launches are judged by what they read
# and leave behind; a GPU run judges their outputs too.
@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence=READS, launch=["2d-prefill", "2d-decode", "3d-decode"], dtype="bf16",
                   seq_len=SEQ_LENS, poison="mixed", query_blocks="one", feature="plain", heads_per_kv="2",
                   head_size="32", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_bf16_ignores_unwritten_slots(attention, secret_generator, device):
    """Non-causal unified attention in bf16 (2D prefill, 2D decode, 3D decode) loads no slot past seq_len and
    leaves its inputs as they were (and, compiled, is exact)."""
    gen = secret_generator
    prefill = cases.make_batch(gen, *NON_CAUSAL_PREFILL, dtype=torch.bfloat16)
    decode = cases.make_batch(gen, *NON_CAUSAL_DECODE, dtype=torch.bfloat16)
    runs = [(prefill, "mixed", {"causal": False}), (decode, "mixed", {"causal": False}),
            (decode, "mixed", {"causal": False, "segments": 4})]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(b, causal=False) for b, _, _ in runs],
           ["bf16 2D prefill", "bf16 2D decode", "bf16 3D decode"], reads=True, outputs=device == "cuda")


# fp8 caches, per tensor (one K and one V scale, dequantised in the kernel as each tile is loaded) in both fp8
# formats, and per token and KV head (fp8 slots, scales in scale caches loaded with the tile mask). The unwritten
# slots hold the poison as fp8 (NaN in both; e5m2 also holds the infinities) and, per token and KV head, so do
# the unwritten scale slots. A bound that only the unquantised path (or only the slot loads, not the scale loads)
# keeps reads past seq_len here.
@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence=READS, launch=["2d-prefill", "3d-decode"], dtype="fp32", seq_len=SEQ_LENS,
                   poison="mixed", query_blocks="one", feature="plain", head_size="32",
                   kv_cache=["fp8-e4m3", "fp8-e5m2", "fp8-per-token-head"])
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_fp8_cache_ignores_unwritten_slots(attention, secret_generator, device):
    """Non-causal unified attention over fp8 caches (e4m3 and e5m2 with per-tensor scales, e4m3 with per-token-head
    scales), 2D prefill and 3D decode, stays exact with NaN/inf past seq_len and loads no cache or scale slot past
    it."""
    gen = secret_generator
    runs, labels = [], []
    for kv_cache in ("fp8-e4m3", "fp8-e5m2", "fp8-per-token-head"):
        prefill = cases.make_batch(gen, *NON_CAUSAL_PREFILL, fp8_kv=kv_cache)
        decode = cases.make_batch(gen, *NON_CAUSAL_DECODE, fp8_kv=kv_cache)
        runs += [(prefill, "mixed", {"causal": False}), (decode, "mixed", {"causal": False, "segments": 4})]
        labels += [f"{kv_cache} cache, 2D prefill", f"{kv_cache} cache, 3D decode"]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(b, causal=False) for b, _, _ in runs], labels, reads=True)


# Padded batch entries (0 queries over 0 keys, as CUDA-graph padding leaves them at the end of a batch) beside
# real ones, and 1-token decodes over 1 key: the programs of a padded entry load nothing, the others stop at their
# own seq_len.
@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence=READS, launch=["2d-prefill", "2d-decode", "3d-decode"], dtype="fp32",
                   seq_len=["0-padded", "1", "ragged"], poison="mixed", query_blocks="one", feature="plain",
                   head_size="32", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_padded_entries_ignore_unwritten_slots(attention, secret_generator, device):
    """Non-causal unified attention over batches that end in padded entries (0 queries, 0 keys), 2D prefill, 2D
    decode and 3D decode, stays exact and loads no slot past any seq_len."""
    gen = secret_generator
    prefill = cases.make_batch(gen, [5, 1, 0, 0], [21, 1, 0, 0])
    decode = cases.make_batch(gen, [1, 1, 1, 0, 0], [20, 1, 45, 0, 0])
    runs = [(prefill, "mixed", {"causal": False}), (decode, "mixed", {"causal": False}),
            (decode, "mixed", {"causal": False, "segments": 4})]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(b, causal=False) for b, _, _ in runs],
           ["padded 2D prefill", "padded 2D decode", "padded 3D decode"], reads=True)


# Chunked local attention (Gemma3's block-local layers: the window split into chunks, a query seeing its own chunk
# and chunk_lookback before it), non-causal: the tile range starts at a chunk edge, and must still end at seq_len.
@pytest.mark.criterion("c1")
@pytest.mark.cases(evidence="loads", launch=["2d-prefill", "3d-decode"], dtype="fp32", seq_len=SEQ_LENS,
                   poison="mixed", query_blocks=["one", "several"], feature="chunked-local", head_size="32",
                   kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_chunked_local_attention_loads_nothing_past_seq_len(attention, secret_generator, device):
    """Non-causal chunked local attention (window 24 in chunks of 8, one chunk of lookback), 2D prefill (also of
    several query blocks) and 3D decode, loads no slot past seq_len and gives finite outputs with NaN/inf there."""
    gen = secret_generator
    prefill = cases.make_batch(gen, [5, 20, 8, 1], [21, 45, 32, 1])
    decode = cases.make_batch(gen, *NON_CAUSAL_DECODE)
    chunked = {"causal": False, "window": 24, "chunk_lookback": 2}
    runs = [(prefill, "mixed", chunked), (decode, "mixed", {**chunked, "segments": 4})]
    got = attention.unified_many(runs, device, gen)
    labels = ["chunked local 2D prefill", "chunked local 3D decode"]
    failures = [f"{label}: {problem}" for launch, label in zip(got, labels) for problem in launch.read_problems()]
    failures += [f"{label}: {int((~torch.isfinite(launch.output)).sum())} output values are not finite"
                 for launch, label in zip(got, labels) if not bool(torch.isfinite(launch.output).all())]
    assert not failures, "; ".join(failures)


# --- c2: the paged-decode kernel stops at seq_len --------------------------------------------------------------

PAGED_DECODE = ([1, 1, 1, 1, 1, 1], [20, 45, 7, 33, 1, 150])


@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence=READS, feature="plain", dtype="fp32", block_size="16", seq_len=["1", "ragged", "150"],
                   kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", POISON_IDS)
def test_paged_decode_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """chunked_prefill_paged_decode's kernel is exact with NaN/inf past seq_len and loads none of those slots."""
    batch = cases.make_batch(secret_generator, *PAGED_DECODE)
    got = attention.paged(batch, device, POISONS[poison], secret_generator)
    _judge([got], [cases.attention_oracle(batch)], [f"paged decode, unwritten = {poison}"], reads=True)


@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence=READS, feature=["sliding-window", "alibi", "sinks", "plain"], dtype=["fp32", "fp16"],
                   block_size=["16", "48"], seq_len=["1", "ragged", "block-aligned", "150"], poison="mixed",
                   head_size=["32", "40"], kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_paged_decode_features_ignore_unwritten_slots(attention, secret_generator, device):
    """Paged decode with a sliding window, ALiBi, sinks, fp16, 48-slot blocks or head size 40 (also block-aligned
    lengths) stays exact past seq_len and loads none of those slots."""
    gen = secret_generator
    base = cases.make_batch(gen, *PAGED_DECODE)
    fp16 = cases.make_batch(gen, *PAGED_DECODE, dtype=torch.float16)
    # A block size that is not a power of two: the kernel walks it in tiles of 32 that straddle blocks.
    odd_block = cases.make_batch(gen, [1, 1, 1, 1], [50, 17, 48, 1], block_size=48)
    aligned = cases.make_batch(gen, [1, 1, 1], [16, 32, 64])
    # A head size the kernel pads (40 to 64): the padded dimensions must be masked out of every K and V load.
    odd_head = cases.make_batch(gen, *PAGED_DECODE, head_size=40)
    alibi = torch.rand(cases.HEADS, generator=gen) * 0.5
    sinks = torch.randn(cases.HEADS, generator=gen)
    runs = [(base, "mixed", {"window": 12}), (base, "mixed", {"alibi": alibi}),
            (base, "mixed", {"sinks": sinks}), (fp16, "mixed", {}), (odd_block, "mixed", {}),
            (aligned, "mixed", {}), (odd_head, "mixed", {})]
    got = attention.paged_many(runs, device, gen)
    expected = [cases.attention_oracle(base, window=12), cases.attention_oracle(base, alibi=alibi),
                cases.attention_oracle(base, sinks=sinks), cases.attention_oracle(fp16),
                cases.attention_oracle(odd_block), cases.attention_oracle(aligned), cases.attention_oracle(odd_head)]
    _judge(got, expected, ["sliding window 12", "alibi", "sinks", "fp16", "48-slot blocks", "block-aligned",
                           "head size 40"], reads=True)


@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence=READS, feature="plain", dtype=["fp32", "bf16"], block_size="16",
                   seq_len=["1", "ragged", "150"], poison="mixed", heads_per_kv=["1", "2", "3", "16"],
                   head_size=["80", "128"], kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_paged_decode_gqa_ratios_head_sizes_and_bf16_ignore_unwritten_slots(attention, secret_generator, device):
    """Paged decode with 1, 3 (odd) and 16 query heads per KV head, head sizes 80 and 128, and in bf16 loads no
    slot past seq_len and leaves its inputs as they were; the fp32 launches are exact (the bf16 one too where it
    is compiled: see the bf16 check of c1)."""
    gen = secret_generator
    runs, labels = [], []
    for ratio in ("1", "3", "16"):
        heads, kv_heads = GQA_SHAPES[ratio]
        runs.append((cases.make_batch(gen, *PAGED_DECODE, heads=heads, kv_heads=kv_heads), "mixed", {}))
        labels.append(f"{ratio} query heads per KV head")
    for head_size in (80, 128):
        runs.append((cases.make_batch(gen, *PAGED_DECODE, head_size=head_size), "mixed", {}))
        labels.append(f"head size {head_size}")
    bf16 = cases.make_batch(gen, *PAGED_DECODE, dtype=torch.bfloat16)
    got = attention.paged_many(runs + [(bf16, "mixed", {})], device, gen)
    _judge(got[:-1], [cases.attention_oracle(b) for b, _, _ in runs], labels, reads=True)
    _judge(got[-1:], [cases.attention_oracle(bf16)], ["bf16"], reads=True, outputs=device == "cuda")


# fp8 caches in the three spellings the launcher accepts: "fp8" and "fp8_e4m3" (the platform's e4m3 format) and
# "fp8_e5m2", uint8 storage the launcher views as fp8, per-tensor scales not 1. Unwritten slots hold the poison as
# fp8. The kernel dequantises each loaded tile, so a bound that only the unquantised path keeps reads past seq_len.
@pytest.mark.criterion("c2")
@pytest.mark.cases(evidence=READS, feature="plain", dtype="fp32", block_size="16", seq_len=["1", "ragged", "150"],
                   poison="mixed", head_size="32", heads_per_kv="2", kv_cache=["fp8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("device", DEVICES)
def test_paged_decode_fp8_cache_ignores_unwritten_slots(attention, secret_generator, device):
    """Paged decode over fp8 caches named "fp8", "fp8_e4m3" and "fp8_e5m2" stays exact with NaN/inf past seq_len
    and loads none of those slots."""
    gen = secret_generator
    runs = [(cases.make_batch(gen, *PAGED_DECODE, fp8_kv="fp8-e4m3"), "mixed", {"kv_cache_dtype": "fp8"}),
            (cases.make_batch(gen, *PAGED_DECODE, fp8_kv="fp8-e4m3"), "mixed", {"kv_cache_dtype": "fp8_e4m3"}),
            (cases.make_batch(gen, *PAGED_DECODE, fp8_kv="fp8-e5m2"), "mixed", {"kv_cache_dtype": "fp8_e5m2"})]
    got = attention.paged_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(b) for b, _, _ in runs],
           ["fp8 cache", "fp8_e4m3 cache", "fp8_e5m2 cache"], reads=True)


# --- c3: prefix-LM and mixed causal batches stop at seq_len ---------------------------------------------------

MM_BATCH = ([1, 6, 1], [23, 30, 1])
MM_RANGES = [[(2, 9)], [(10, 20), (24, 27)], []]
MIXED_BATCH = ([3, 1, 7, 1], [19, 26, 40, 1])
MIXED_CAUSAL = [True, False, True, False]


@pytest.mark.criterion("c3")
@pytest.mark.cases(evidence=READS, mode="mm-prefix", launch="2d-prefill", head_size="32", kv_cache="plain",
                   range_end="inside")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", POISON_IDS)
def test_mm_prefix_batch_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """Unified attention with bidirectional multimodal ranges (PrefixLM) is exact with NaN/inf past seq_len and
    loads none of those slots."""
    batch = cases.make_batch(secret_generator, *MM_BATCH)
    got = attention.unified(batch, device, POISONS[poison], secret_generator, mm_ranges=MM_RANGES)
    _judge([got], [cases.attention_oracle(batch, mm_ranges=MM_RANGES)],
           [f"mm_prefix ranges {MM_RANGES}, unwritten = {poison}"], reads=True)


@pytest.mark.criterion("c3")
@pytest.mark.cases(evidence=READS, mode="per-sequence-causal", launch="2d-prefill", head_size="32", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poison", POISON_IDS)
def test_per_sequence_causal_batch_ignores_unwritten_slots(attention, secret_generator, device, poison):
    """A batch mixing causal and non-causal sequences (per-sequence flags) is exact with NaN/inf past seq_len and
    loads none of those slots."""
    batch = cases.make_batch(secret_generator, *MIXED_BATCH)
    got = attention.unified(batch, device, POISONS[poison], secret_generator, causal=MIXED_CAUSAL)
    _judge([got], [cases.attention_oracle(batch, causal=MIXED_CAUSAL)],
           [f"per-sequence causal {MIXED_CAUSAL}, unwritten = {poison}"], reads=True)


@pytest.mark.criterion("c3")
@pytest.mark.cases(evidence=READS, mode=["mm-prefix", "per-sequence-causal"], launch="3d-decode", poison="mixed",
                   head_size="32", kv_cache="plain", range_end="inside")
@pytest.mark.parametrize("device", DEVICES)
def test_split_kv_decode_with_ranges_or_flags_ignores_unwritten_slots(attention, secret_generator, device):
    """Decode batches with multimodal ranges, and with per-sequence causal flags, through the split-KV (3D) launch
    are exact with NaN/inf past seq_len and load none of those slots."""
    gen = secret_generator
    ranged = cases.make_batch(gen, [1, 1, 1, 1], [23, 40, 9, 1])
    ranges = [[(3, 12)], [(0, 30)], [], []]
    flagged = cases.make_batch(gen, [1, 1, 1, 1], [20, 45, 32, 1])
    flags = [False, True, False, True]
    runs = [(ranged, "mixed", {"mm_ranges": ranges, "segments": 4}),
            (flagged, "mixed", {"causal": flags, "segments": 4})]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(ranged, mm_ranges=ranges), cases.attention_oracle(flagged, causal=flags)],
           [f"3D decode, ranges {ranges}", f"3D decode, per-sequence causal {flags}"], reads=True)


@pytest.mark.criterion("c3")
@pytest.mark.cases(evidence=READS, mode=["mm-prefix", "per-sequence-causal"], launch="2d-prefill", poison="mixed",
                   head_size="40", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_ranges_and_flags_with_padded_head_size_ignore_unwritten_slots(attention, secret_generator, device):
    """PrefixLM and per-sequence-causal batches with head size 40 (padded to 64) stay exact with NaN/inf past
    seq_len and load none of those slots."""
    gen = secret_generator
    ranged = cases.make_batch(gen, *MM_BATCH, head_size=40)
    flagged = cases.make_batch(gen, *MIXED_BATCH, head_size=40)
    runs = [(ranged, "mixed", {"mm_ranges": MM_RANGES}), (flagged, "mixed", {"causal": MIXED_CAUSAL})]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(ranged, mm_ranges=MM_RANGES), cases.attention_oracle(flagged,
                                                                                          causal=MIXED_CAUSAL)],
           ["head size 40, mm_prefix ranges", "head size 40, per-sequence causal"], reads=True)


@pytest.mark.criterion("c3")
@pytest.mark.cases(evidence=READS, mode=["mm-prefix", "per-sequence-causal"], launch="2d-prefill", poison="mixed",
                   head_size="32", kv_cache="int8-per-token-head")
@pytest.mark.parametrize("device", DEVICES)
def test_ranges_and_flags_with_int8_cache_ignore_unwritten_slots(attention, secret_generator, device):
    """PrefixLM and per-sequence-causal batches over an int8 cache with per-token-head scales stay exact with
    NaN/inf in the scale slots past seq_len and load no cache or scale slot past it."""
    gen = secret_generator
    ranged = cases.make_batch(gen, *MM_BATCH, int8_kv=True)
    flagged = cases.make_batch(gen, *MIXED_BATCH, int8_kv=True)
    runs = [(ranged, "mixed", {"mm_ranges": MM_RANGES}), (flagged, "mixed", {"causal": MIXED_CAUSAL})]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(ranged, mm_ranges=MM_RANGES),
                 cases.attention_oracle(flagged, causal=MIXED_CAUSAL)],
           ["int8 cache, mm_prefix ranges", "int8 cache, per-sequence causal"], reads=True)


# A multimodal range reaching past seq_len: vLLM passes an image's whole placeholder range while chunked prefill has
# computed only part of it. The kernel's score mask ORs the range in without a bound at seq_len, so a fix that bounds
# its loads by the score mask (rather than by seq_len) loads the range's unwritten slots. Which keys such a range
# attends past seq_len is the base's mask, outside this task's two places (a slot nothing loads scores 0 there,
# not -inf, in the reference and upstream alike): these launches are judged by their loads, side effects and
# finiteness.
@pytest.mark.criterion("c3")
@pytest.mark.cases(evidence="loads", mode="mm-prefix", launch=["2d-prefill", "3d-decode"], poison="mixed",
                   head_size="32", kv_cache=["plain", "int8-per-token-head"], range_end="past-seq-len")
@pytest.mark.parametrize("device", DEVICES)
def test_mm_prefix_range_past_seq_len_loads_nothing_past_it(attention, secret_generator, device):
    """PrefixLM batches whose ranges end past seq_len (2D prefill, 3D decode, an int8 per-token-head cache) load no
    slot past seq_len, leave their inputs as they were and give finite outputs with NaN/inf there."""
    gen = secret_generator
    prefill = cases.make_batch(gen, [6, 1, 3, 1], [23, 30, 13, 1])
    ranges = [[(10, 30)], [(25, 40)], [(0, 20)], [(0, 5)]]
    decode = cases.make_batch(gen, [1, 1, 1], [23, 30, 13])
    int8 = cases.make_batch(gen, [6, 1, 3, 1], [23, 30, 13, 1], int8_kv=True)
    runs = [(prefill, "mixed", {"mm_ranges": ranges}), (decode, "mixed", {"mm_ranges": ranges[:3], "segments": 4}),
            (int8, "mixed", {"mm_ranges": ranges})]
    labels = [f"ranges {ranges}, 2D prefill", f"ranges {ranges[:3]}, 3D decode", f"ranges {ranges}, int8 cache"]
    got = attention.unified_many(runs, device, gen)
    failures = [f"{label}: {problem}" for launch, label in zip(got, labels) for problem in launch.read_problems()]
    failures += [f"{label}: {int((~torch.isfinite(launch.output)).sum())} output values are not finite"
                 for launch, label in zip(got, labels) if not bool(torch.isfinite(launch.output).all())]
    assert not failures, "; ".join(failures)


# --- c4: full-range modes still see the whole sequence (conditional on c1) ------------------------------------

# Sequences with more than BLOCK_Q queries: the first query blocks' causal-style bound lies far before seq_len,
# so a kernel that bounds their reads by it drops keys they must attend to. Unwritten slots hold finite garbage:
# this criterion judges what is attended, not what is read.


@pytest.mark.criterion("c4")
@pytest.mark.cases(mode="non-causal", launch="2d-prefill")
@pytest.mark.parametrize("device", DEVICES)
def test_non_causal_long_queries_attend_every_key(attention, secret_generator, device):
    """Non-causal queries of every query block attend to all seq_len keys, not only those a causal mask allows."""
    batch = cases.make_batch(secret_generator, [30, 9, 17], [33, 50, 17])
    got = attention.unified(batch, device, "garbage", secret_generator, causal=False)
    _judge([got], [cases.attention_oracle(batch, causal=False)], ["non-causal, 30/9/17 queries"], reads=False)


@pytest.mark.criterion("c4")
@pytest.mark.cases(mode="mm-prefix", launch="2d-prefill")
@pytest.mark.parametrize("device", DEVICES)
def test_mm_prefix_range_ahead_of_queries_is_attended(attention, secret_generator, device):
    """Prefill queries inside a multimodal range attend to the range's keys ahead of them, to its end."""
    batch = cases.make_batch(secret_generator, [40, 12], [40, 30])
    ranges = [[(0, 35)], [(20, 29)]]
    got = attention.unified(batch, device, "garbage", secret_generator, mm_ranges=ranges)
    _judge([got], [cases.attention_oracle(batch, mm_ranges=ranges)], [f"mm ranges {ranges}"], reads=False)


@pytest.mark.criterion("c4")
@pytest.mark.cases(mode="per-sequence-non-causal", launch="2d-prefill")
@pytest.mark.parametrize("device", DEVICES)
def test_per_sequence_non_causal_long_queries_attend_every_key(attention, secret_generator, device):
    """In a mixed batch, a non-causal sequence's long prefill attends to all of its keys; causal ones stay causal."""
    batch = cases.make_batch(secret_generator, [24, 20, 3], [24, 37, 21])
    flags = [False, False, True]
    got = attention.unified(batch, device, "garbage", secret_generator, causal=flags)
    _judge([got], [cases.attention_oracle(batch, causal=flags)], [f"per-sequence causal {flags}"], reads=False)


# --- c5: causal attention and the paged decode's other behaviour unchanged -------------------------------------


@pytest.mark.criterion("c5")
@pytest.mark.cases(site=["unified-2d", "unified-3d"], feature=["plain", "sliding-window", "softcap", "sinks"],
                   head_size="32", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_causal_unified_attention_unchanged(attention, secret_generator, device):
    """Causal unified attention (2D prefill+decode, 3D decode, sliding window with softcap, sinks) matches the
    oracle and, as the base, loads nothing past seq_len."""
    gen = secret_generator
    prefill_mix = cases.make_batch(gen, [12, 1, 20, 5, 1], [40, 17, 20, 29, 1])
    decode = cases.make_batch(gen, [1, 1, 1, 1], [33, 16, 70, 1])
    sinks = torch.randn(cases.HEADS, generator=gen)
    runs = [(prefill_mix, "mixed", {}), (decode, "mixed", {"segments": 4}),
            (prefill_mix, "garbage", {"window": 9, "softcap": 2.0}),
            (decode, "garbage", {"sinks": sinks, "segments": 4})]
    got = attention.unified_many(runs, device, gen)
    expected = [cases.attention_oracle(prefill_mix), cases.attention_oracle(decode),
                cases.attention_oracle(prefill_mix, window=9, softcap=2.0), cases.attention_oracle(decode, sinks=sinks)]
    labels = ["2D, NaN/inf past seq_len", "3D decode, NaN/inf past seq_len", "sliding window 9 with softcap 2",
              "3D decode with sinks"]
    _judge(got, expected, labels, reads=True)


@pytest.mark.criterion("c5")
@pytest.mark.cases(site=["unified-2d", "unified-3d"], feature="plain", head_size="40", kv_cache="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_causal_unified_attention_padded_head_size_unchanged(attention, secret_generator, device):
    """Causal unified attention with head size 40 (padded to 64), 2D prefill+decode and 3D decode, matches the
    oracle and, as the base, loads nothing past seq_len."""
    gen = secret_generator
    prefill_mix = cases.make_batch(gen, [12, 1, 20, 1], [40, 17, 20, 1], head_size=40)
    decode = cases.make_batch(gen, [1, 1, 1], [33, 16, 1], head_size=40)
    runs = [(prefill_mix, "mixed", {}), (decode, "mixed", {"segments": 4})]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(prefill_mix), cases.attention_oracle(decode)],
           ["head size 40, 2D", "head size 40, 3D decode"], reads=True)


@pytest.mark.criterion("c5")
@pytest.mark.cases(site=["unified-2d", "unified-3d"], feature="plain", kv_cache="int8-per-token-head")
@pytest.mark.parametrize("device", DEVICES)
def test_causal_unified_attention_int8_cache_unchanged(attention, secret_generator, device):
    """Causal unified attention over an int8 cache with per-token-head scales (NaN/inf in the scale slots past
    seq_len), 2D prefill+decode and 3D decode, matches the oracle and, as the base, loads nothing past seq_len."""
    gen = secret_generator
    prefill_mix = cases.make_batch(gen, [12, 1, 20, 1], [40, 17, 20, 1], int8_kv=True)
    decode = cases.make_batch(gen, [1, 1, 1], [33, 16, 1], int8_kv=True)
    runs = [(prefill_mix, "mixed", {}), (decode, "mixed", {"segments": 4})]
    got = attention.unified_many(runs, device, gen)
    _judge(got, [cases.attention_oracle(prefill_mix), cases.attention_oracle(decode)],
           ["int8 cache, 2D", "int8 cache, 3D decode"], reads=True)


@pytest.mark.criterion("c5")
@pytest.mark.cases(site="diffkv", feature="plain")
@pytest.mark.parametrize("device", DEVICES)
def test_diffkv_causal_attention_unchanged(attention, secret_generator, device):
    """unified_attention_diffkv, the other kernel that takes its tile bounds from the shared helper, still runs
    causal prefill+decode and decode batches exactly and loads nothing past seq_len."""
    gen = secret_generator
    prefill_mix = cases.make_batch(gen, [12, 1, 5, 1], [40, 17, 29, 1])
    decode = cases.make_batch(gen, [1, 1, 1], [33, 16, 7])
    got = attention.diffkv_many([(prefill_mix, "mixed"), (decode, "mixed")], device, gen)
    _judge(got, [cases.attention_oracle(prefill_mix), cases.attention_oracle(decode)],
           ["diffkv prefill+decode", "diffkv decode"], reads=True)


@pytest.mark.criterion("c5")
@pytest.mark.cases(site="paged-decode", feature=["plain", "sliding-window", "alibi", "sinks", "48-slot-blocks"])
@pytest.mark.parametrize("device", DEVICES)
def test_paged_decode_unchanged(attention, secret_generator, device):
    """Paged decode still matches the oracle: block-aligned lengths, GQA, sliding window, ALiBi, sinks, 48-slot
    blocks."""
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
    _judge(got, expected, labels, reads=False)


MODULES = ["vllm.v1.attention.ops.triton_attention_helpers", "vllm.v1.attention.ops.triton_unified_attention",
           "vllm.v1.attention.ops.triton_unified_attention_diffkv",
           "vllm.v1.attention.ops.chunked_prefill_paged_decode"]


@pytest.mark.criterion("c5")
@pytest.mark.cases(site="public-names")
@pytest.mark.parametrize("module", MODULES)
def test_module_keeps_its_public_names(subject, base_subject, module):
    """The attention modules still import and keep every public name the base defines."""
    before = set(base_subject.call(f"{PROBES}.public_names", module=module))
    after = set(subject.call(f"{PROBES}.public_names", module=module))
    assert before <= after, f"public names gone from {module}: {sorted(before - after)}"

