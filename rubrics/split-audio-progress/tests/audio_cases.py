"""Audio the split-audio-progress tests send to the subject, and the checks on the chunks that come back.

Everything here runs in the judge (torch only, no vLLM). Audio is drawn from the test's ``secret_generator``:
noise under a per-window loudness envelope, so that the quietest window of a search region is a real minimum.
"""

from __future__ import annotations

import torch

SAMPLE_RATE = 1000        # samples per second: a chunk of 3 s is 3000 samples
WINDOW = 100              # the energy window, in samples


def speech(gen: torch.Generator, samples: int, channels: int | None = None, dtype=torch.float32) -> torch.Tensor:
    """Noise whose loudness changes every ``WINDOW`` samples (0.05 to 1.0), as ``[samples]`` or
    ``[channels, samples]``."""
    rows = 1 if channels is None else channels
    noise = torch.randn(rows, samples, generator=gen, dtype=torch.float64)
    blocks = -(-samples // WINDOW)
    loudness = 0.05 + 0.95 * torch.rand(rows, blocks, generator=gen, dtype=torch.float64)
    audio = (noise * loudness.repeat_interleave(WINDOW, dim=1)[:, :samples]).to(dtype)
    return audio[0] if channels is None else audio


def quiet_stretches(audio: torch.Tensor, gen: torch.Generator, count: int, length: int,
                    gain: float = 0.01) -> torch.Tensor:
    """``audio`` with ``count`` stretches of ``length`` samples at random places turned down by ``gain`` (a
    whisper; 0.0 is digital silence, whose windows all have the same energy, 0)."""
    out = audio.clone()
    samples = out.shape[-1]
    for start in torch.randint(0, max(1, samples - length), (count,), generator=gen).tolist():
        out[..., start:start + length] *= gain
    return out


def case(audio: torch.Tensor, clip_s: float, overlap_s: float, window: int = WINDOW, **labels) -> dict:
    """One ``split_audio`` call: the audio and its four settings, plus labels the judge keeps for its messages."""
    return {"audio": audio, "sample_rate": SAMPLE_RATE, "max_clip_duration_s": clip_s,
            "overlap_duration_s": overlap_s, "min_energy_window_size": window, **labels}


def sent(cases: list[dict]) -> list[dict]:
    """The cases as the probe takes them (without the judge's labels)."""
    keys = ("audio", "sample_rate", "max_clip_duration_s", "overlap_duration_s", "min_energy_window_size")
    return [{k: c[k] for k in keys} for c in cases]


def describe(c: dict) -> str:
    audio = c["audio"]
    return (f"{c.get('name', 'audio')} ({list(audio.shape)} {str(audio.dtype).removeprefix('torch.')}, "
            f"max_clip_duration_s={c['max_clip_duration_s']}, overlap_duration_s={c['overlap_duration_s']}, "
            f"min_energy_window_size={c['min_energy_window_size']})")


def same_samples(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape and equal samples, NaN matching NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def chunk_problem(c: dict, outcome: dict) -> str | None:
    """What is wrong with the chunks ``split_audio`` gave for case ``c``, or None: they must be returned, keep the
    leading (channel) dimensions, join back into exactly the input, be non-empty and at most one clip long; with
    an overlap shorter than the clip, every chunk but the last must also end inside its overlap region (at least
    clip - overlap samples long); with an overlap of a clip or more, it must be a whole clip or end at a finite
    window its search region scores, ahead of the cursor (``_stray_cut``)."""
    if "raised" in outcome:
        return f"split_audio raised {outcome['raised']}: {outcome['message'][:300]}"
    audio = c["audio"]
    clip = int(SAMPLE_RATE * c["max_clip_duration_s"])
    overlap = int(SAMPLE_RATE * c["overlap_duration_s"])
    shapes, joined = outcome["returned"]["shapes"], outcome["returned"]["joined"]
    if not shapes:
        return "split_audio returned no chunks"
    lead = list(audio.shape[:-1])
    if any(list(s[:-1]) != lead for s in shapes):
        return f"a chunk lost the leading dimensions {lead}: chunk shapes {shapes[:8]}"
    lengths = [s[-1] for s in shapes]
    if min(lengths) < 1:
        return f"an empty chunk among {len(lengths)}: lengths {lengths[:12]}"
    if max(lengths) > clip:
        return f"a chunk of {max(lengths)} samples, longer than one clip ({clip}): lengths {lengths[:12]}"
    if overlap < clip and any(n < clip - overlap for n in lengths[:-1]):
        return (f"a chunk ends before its overlap region (chunks but the last must be {clip - overlap} to {clip} "
                f"samples): lengths {lengths[:12]}")
    if overlap >= clip and (stray := _stray_cut(c, lengths)) is not None:
        return stray
    if joined is None or not same_samples(joined, audio):
        return f"the chunks (lengths {lengths[:12]}) do not join back into the input audio"
    return None


def _stray_cut(c: dict, lengths: list[int]) -> str | None:
    """Where the overlap is a clip or longer, the first chunk but the last that is neither a whole clip nor cut at
    a window of finite samples ahead of the cursor, or None.

    Such a search region reaches the cursor, so a split point it finds can be the cursor itself or behind it; a
    fix must then cut a whole clip (the hard boundary), not creep forward: a cut is either the clip's end or the
    start of a window the region scores (on the region's window grid, from its start or from the audio's start
    where the region begins before it), ahead of the cursor and finite on every channel. Audio without a finite
    window is therefore cut in whole clips."""
    audio = c["audio"]
    clip = int(SAMPLE_RATE * c["max_clip_duration_s"])
    overlap = int(SAMPLE_RATE * c["overlap_duration_s"])
    window = c["min_energy_window_size"]
    samples = audio.shape[-1]
    cursor = 0
    for n in lengths[:-1]:
        cut = cursor + n
        start, end = cursor + clip - overlap, min(cursor + clip, samples)
        on_grid = any((cut - origin) % window == 0 for origin in {start, max(0, start)})
        scored = (on_grid and max(0, start) <= cut and cut + window <= end
                  and bool(torch.isfinite(audio[..., cut:cut + window]).all()))
        if cut != cursor + clip and not scored:
            return (f"a chunk of {n} samples from sample {cursor}: with an overlap of a clip or more a chunk but the "
                    f"last is a whole clip ({clip}) or ends at a finite window of its search region ahead of the "
                    f"cursor (window {window}, region [{start}, {end})): lengths {lengths[:12]}")
        cursor = cut
    return None


def split_point_problem(c: dict, outcome: dict) -> str | None:
    """What is wrong with ``find_split_point``'s answer for case ``c``, or None: an integer from start_idx to
    end_idx (the search region, its end included)."""
    if "raised" in outcome:
        return f"find_split_point raised {outcome['raised']}: {outcome['message'][:300]}"
    index = outcome["returned"]
    if not isinstance(index, int):
        return f"find_split_point returned {index!r}, not an index"
    if not c["start_idx"] <= index <= c["end_idx"]:
        return f"find_split_point returned {index}, outside its search region [{c['start_idx']}, {c['end_idx']}]"
    return None
