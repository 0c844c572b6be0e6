"""Hidden tests for split-audio-progress, run in the judge, which never imports vLLM.

The subject runs the candidate's ``split_audio`` and ``find_split_point`` (``vllm.multimodal.audio``) on audio
drawn here with ``secret_generator`` (``audio_cases.py``) and returns the chunks as data. A call that never
answers, the base's loop not moving forward, is failed by the judge's clock: every call of the ``subject`` fixture
is held to a budget measured on the base and the reference fix (rubrics/README.md, "What can go wrong in a call").
Each test first loads the module in a call of its own, so that the call that may hang starts on a ready subject
and is held to the budget of the work alone.
"""

from __future__ import annotations

import pytest
import torch

from rubric_support import load_beside

PROBES = "split_audio_progress_probes"
HANG_LIMIT_S = 120   # the most any call that may hang is waited for, where no control's time is known
audio_cases = load_beside(__file__, "audio_cases")
case, speech = audio_cases.case, audio_cases.speech


def _split(subject, cases: list[dict]) -> list[dict]:
    subject.call(f"{PROBES}.public_names")
    return subject.call(f"{PROBES}.split_runs", cases=audio_cases.sent(cases), timeout=HANG_LIMIT_S)


def _assert_well_split(subject, cases: list[dict], *, in_overlap: bool) -> None:
    outcomes = _split(subject, cases)
    problems = [f"{audio_cases.describe(c)}: {p}" for c, o in zip(cases, outcomes)
                if (p := audio_cases.chunk_problem(c, o, in_overlap=in_overlap))]
    assert not problems, "; ".join(problems)


