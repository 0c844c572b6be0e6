"""Setup for the triton-kv-past-seq-len hidden tests, in the judge (which never imports vLLM).

The candidate's Triton attention kernels run in the subject (``probes/triton_kv_past_seq_len_probes.py``) on the
tensors built here, in one of two ways the grader decides for the whole run (``grader/sandbox/launch.py``):

- CPU (no GPU evidence): ``TRITON_INTERPRET=1`` in the judge and the subject; the kernels run through the Triton
  interpreter, which loads exactly the lanes a kernel's masks allow, so a read past ``seq_len`` brings the
  poison the judge put there into the output just as the hardware does, and the probe records the cache elements
  every load enabled, so a read is seen even where the kernel sanitises what it loaded. Tests parametrised with
  ``cpu`` run.
- GPU (``GRADER_GPU=1`` and CUDA visible): the kernels compile natively; ``cuda`` cases run and ``cpu`` cases are
  skipped as variants.

Every skip is decided here from what the judge measures itself (the run's mode, the interpreter's ability to run
a loop over a runtime bound); nothing a probe answers turns into a skip: a launch that raises fails its test.
"""

from __future__ import annotations

import os

import pytest

from rubric_support import gpu_enabled, interpreter_gap, load_beside

GPU_RUN = gpu_enabled()
INTERPRET = not GPU_RUN and os.environ.get("TRITON_INTERPRET") == "1"

PROBES = "triton_kv_past_seq_len_probes"
cases = load_beside(__file__, "attn_cases")


def _skip_unless_runnable(device: str) -> None:
    if device == "cpu" and GPU_RUN:
        pytest.skip("variant: this run compiles Triton for the GPU, where the CUDA variant of this check runs")
    if device == "cpu" and not INTERPRET:
        pytest.skip("environment: the Triton interpreter is off in this run and no GPU is in use")
    if device == "cpu":
        gap = interpreter_gap()
        if gap:
            pytest.skip(gap)
    if device == "cuda" and not GPU_RUN:  # pragma: no cover - the shared conftest skips these already
        pytest.skip("environment: no CUDA GPU in this run")


