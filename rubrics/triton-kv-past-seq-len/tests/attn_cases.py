"""Paged KV caches whose unwritten slots hold poison, and fp32 attention oracles, for the judge.

A batch is a few sequences, each with ``seq_len`` keys and values written to a paged cache and ``q_len`` queries
(the last ``q_len`` positions of the sequence). The cache is laid out in physical blocks shuffled by the judge's
generator; every slot that holds no key of any sequence (the tail of each sequence's last block, the block-table
entries past a sequence's blocks, the spare blocks) is filled with ``fill``: NaN or an infinity where a test
asks that nothing past ``seq_len`` is read, finite garbage where a test asks that nothing past it is attended.

The oracle attends over exactly the written keys, in fp32, with the mask each mode defines; it never looks at
the cache.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import pytest
import torch

# The same test body on both devices: CPU through the Triton interpreter, CUDA natively (marked gpu).
DEVICES = [
    pytest.param("cpu", id="cpu", marks=pytest.mark.variant),
    pytest.param("cuda", id="cuda", marks=[pytest.mark.gpu, pytest.mark.variant]),
]

# What an unwritten slot may hold: freed blocks are never cleared, so any bit pattern, NaN and infinities
# included, can sit past seq_len. 0 * NaN and 0 * inf are NaN, so a masked-out weight does not neutralise them.
# "mixed" draws NaN, +inf or -inf for each unwritten slot.
POISONS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf"), "mixed": "mixed"}
POISON_IDS = list(POISONS)

HEADS, KV_HEADS, HEAD_SIZE = 4, 2, 32
# vLLM's KVQuantMode.INT8_PER_TOKEN_HEAD: int8 cache slots, and one fp32 scale per (slot, KV head) in a scale cache
# of its own for K and for V, read with the same tile mask as the slots.
INT8_PER_TOKEN_HEAD = 2
# vLLM's KVQuantMode.FP8_PER_TENSOR (fp8 slots, one K and one V scale for the whole cache) and FP8_PER_TOKEN_HEAD
# (fp8 slots, a scale per (slot, KV head) in scale caches, as INT8_PER_TOKEN_HEAD).
FP8_PER_TENSOR, FP8_PER_TOKEN_HEAD = 1, 3
# The fp8 caches the checks run: the cache's element dtype, and whether its scales are per tensor or per token
# and KV head. e4m3 has NaN but no infinity (an inf saturates to 448), e5m2 has both.
FP8_CACHES = {"fp8-e4m3": (torch.float8_e4m3fn, False), "fp8-e5m2": (torch.float8_e5m2, False),
              "fp8-per-token-head": (torch.float8_e4m3fn, True)}
# The per-tensor scales of an fp8 cache: not 1, so a kernel that drops or misplaces one moves the output.
FP8_TENSOR_SCALES = (0.375, 0.625)


@dataclass
class Batch:
    """Queries, the written keys and values per sequence (fp32 copies of what the cache holds), and where they
    live in the paged cache."""

    q: torch.Tensor                # [sum(q_lens), heads, head_size], in the kernel's dtype
    keys: list[torch.Tensor]       # per sequence [seq_len, kv_heads, head_size], fp32
    values: list[torch.Tensor]
    q_lens: list[int]
    seq_lens: list[int]
    block_size: int
    block_table: torch.Tensor      # [num_seqs, width] int32: physical block of each logical block
    num_blocks: int
    dtype: torch.dtype
    # The kernels pad the head dimension to a power of two and mask the rest: 40 exercises that mask, 32 does not.
    head_size: int = HEAD_SIZE
    # For an int8 cache quantised per token and KV head: per sequence [seq_len, kv_heads] fp32 scales of the keys
    # and of the values (``keys``/``values`` then hold int8 codes times these); None for a plain cache.
    kv_scales: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
    # Query heads and KV heads: their ratio (query heads per KV head) sets the kernels' BLOCK_Q and GQA indexing.
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    # For an fp8 cache: its element dtype (``keys``/``values`` then hold fp8 codes times their scales), and the
    # per-tensor (K, V) scales where the scales are per tensor (None where they sit in per-token-head scale caches).
    fp8_dtype: torch.dtype | None = None
    tensor_scales: tuple[float, float] | None = None

    @property
    def cu_seqlens_q(self) -> torch.Tensor:
        return torch.tensor([0, *itertools.accumulate(self.q_lens)], dtype=torch.int32)

    @property
    def seq_lens_tensor(self) -> torch.Tensor:
        return torch.tensor(self.seq_lens, dtype=torch.int32)

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_size)


def make_batch(gen: torch.Generator, q_lens: list[int], seq_lens: list[int], *, block_size: int = 16,
               dtype: torch.dtype = torch.float32, spare_blocks: int = 2, extra_columns: int = 2,
               head_size: int = HEAD_SIZE, int8_kv: bool = False, heads: int = HEADS,
               kv_heads: int = KV_HEADS, fp8_kv: str | None = None) -> Batch:
    """Draw queries, keys and values with ``gen`` and place each sequence's blocks at shuffled physical blocks.

    The block table is wider than any sequence needs (``extra_columns``); its unused entries point at spare
    blocks, which hold nothing but ``fill`` (stale blocks of finished requests). ``int8_kv`` draws int8 codes
    and a scale per (position, KV head) for the keys and for the values (an INT8_PER_TOKEN_HEAD cache); ``fp8_kv``
    (a key of ``FP8_CACHES``) draws fp8 codes with per-tensor or per-token-head scales; ``heads`` query heads share
    ``kv_heads`` KV heads. A sequence of 0 queries and 0 keys is a padded batch entry (a CUDA-graph pad)."""
    assert len(q_lens) == len(seq_lens) and all(0 < q <= s or q == s == 0 for q, s in zip(q_lens, seq_lens))
    needed = [math.ceil(s / block_size) for s in seq_lens]
    num_blocks = sum(needed) + spare_blocks
    # Physical block 0 is always a spare: vLLM keeps it as its null block, which no sequence writes, so a kernel
    # that sends lanes past seq_len there meets what is left in it on every draw.
    order = [0] + [1 + b for b in torch.randperm(num_blocks - 1, generator=gen).tolist()]
    spares, order = order[:spare_blocks], order[spare_blocks:]
    width = max(needed) + extra_columns
    table = torch.empty(len(seq_lens), width, dtype=torch.int32)
    for i, n in enumerate(needed):
        mine, order = order[:n], order[n:]
        stale = [spares[(i + c) % spare_blocks] for c in range(width - n)]
        table[i] = torch.tensor(mine + stale, dtype=torch.int32)

    def draw(*shape):
        # Rounded through the kernel's dtype so the fp32 oracle sees exactly what the cache holds.
        return torch.randn(*shape, generator=gen).to(dtype).float()

    def quantised(s):
        codes = torch.randint(-127, 128, (s, kv_heads, head_size), generator=gen).float()
        scales = torch.rand(s, kv_heads, generator=gen) * 0.015 + 0.005
        return codes * scales[..., None], scales

    def draw_fp8(s, fp8_dtype):
        return (torch.randn(s, kv_heads, head_size, generator=gen) * 3.0).to(fp8_dtype).float()

    kv_scales, fp8_dtype, tensor_scales = None, None, None
    if fp8_kv is not None:
        fp8_dtype, per_token_head = FP8_CACHES[fp8_kv]
        if per_token_head:
            per_slot = [[torch.rand(s, kv_heads, generator=gen) * 0.3 + 0.1 for s in seq_lens] for _ in "kv"]
            keys, values = ([draw_fp8(s, fp8_dtype) * sc[..., None] for s, sc in zip(seq_lens, scales)]
                            for scales in per_slot)
            kv_scales = (per_slot[0], per_slot[1])
        else:
            tensor_scales = FP8_TENSOR_SCALES
            keys, values = ([draw_fp8(s, fp8_dtype) * scale for s in seq_lens] for scale in tensor_scales)
    elif int8_kv:
        keys, key_scales = zip(*(quantised(s) for s in seq_lens))
        values, value_scales = zip(*(quantised(s) for s in seq_lens))
        keys, values, kv_scales = list(keys), list(values), (list(key_scales), list(value_scales))
    else:
        keys = [draw(s, kv_heads, head_size) for s in seq_lens]
        values = [draw(s, kv_heads, head_size) for s in seq_lens]
    q = draw(sum(q_lens), heads, head_size).to(dtype)
    return Batch(q, keys, values, list(q_lens), list(seq_lens), block_size, table, num_blocks, dtype, head_size,
                 kv_scales, heads, kv_heads, fp8_dtype, tensor_scales)


def _fill_like(shape, fill, gen: torch.Generator | None) -> torch.Tensor:
    if fill == "garbage":
        # Finite and loud: attending to one of these slots moves the output far beyond any tolerance.
        return torch.randn(*shape, generator=gen) * 6.0 + 3.0
    if fill == "mixed":
        choices = torch.tensor([float("nan"), float("inf"), float("-inf")])
        return choices[torch.randint(0, 3, shape, generator=gen)]
    return torch.full(shape, float(fill))


def _written(batch: Batch, cache: torch.Tensor, per_seq: list[torch.Tensor]) -> torch.Tensor:
    """``cache`` (unified layout, slot in dim 1) with each sequence's rows of ``per_seq`` at its slots."""
    for i, s in enumerate(batch.seq_lens):
        for pos in range(s):
            cache[int(batch.block_table[i, pos // batch.block_size]), pos % batch.block_size] = per_seq[i][pos]
    return cache


def unified_caches(batch: Batch, fill, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Key and value caches in the unified-attention layout [num_blocks, block_size, kv_heads, head_size]. For
    an int8 cache the unwritten slots hold random codes (int8 has no NaN): ``scale_caches`` carries the poison."""
    shape = (batch.num_blocks, batch.block_size, batch.kv_heads, batch.head_size)
    if batch.fp8_dtype is not None:
        # fp8 codes; the unwritten slots hold the poison as fp8 (NaN; an infinity in e5m2, 448 in e4m3).
        return tuple(_written(batch, _fill_like(shape, fill, gen), fp8_codes(batch, per_seq, i)).to(batch.fp8_dtype)
                     for i, per_seq in enumerate((batch.keys, batch.values)))
    if batch.kv_scales is not None:
        caches = []
        for per_seq, scales in zip((batch.keys, batch.values), batch.kv_scales):
            codes = [(x / s[..., None]).round() for x, s in zip(per_seq, scales)]
            garbage = torch.randint(-128, 128, shape, generator=gen).float()
            caches.append(_written(batch, garbage, codes).to(torch.int8))
        return caches[0], caches[1]
    k = _written(batch, _fill_like(shape, fill, gen), batch.keys)
    v = _written(batch, _fill_like(shape, fill, gen), batch.values)
    return k.to(batch.dtype), v.to(batch.dtype)


def fp8_codes(batch: Batch, per_seq: list[torch.Tensor], which: int) -> list[torch.Tensor]:
    """The fp8 codes of an fp8 batch's keys (``which`` 0) or values (1): the fp32 values over their scales."""
    if batch.tensor_scales is not None:
        return [x / batch.tensor_scales[which] for x in per_seq]
    return [x / s[..., None] for x, s in zip(per_seq, batch.kv_scales[which])]


def scale_caches(batch: Batch, fill, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-token-head scale caches of an int8 batch, [num_blocks, block_size, kv_heads] fp32, whose unwritten
    slots hold ``fill`` (a freed scale slot is as uncleared as its cache slot)."""
    shape = (batch.num_blocks, batch.block_size, batch.kv_heads)
    return tuple(_written(batch, _fill_like(shape, fill, gen), scales) for scales in batch.kv_scales)


PAGED_X = 8  # elements per innermost key vector in the paged-decode key layout (16 bytes of fp16)


def paged_caches(batch: Batch, fill, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Key cache [num_blocks, kv_heads, head_size // x, block_size, x] and value cache
    [num_blocks, kv_heads, head_size, block_size], the layouts ``chunked_prefill_paged_decode`` reads."""
    bs, dim = batch.block_size, batch.head_size
    k = _fill_like((batch.num_blocks, batch.kv_heads, dim // PAGED_X, bs, PAGED_X), fill, gen)
    v = _fill_like((batch.num_blocks, batch.kv_heads, dim, bs), fill, gen)
    fp8 = batch.fp8_dtype is not None
    keys = fp8_codes(batch, batch.keys, 0) if fp8 else batch.keys
    values = fp8_codes(batch, batch.values, 1) if fp8 else batch.values
    for i, s in enumerate(batch.seq_lens):
        for pos in range(s):
            block, slot = int(batch.block_table[i, pos // bs]), pos % bs
            k[block, :, :, slot, :] = keys[i][pos].view(batch.kv_heads, dim // PAGED_X, PAGED_X)
            v[block, :, :, slot] = values[i][pos]
    if fp8:
        # The paged-decode launcher takes an fp8 cache as uint8 storage and views it as its kv_cache_dtype says.
        return k.to(batch.fp8_dtype).view(torch.uint8), v.to(batch.fp8_dtype).view(torch.uint8)
    return k.to(batch.dtype), v.to(batch.dtype)


def attention_oracle(batch: Batch, *, causal=True, window: int = 0, mm_ranges=None, softcap: float = 0.0,
                     sinks: torch.Tensor | None = None, alibi: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 attention over each sequence's written keys: [sum(q_lens), heads, head_size].

    ``causal`` is a bool or one bool per sequence. ``window`` > 0 keeps keys with ``q - k < window`` (and, for a
    non-causal sequence, ``k - q < window``). ``mm_ranges`` (per sequence, a list of inclusive ``(start, end)``
    absolute positions) lets queries and keys inside one range see each other whatever the causal mask says.
    ``sinks`` adds one logit per head that takes softmax mass and carries no value. ``alibi`` adds
    ``slope * (k - last position)`` (decode). ``softcap`` > 0 caps scores at ``softcap * tanh(s / softcap)``."""
    per_seq_causal = causal if isinstance(causal, (list, tuple)) else [bool(causal)] * len(batch.seq_lens)
    group = batch.heads // batch.kv_heads
    out, start = [], 0
    for i, (ql, s) in enumerate(zip(batch.q_lens, batch.seq_lens)):
        q = batch.q[start:start + ql].float()                       # [ql, H, D]
        start += ql
        k = batch.keys[i].repeat_interleave(group, dim=1)          # [s, H, D]
        v = batch.values[i].repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * batch.scale  # [H, ql, s]
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        qpos = torch.arange(s - ql, s)[:, None]
        kpos = torch.arange(s)[None, :]
        allowed = (kpos <= qpos) if per_seq_causal[i] else torch.ones(ql, s, dtype=torch.bool)
        if window > 0:
            allowed &= (qpos - kpos) < window
            if not per_seq_causal[i]:
                allowed &= (kpos - qpos) < window
        for a, b in (mm_ranges[i] if mm_ranges else []):
            if a < b:
                allowed |= (qpos >= a) & (qpos <= b) & (kpos >= a) & (kpos <= b)
        if alibi is not None:
            scores = scores + alibi.float()[:, None, None] * (kpos - (s - 1)).float()[None]
        scores = scores.masked_fill(~allowed[None], float("-inf"))
        if sinks is not None:
            scores = torch.cat([scores, sinks.float()[:, None, None].expand(batch.heads, ql, 1)], dim=-1)
        probs = torch.softmax(scores, dim=-1)[..., :s]
        out.append(torch.einsum("hqk,khd->qhd", probs, v))
    return torch.cat(out)


def tolerance(dtype: torch.dtype, device: str) -> dict:
    """Absolute and relative tolerance: fp32 exact up to summation order on CPU, TF32 dots on a GPU, fp16 and bf16
    probabilities and outputs."""
    if dtype == torch.float16:
        return {"atol": 2e-2, "rtol": 2e-2}
    if dtype == torch.bfloat16:
        # 8 significant bits: bf16 probabilities and outputs stay within a few hundredths of the fp32 oracle.
        return {"atol": 4e-2, "rtol": 4e-2}
    return {"atol": 1e-2, "rtol": 1e-2} if device == "cuda" else {"atol": 1e-4, "rtol": 1e-4}


def mismatch(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, device: str) -> str | None:
    """Why ``got`` is not the oracle's output (non-finite entries first), or None when it is."""
    got = got.float()
    bad = ~torch.isfinite(got)
    if bad.any():
        tokens = sorted(set(torch.nonzero(bad)[:, 0].tolist()))
        return (f"{int(bad.sum())} of {got.numel()} output values are not finite (tokens {tokens[:12]}): "
                "a slot past seq_len was read into the output")
    tol = tolerance(dtype, device)
    if not torch.allclose(got, want, **tol):
        err = (got - want).abs()
        token = int(torch.nonzero(err == err.max())[0, 0])
        return (f"output differs from the fp32 reference by up to {float(err.max()):.4g} (token {token}; "
                f"atol {tol['atol']}, rtol {tol['rtol']})")
    return None


# Where a cache layout keeps its slot index: unified [block, slot, kv_head, dim] (per-token-head scale caches
# [block, slot, kv_head]); paged K [block, kv_head, dim // x, slot, x] and paged V [block, kv_head, dim, slot].
SLOT_DIM = {"unified": {"k": 1, "v": 1, "k_scale": 1, "v_scale": 1}, "paged": {"k": 3, "v": 3}}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.uint8),
                                                                      b.contiguous().view(torch.uint8))


@dataclass
class Launch:
    """One launch as the judge sent it and as the subject saw it: the output, the caches and other inputs as the
    call left them, and the cache elements each kernel program loaded (``None`` where kernels do not run through
    the interpreter)."""

    batch: Batch
    device: str
    layout: str                    # "unified" or "paged"
    sent: dict                     # {"k": cache, "v": cache[, "k_scale": ..., "v_scale": ...]} as sent
    output: torch.Tensor
    loads: dict                    # name -> int64 [n, 4]: (program x, y, z, element offset) per loaded element
    caches_after: dict
    inputs_sent: dict              # the block table, lengths and queries as sent
    inputs_after: dict
    # name (a cache or another input) -> whether the call wrote it while it ran, even if it put it back after
    written: dict = field(default_factory=dict)

    def slot_owners(self) -> torch.Tensor:
        """For each slot ``block * block_size + slot`` of the cache, the sequence whose key it holds (position <
        its seq_len), or -1 where no sequence wrote it."""
        bs = self.batch.block_size
        owners = torch.full((self.batch.num_blocks * bs,), -1, dtype=torch.int64)
        for i, s in enumerate(self.batch.seq_lens):
            for p in range(s):
                owners[int(self.batch.block_table[i, p // bs]) * bs + p % bs] = i
        return owners

    def read_problems(self) -> list[str]:
        """What the launch did beyond reading its own written slots: changed a cache or another input it was
        given (or wrote one while it ran and put it back), loaded a slot no sequence wrote (past its seq_len), had
        one kernel program load the slots of two sequences (a slot past its own seq_len that another sequence
        wrote), or loaded nothing of a cache it was given (it read a copy)."""
        problems, owners, bs = [], self.slot_owners(), self.batch.block_size
        for name, sent in self.sent.items():
            if not _same_bits(self.caches_after[name], sent):
                problems.append(f"the call rewrote the caller's {name.upper()} cache (in place)")
            loaded = self.loads.get(name)
            if loaded is None:
                continue
            if loaded.shape[0] == 0:
                problems.append(f"the kernels loaded nothing from the caller's {name.upper()} cache (a copy of it "
                                "was read)")
                continue
            coords = torch.unravel_index(loaded[:, 3], tuple(sent.shape))
            slots = coords[0] * bs + coords[SLOT_DIM[self.layout][name]]
            whose = owners[slots]
            unwritten = sorted(set(slots[whose < 0].tolist()))
            if unwritten:
                where = ", ".join(f"block {s // bs} slot {s % bs}" for s in unwritten[:4])
                problems.append(f"the kernels loaded {len(unwritten)} {name.upper()} cache slots past seq_len "
                                f"({where}{', ...' if len(unwritten) > 4 else ''})")
            problems.extend(self._programs_reading_two_sequences(name, loaded[whose >= 0, :3], whose[whose >= 0]))
        for name, sent in self.inputs_sent.items():
            if not _same_bits(self.inputs_after[name], sent):
                problems.append(f"the call rewrote the caller's {name} (in place)")
        after = {**self.caches_after, **self.inputs_after}
        sent_all = {**self.sent, **self.inputs_sent}
        for name, wrote in sorted(self.written.items()):
            if wrote and name in sent_all and _same_bits(after[name], sent_all[name]):
                shown = name.upper() + " cache" if name in self.sent else name
                problems.append(f"the call wrote the caller's {shown} while it ran and put it back afterwards (a "
                                "whole-tensor fix-up of the caller's memory on every call)")
        return problems

    @staticmethod
    def _programs_reading_two_sequences(name: str, programs: torch.Tensor, whose: torch.Tensor) -> list[str]:
        """A program of these kernels serves one sequence: slots of a second one are slots past its own seq_len,
        whichever sequence happens to hold them."""
        pairs = torch.unique(torch.cat([programs, whose[:, None]], dim=1), dim=0)
        found, counts = torch.unique(pairs[:, :3], dim=0, return_counts=True)
        mixed = found[counts > 1]
        if mixed.shape[0] == 0:
            return []
        first = mixed[0]
        seqs = sorted(pairs[(pairs[:, :3] == first).all(dim=1), 3].tolist())
        return [f"{mixed.shape[0]} kernel programs loaded {name.upper()} cache slots of more than one sequence "
                f"(program {tuple(first.tolist())}: sequences {seqs}), i.e. slots past their own seq_len"]