def _poisoned(audio: torch.Tensor, start: int, stop: int, value: float | str) -> torch.Tensor:
    """``audio`` with samples ``[start, stop)`` set to ``value`` (a float, or "mixed": NaN, +inf and -inf in turn)."""
    out = audio.clone()
    if value == "mixed":
        pattern = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=out.dtype)
        out[..., start:stop] = pattern.repeat(-(-(stop - start) // 3))[:stop - start]
    else:
        out[..., start:stop] = value
    return out


# --- c1: NaN and infinite samples in an overlap region ------------------------------------------------------------


@pytest.mark.criterion("c1")
def test_non_finite_overlap_regions_are_split_and_finish(subject, secret_generator):
    """split_audio finishes on audio whose overlap regions hold only NaN or infinite samples, in chunks that tile it."""
    gen = secret_generator
    nan = float("nan")
    first = int(torch.randint(200, 2000, (1,), generator=gen))
    later = int(torch.randint(5000, 6000, (1,), generator=gen))
    cases = [
        case(torch.full((12000,), nan), 3.0, 1.0, name="all-NaN audio"),
        case(_poisoned(speech(gen, 12000), first, 3000, nan), 3.0, 1.0, name="NaN over the first overlap region"),
        case(_poisoned(speech(gen, 15000), later, 15000, nan), 3.0, 1.0, name="NaN from a later chunk on"),
        case(_poisoned(speech(gen, 11000, dtype=torch.float64), 1500, 2600, nan), 2.5, 0.8, window=128,
             name="float64, NaN over the first overlap region"),
        case(_poisoned(speech(gen, 12000), 1900, 3000, float("inf")), 3.0, 1.0, name="+inf over the first region"),
        case(_poisoned(speech(gen, 15000), later, 15000, float("-inf")), 3.0, 1.0, name="-inf from a later chunk"),
        case(_poisoned(speech(gen, 12000), 2000, 12000, "mixed"), 3.0, 1.0, name="NaN, +inf, -inf after 2 s"),
    ]
    _assert_well_split(subject, cases, in_overlap=True)


# --- c2: the overlap as long as a chunk, or longer ----------------------------------------------------------------


@pytest.mark.criterion("c2")
def test_overlap_as_long_as_a_clip_or_longer_moves_forward(subject, secret_generator):
    """split_audio moves forward when the overlap is as long as the clip or longer.

    The search region then starts at or behind the cursor, and the quietest window can be the cursor itself."""
    gen = secret_generator
    at_cursor = speech(gen, 12000)
    for start in range(0, 12000, 3000):
        at_cursor[start:start + audio_cases.WINDOW] = 0.0
    first_only = speech(gen, 10000)
    first_only[:audio_cases.WINDOW] = 0.0
    cases = [
        case(at_cursor, 3.0, 3.0, name="silence at the start of every clip"),
        case(first_only, 3.0, 3.0, name="silence at the very start"),
        case(torch.full((9500,), float("nan")), 3.0, 3.0, name="all-NaN audio"),
        case(speech(gen, 9000, dtype=torch.float64), 2.0, 2.0, name="float64 noise, 2 s clips"),
        case(speech(gen, 12000), 3.0, 4.0, name="noise, overlap longer than the clip"),
        case(audio_cases.quiet_stretches(speech(gen, 14000), gen, 6, 300), 3.0, 3.5,
             name="noise with pauses, overlap longer than the clip"),
        case(speech(gen, 3500), 3.0, 5.0, name="one clip and a bit, overlap longer than the clip"),
    ]
    _assert_well_split(subject, cases, in_overlap=False)


# --- c3: no window to score, multichannel audio ---------------------------------------------------------------------


@pytest.mark.criterion("c3")
def test_short_overlap_and_multichannel_audio_finish(subject, secret_generator):
    """split_audio finishes when its overlap region holds no whole energy window, and on multichannel audio.

    Multichannel audio is [channels, samples], split along the time axis."""
    gen = secret_generator
    cases = [
        case(speech(gen, 10000), 3.0, 0.0, name="no overlap"),
        case(speech(gen, 10000), 3.0, 0.05, name="overlap of half a window"),
        case(speech(gen, 10000), 3.0, 0.1, name="overlap of exactly one window"),
        case(speech(gen, 9000), 2.0, 1.0, window=1500, name="window longer than the overlap"),
        case(speech(gen, 12000, channels=2), 3.0, 1.0, name="stereo"),
        case(speech(gen, 10000, channels=1), 3.0, 1.0, name="one channel, 2D"),
        case(speech(gen, 9000, channels=3, dtype=torch.float64), 2.5, 0.5, name="three channels, float64"),
    ]
    _assert_well_split(subject, cases, in_overlap=True)


# --- c4: find_split_point answers inside its search region ----------------------------------------------------------


def _assert_points_in_region(subject, cases: list[dict]) -> None:
    outcomes = subject.call(f"{PROBES}.split_point_runs", cases=[{k: c[k] for k in
                            ("wav", "start_idx", "end_idx", "min_energy_window")} for c in cases])
    problems = [f"{c['name']} (start_idx={c['start_idx']}, end_idx={c['end_idx']}, "
                f"min_energy_window={c['min_energy_window']}): {p}"
                for c, o in zip(cases, outcomes) if (p := audio_cases.split_point_problem(c, o))]
    assert not problems, "; ".join(problems)


def _region(wav: torch.Tensor, start: int, end: int, window: int = audio_cases.WINDOW, **labels) -> dict:
    return {"wav": wav, "start_idx": start, "end_idx": end, "min_energy_window": window, **labels}


@pytest.mark.criterion("c4")
def test_find_split_point_stays_in_a_region_it_cannot_score(subject, secret_generator):
    """find_split_point returns an index inside its search region when no window there has a finite energy."""
    gen = secret_generator
    start = int(torch.randint(500, 2500, (1,), generator=gen))
    end = start + 1000
    base = speech(gen, 6000)
    cases = [
        _region(_poisoned(base, start, end, float("nan")), start, end, name="NaN region"),
        _region(_poisoned(base, start, end, float("inf")), start, end, name="+inf region"),
        _region(_poisoned(base, start, end, "mixed"), start, end, name="NaN, +inf and -inf region"),
        _region(_poisoned(base.double(), start, end, float("-inf")), start, end, name="float64 -inf region"),
    ]
    _assert_points_in_region(subject, cases)


@pytest.mark.criterion("c4")
def test_find_split_point_stays_in_a_region_without_a_window(subject, secret_generator):
    """find_split_point returns an index inside a search region too short for one window, and on 2D audio."""
    gen = secret_generator
    start = int(torch.randint(500, 2500, (1,), generator=gen))
    wav = speech(gen, 6000)
    cases = [
        _region(wav, start, start + 60, name="region shorter than a window"),
        _region(wav, start, start + audio_cases.WINDOW, name="region of exactly one window"),
        _region(wav, start, start, name="empty region"),
        _region(speech(gen, 6000, channels=2), start, start + 1000, name="stereo audio"),
    ]
    _assert_points_in_region(subject, cases)


# --- c5: everything else as before ------------------------------------------------------------------------------


def _assert_split_as_base(subject, base_subject, cases: list[dict]) -> None:
    got = _split(subject, cases)
    want = _split(base_subject, cases)
    problems = []
    for c, o, w in zip(cases, got, want):
        assert "returned" in w, f"the base could not split {audio_cases.describe(c)}: {w}"
        if "raised" in o:
            problems.append(f"{audio_cases.describe(c)}: split_audio raised {o['raised']}: {o['message'][:300]}")
        elif o["returned"]["shapes"] != w["returned"]["shapes"]:
            problems.append(f"{audio_cases.describe(c)}: chunk lengths {[s[-1] for s in o['returned']['shapes']]}"
                            f", where the base gives {[s[-1] for s in w['returned']['shapes']]}")
        elif w["returned"]["joined"] is not None and not audio_cases.same_samples(o["returned"]["joined"],
                                                                                  w["returned"]["joined"]):
            problems.append(f"{audio_cases.describe(c)}: the chunks hold other samples than the base's")
    assert not problems, "; ".join(problems)


@pytest.mark.criterion("c5", weight=2)
def test_finite_audio_is_split_as_before(subject, base_subject, secret_generator):
    """Finite audio is split at the same quietest windows as before, into the same chunks."""
    gen = secret_generator
    pauses = audio_cases.quiet_stretches
    cases = [
        case(pauses(speech(gen, 14000), gen, 5, 250), 3.0, 1.0, name="noise with pauses"),
        case(pauses(speech(gen, 11111, dtype=torch.float64), gen, 4, 200), 2.5, 0.7, window=64,
             name="float64 noise with pauses"),
        case(speech(gen, 20000), 4.0, 1.5, window=160, name="noise, 4 s clips"),
        case(pauses(speech(gen, 16000), gen, 8, 600, gain=0.0), 3.0, 1.0, name="noise with digital silence"),
        case(speech(gen, 3000), 3.0, 1.0, name="exactly one clip"),
        case(speech(gen, 2999), 3.0, 1.0, name="just under one clip"),
        case(speech(gen, 3001), 3.0, 1.0, name="just over one clip"),
    ]
    _assert_split_as_base(subject, base_subject, cases)


@pytest.mark.criterion("c5")
def test_partly_nan_overlap_regions_are_split_as_before(subject, base_subject, secret_generator):
    """An overlap region with some NaN windows is still split at its quietest finite window, as before."""
    gen = secret_generator
    audio = speech(gen, 15000)
    for start in range(int(torch.randint(0, 500, (1,), generator=gen)), 15000, 1600):
        audio = _poisoned(audio, start, start + 150, float("nan"))
    cases = [case(audio, 3.0, 1.0, name="NaN bursts of 150 samples every 1.6 s")]
    _assert_split_as_base(subject, base_subject, cases)


@pytest.mark.criterion("c5")
def test_find_split_point_finds_the_same_quietest_window(subject, base_subject, secret_generator):
    """find_split_point returns the same index as before on finite audio, the first of equally quiet windows too."""
    gen = secret_generator
    wav = audio_cases.quiet_stretches(speech(gen, 8000), gen, 6, 150)
    starts = torch.randint(0, 6000, (6,), generator=gen).tolist()
    cases = [_region(wav, s, s + length, window) for s, length, window in
             zip(starts, (1000, 1500, 800, 2000, 1001, 640), (100, 100, 64, 250, 100, 32))]
    silent = speech(gen, 4000)
    silent[1200:1800] = 0.0
    cases += [_region(silent, 1000, 2000, 100), _region(silent, 1150, 2150, 50)]
    sent = [{k: c[k] for k in ("wav", "start_idx", "end_idx", "min_energy_window")} for c in cases]
    got = subject.call(f"{PROBES}.split_point_runs", cases=sent)
    want = base_subject.call(f"{PROBES}.split_point_runs", cases=sent)
    assert got == want, f"find_split_point on regions {[(c['start_idx'], c['end_idx']) for c in cases]}: " \
                        f"{got}, where the base gives {want}"


@pytest.mark.criterion("c5")
def test_module_keeps_its_public_names(subject, base_subject):
    """vllm.multimodal.audio still imports and keeps every public name the base defines."""
    before = set(base_subject.call(f"{PROBES}.public_names"))
    after = set(subject.call(f"{PROBES}.public_names"))
    assert before <= after, f"public names gone from vllm.multimodal.audio: {sorted(before - after)}"