class Attention:
    """Builds the launch arguments for a batch and runs them in the subject; what each launch did comes back as
    an ``attn_cases.Launch``."""

    def __init__(self, subject):
        self.subject = subject

    def unified(self, batch, device: str, fill, gen, *, causal=True, window: int = 0, softcap: float = 0.0,
                sinks=None, mm_ranges=None, segments: int = 0):
        """``unified_attention`` on ``batch`` with its cache's unwritten slots holding ``fill``; the output."""
        return self.unified_many([(batch, fill, dict(causal=causal, window=window, softcap=softcap, sinks=sinks,
                                                     mm_ranges=mm_ranges, segments=segments))], device, gen)[0]

    def diffkv_many(self, runs, device: str, gen) -> list:
        """Causal ``unified_attention_diffkv`` launches (the other kernel calling the tile-bound helper) in one
        probe call: ``[(batch, fill), ...]``."""
        _skip_unless_runnable(device)
        sent = []
        for batch, fill in runs:
            k_cache, v_cache = cases.unified_caches(batch, fill, gen)
            sent.append({"q": batch.q, "k_cache": k_cache, "v_cache": v_cache, "block_table": batch.block_table,
                         "cu_seqlens_q": batch.cu_seqlens_q, "seq_lens": batch.seq_lens_tensor,
                         "max_seqlen_q": max(batch.q_lens), "scale": batch.scale, "device": device})
        outcomes = self.subject.call(f"{PROBES}.diffkv_attention_runs", cases=sent)
        return [_launch(o, "unified_attention_diffkv", b, device, "unified", {"k": c["k_cache"], "v": c["v_cache"]},
                        _inputs(c, "q", "cu_seqlens_q"))
                for o, (b, _), c in zip(outcomes, runs, sent)]

    def unified_many(self, runs, device: str, gen) -> list:
        """Several ``unified_attention`` launches in one probe call: ``[(batch, fill, options), ...]``."""
        import torch

        _skip_unless_runnable(device)
        sent, caches = [], []
        for batch, fill, opts in runs:
            k_cache, v_cache = cases.unified_caches(batch, fill, gen)
            caches.append({"k": k_cache, "v": v_cache})
            quant = {}
            if batch.kv_scales is not None:
                k_scales, v_scales = cases.scale_caches(batch, fill, gen)
                caches[-1].update(k_scale=k_scales, v_scale=v_scales)
                mode = cases.FP8_PER_TOKEN_HEAD if batch.fp8_dtype is not None else cases.INT8_PER_TOKEN_HEAD
                quant = {"kv_quant_mode": mode, "k_scale_cache": k_scales, "v_scale_cache": v_scales}
            elif batch.tensor_scales is not None:
                quant = {"kv_quant_mode": cases.FP8_PER_TENSOR,
                         "k_descale": torch.tensor([batch.tensor_scales[0]], dtype=torch.float32),
                         "v_descale": torch.tensor([batch.tensor_scales[1]], dtype=torch.float32)}
            causal = opts.get("causal", True)
            mm = opts.get("mm_ranges")
            sent.append({**quant, 
                "q": batch.q, "k_cache": k_cache, "v_cache": v_cache, "block_table": batch.block_table,
                "cu_seqlens_q": batch.cu_seqlens_q, "seq_lens": batch.seq_lens_tensor,
                "max_seqlen_q": max(batch.q_lens), "max_seqlen_k": max(batch.seq_lens), "scale": batch.scale,
                "causal": torch.tensor(causal, dtype=torch.bool) if isinstance(causal, (list, tuple)) else causal,
                "window_left": opts.get("window", 0) - 1, "softcap": opts.get("softcap", 0.0),
                "sinks": opts.get("sinks"), "segments": opts.get("segments", 0),
                "chunk_lookback": opts.get("chunk_lookback", -1),
                "mm_prefix_range": None if mm is None else mm_prefix_tensor(mm), "device": device,
            })
        outcomes = self.subject.call(f"{PROBES}.unified_attention_runs", cases=sent)
        return [_launch(o, "unified_attention", b, device, "unified", kv, _inputs(c, "q", "cu_seqlens_q"))
                for o, (b, _, _), c, kv in zip(outcomes, runs, sent, caches)]

    def paged(self, batch, device: str, fill, gen, *, window: int = 0, alibi=None, sinks=None):
        """``chunked_prefill_paged_decode`` (a decode batch) on ``batch`` with unwritten slots holding ``fill``."""
        return self.paged_many([(batch, fill, dict(window=window, alibi=alibi, sinks=sinks))], device, gen)[0]

    @staticmethod
    def _paged_fp8(batch, opts) -> dict:
        """The ``kv_cache_dtype`` and per-tensor scales of a paged-decode launch: "auto" and 1 for a plain cache;
        for an fp8 one the spelling ``opts["kv_cache_dtype"]`` names ("fp8", "fp8_e4m3" or "fp8_e5m2")."""
        if batch.fp8_dtype is None:
            return {}
        return {"kv_cache_dtype": opts["kv_cache_dtype"], "k_scale": batch.tensor_scales[0],
                "v_scale": batch.tensor_scales[1]}

    def paged_many(self, runs, device: str, gen) -> list:
        import torch

        _skip_unless_runnable(device)
        sent = []
        for batch, fill, opts in runs:
            assert all(q == 1 for q in batch.q_lens), "the paged-decode kernel serves decode tokens only"
            key_cache, value_cache = cases.paged_caches(batch, fill, gen)
            sent.append({
                "query": batch.q, "key_cache": key_cache, "value_cache": value_cache,
                "block_table": batch.block_table, "seq_lens": batch.seq_lens_tensor,
                "max_seq_len": max(batch.seq_lens), "scale": batch.scale, "sliding_window": opts.get("window", 0),
                "alibi_slopes": opts.get("alibi"), "sinks": opts.get("sinks"), "device": device,
                **self._paged_fp8(batch, opts),
            })
        outcomes = self.subject.call(f"{PROBES}.paged_decode_runs", cases=sent)
        return [_launch(o, "chunked_prefill_paged_decode", b, device, "paged",
                        {"k": c["key_cache"], "v": c["value_cache"]},
                        {**_inputs(c, "query"), "cu_seqlens_q": torch.arange(len(b.seq_lens) + 1, dtype=torch.int32)})
                for o, (b, _, _), c in zip(outcomes, runs, sent)]


def mm_prefix_tensor(ranges):
    """The ``mm_prefix_range`` tensor the Triton backend builds: [num_seqs, max_ranges, 2] int32, (0, 0) padded."""
    import torch

    width = max(1, max(len(r) for r in ranges))
    rows = [list(r) + [(0, 0)] * (width - len(r)) for r in ranges]
    return torch.tensor(rows, dtype=torch.int32).view(len(ranges), width, 2)


def _inputs(sent: dict, query: str, *more: str) -> dict:
    """The launch's inputs besides its caches, named as the probe reports them after the call."""
    return {"q": sent[query], "block_table": sent["block_table"], "seq_lens": sent["seq_lens"],
            **{name: sent[name] for name in more}}


def _launch(outcome: dict, what: str, batch, device: str, layout: str, caches: dict, inputs: dict):
    if "raised" in outcome:
        raise AssertionError(f"{what} raised {outcome['raised']}: {outcome['message']}")
    seen = outcome["returned"]
    return cases.Launch(batch, device, layout, caches, seen["output"], seen["loads"], seen["caches_after"],
                        inputs, seen["inputs_after"], seen["written"])


@pytest.fixture(scope="session")
def attention(subject):
    return Attention(subject)
