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


def _assert_well_split(subject, cases: list[dict]) -> None:
    outcomes = _split(subject, cases)
    problems = [f"{audio_cases.describe(c)}: {p}" for c, o in zip(cases, outcomes)
                if (p := audio_cases.chunk_problem(c, o))]
    assert not problems, "; ".join(problems)


def _poisoned(audio: torch.Tensor, start: int, stop: int, value: float | str) -> torch.Tensor:
    """``audio`` with samples ``[start, stop)`` set to ``value``: a float; "mixed" (NaN, +inf and -inf in turn);
    "sparse-nan" (a NaN every SPARSE samples among the audio's own, so every window holds one); or "overflow"
    (finite samples whose squares overflow the dtype, so every window's energy is inf)."""
    out = audio.clone()
    if value == "sparse-nan":
        out[..., start:stop:SPARSE] = float("nan")
    elif value == "overflow":
        out[..., start:stop] = OVERFLOW[out.dtype]
    elif value == "mixed":
        pattern = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=out.dtype)
        out[..., start:stop] = pattern.repeat(-(-(stop - start) // 3))[:stop - start]
    else:
        out[..., start:stop] = value
    return out


# --- c1: NaN and infinite samples in an overlap region ------------------------------------------------------------

DTYPES = {"float32": torch.float32, "float64": torch.float64}
NON_FINITE = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf"), "mixed": "mixed",
              "sparse-nan": "sparse-nan", "overflow": "overflow"}
# A window with no finite energy need not be all non-finite: one NaN among finite samples, or finite samples too
# large to square, score none either (SPARSE is below every window the tests use).
SPARSE = 29
OVERFLOW = {torch.float32: 1e20, torch.float64: 1e160}
# Fixed search-region starts on no window grid (and on one), beside the drawn start: a fallback that depends on
# where the region starts is seen for every secret.
FIXED_STARTS = (1037, 2000)


@pytest.mark.criterion("c1")
@pytest.mark.cases(dtype=list(DTYPES), value=list(NON_FINITE), where=["first-clip", "later-clip"])
def test_non_finite_overlap_regions_are_split_and_finish(subject, secret_generator):
    """split_audio finishes on audio whose overlap regions hold only NaN or infinite samples, in chunks that tile it.

    Every dtype and non-finite value, from the first clip's overlap region on and from a later clip's on (the fixed
    corners: the poison always covers a whole region, wherever the draw starts it)."""
    gen = secret_generator
    cases = [case(torch.full((12000,), float("nan")), 3.0, 1.0, name="all-NaN audio")]
    for dtype_name, dtype in DTYPES.items():
        for value_name, value in NON_FINITE.items():
            first = int(torch.randint(200, 2001, (1,), generator=gen))
            later = int(torch.randint(5000, 6001, (1,), generator=gen))
            cases += [
                case(_poisoned(speech(gen, 12000, dtype=dtype), first, 3000, value), 3.0, 1.0,
                     name=f"{dtype_name}, {value_name} over the first clip's overlap region"),
                case(_poisoned(speech(gen, 15000, dtype=dtype), later, 15000, value), 3.0, 1.0,
                     name=f"{dtype_name}, {value_name} from a later clip on"),
            ]
    cases.append(case(_poisoned(speech(gen, 11000, dtype=torch.float64), 1500, 2600, float("nan")), 2.5, 0.8,
                      window=128, name="float64, NaN over the first overlap region, 2.5 s clips"))
    _assert_well_split(subject, cases)


# --- c2: the overlap as long as a chunk, or longer ----------------------------------------------------------------


def _silenced(audio: torch.Tensor, starts) -> torch.Tensor:
    """``audio`` with one window of digital silence at each of ``starts`` (on every channel)."""
    out = audio.clone()
    for start in starts:
        out[..., start:start + audio_cases.WINDOW] = 0.0
    return out


def _behind_every_cursor(audio: torch.Tensor) -> torch.Tensor:
    """For 3 s clips with a 4 s overlap: silence over the first window (a split point at the cursor, where a search
    region starting at the audio's start finds it), then whispers, each quieter than the next, half a second before
    each clip boundary (3 s, 6 s, 9 s): the region of a clip cut at its boundary finds its quietest window behind
    the cursor."""
    out = _silenced(audio, [0])
    for start, gain in ((2500, 1e-4), (5500, 3e-4), (8500, 1e-3)):
        out[..., start:start + audio_cases.WINDOW] *= gain
    return out


@pytest.mark.criterion("c2")
@pytest.mark.cases(overlap=["equals-clip", "longer-than-clip"],
                   split_point=["at-cursor", "behind-cursor", "before-audio-start"],
                   channels=["mono", "multichannel"], dtype=["float32", "float64"])
def test_overlap_as_long_as_a_clip_or_longer_moves_forward(subject, secret_generator):
    """split_audio moves forward when the overlap is as long as the clip or longer.

    The search region then starts at or behind the cursor, and the quietest window can be the cursor itself or a
    window behind it. The fixed corners: silence at every clip boundary (the quietest window is the cursor, with
    the overlap equal to the clip) and one clip before every boundary-to-be (the quietest window is behind the
    cursor, with a 4 s overlap on 3 s clips: a guard for the split point equal to the cursor only moves back); mono
    and [channels, samples] audio."""
    gen = secret_generator
    cases = [
        case(_silenced(speech(gen, 12000), range(0, 12000, 3000)), 3.0, 3.0,
             name="silence at the start of every clip"),
        case(_silenced(speech(gen, 10000), [0]), 3.0, 3.0, name="silence at the very start"),
        case(torch.full((9500,), float("nan")), 3.0, 3.0, name="all-NaN audio"),
        case(speech(gen, 9000, dtype=torch.float64), 2.0, 2.0, name="float64 noise, 2 s clips"),
        case(speech(gen, 12000), 3.0, 4.0, name="noise, overlap longer than the clip"),
        case(_silenced(speech(gen, 12000), (2000, 5000, 8000)), 3.0, 4.0,
             name="the quietest window a second behind every cursor, overlap longer than the clip"),
        case(_behind_every_cursor(speech(gen, 12000)), 3.0, 4.0,
             name="silence at the start, then the quietest window behind every cursor"),
        case(_behind_every_cursor(speech(gen, 12000, dtype=torch.float64)), 3.0, 4.0,
             name="float64, silence at the start, then the quietest window behind every cursor"),
        case(audio_cases.quiet_stretches(speech(gen, 14000), gen, 6, 300), 3.0, 3.5,
             name="noise with pauses, overlap longer than the clip"),
        case(speech(gen, 3500), 3.0, 5.0, name="one clip and a bit, overlap longer than the clip"),
        case(_silenced(speech(gen, 12000, channels=2), range(0, 12000, 3000)), 3.0, 3.0,
             name="stereo, silence at the start of every clip"),
        case(_behind_every_cursor(speech(gen, 12000, channels=2)), 3.0, 4.0,
             name="stereo, the quietest window behind every cursor"),
        case(speech(gen, 9000, channels=3, dtype=torch.float64), 2.0, 2.0, name="three float64 channels, 2 s clips"),
        case(speech(gen, 3500, channels=1), 3.0, 5.0, name="one channel, 2D, overlap longer than the clip"),
    ]
    _assert_well_split(subject, cases)


# --- c3: no window to score, multichannel audio ---------------------------------------------------------------------


@pytest.mark.criterion("c3")
@pytest.mark.cases(overlap=["no-overlap", "half-window", "one-window", "shorter-than-window"],
                   channels=["mono", "one-channel", "stereo", "three-channel"], dtype=["float32", "float64"])
def test_short_overlap_and_multichannel_audio_finish(subject, secret_generator):
    """split_audio finishes when its overlap region holds no whole energy window, and on multichannel audio.

    Multichannel audio is [channels, samples], split along the time axis."""
    gen = secret_generator
    cases = [
        case(speech(gen, 10000), 3.0, 0.0, name="no overlap"),
        case(speech(gen, 10000, dtype=torch.float64), 3.0, 0.0, name="float64, no overlap"),
        case(speech(gen, 10000), 3.0, 0.05, name="overlap of half a window"),
        case(speech(gen, 10000), 3.0, 0.1, name="overlap of exactly one window"),
        case(speech(gen, 9000), 2.0, 1.0, window=1500, name="window longer than the overlap"),
        case(speech(gen, 12000, channels=2), 3.0, 1.0, name="stereo"),
        case(speech(gen, 12000, channels=2), 3.0, 0.0, name="stereo, no overlap"),
        case(speech(gen, 10000, channels=1), 3.0, 1.0, name="one channel, 2D"),
        case(speech(gen, 9000, channels=3, dtype=torch.float64), 2.5, 0.5, name="three channels, float64"),
    ]
    _assert_well_split(subject, cases)


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
@pytest.mark.cases(value=list(NON_FINITE), dtype=list(DTYPES))
def test_find_split_point_stays_in_a_region_it_cannot_score(subject, secret_generator):
    """find_split_point returns an index inside its search region when no window there has a finite energy: every
    non-finite value in each dtype."""
    gen = secret_generator
    drawn = int(torch.randint(500, 2500, (1,), generator=gen))
    cases = []
    for dtype_name, dtype in DTYPES.items():
        base = speech(gen, 6000, dtype=dtype)
        cases += [_region(_poisoned(base, start, start + 1000, value), start, start + 1000,
                          name=f"{dtype_name} {value_name} region")
                  for start in (drawn, *FIXED_STARTS) for value_name, value in NON_FINITE.items()]
    _assert_points_in_region(subject, cases)


@pytest.mark.criterion("c4")
@pytest.mark.cases(region=["shorter-than-window", "one-window", "empty", "multichannel"], dtype=list(DTYPES))
def test_find_split_point_stays_in_a_region_without_a_window(subject, secret_generator):
    """find_split_point returns an index inside a search region too short for one window, and on 2D audio."""
    gen = secret_generator
    drawn = int(torch.randint(500, 2500, (1,), generator=gen))
    cases = []
    for dtype_name, dtype in DTYPES.items():
        wav = speech(gen, 6000, dtype=dtype)
        cases += [case for start in (drawn, *FIXED_STARTS) for case in (
            _region(wav, start, start + 60, name=f"{dtype_name} region shorter than a window"),
            _region(wav, start, start + audio_cases.WINDOW, name=f"{dtype_name} region of exactly one window"),
            _region(wav, start, start, name=f"{dtype_name} empty region"),
            _region(speech(gen, 6000, channels=2, dtype=dtype), start, start + 1000, name=f"{dtype_name} stereo"),
        )]
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


def _whisper_over_first_windows(audio: torch.Tensor, clip: int, overlap: int) -> torch.Tensor:
    """``audio`` turned down to a whisper over the first window of the first overlap region (which starts at
    ``clip - overlap``): the base splits there, so a fix that moves or shortens the region, or that reads a split
    point at the region's start as "nothing found", splits elsewhere."""
    out = audio.clone()
    out[..., clip - overlap:clip - overlap + audio_cases.WINDOW] *= 1e-3
    return out


def _quieter_ahead_of_every_cursor(audio: torch.Tensor) -> torch.Tensor:
    """For 3 s clips with an overlap of a whole clip: whispers at 1.5 s and then every 2.2 s, each 100 times quieter
    than the one before (more than the noise's own loudness range), so that each region, which starts at the cursor,
    finds its quietest window ahead of it: the base finishes, cutting there, and a fix must cut there too."""
    out = audio.clone()
    for k, start in enumerate(range(1500, out.shape[-1] - 1000, 2200)):
        out[..., start:start + audio_cases.WINDOW] *= 1e-2 ** (k + 1)
    return out


def _loudness_measures_disagree(audio: torch.Tensor, region_start: int, gen: torch.Generator) -> torch.Tensor:
    """``audio`` whose region of 1000 samples from ``region_start`` (100-sample windows) is loud noise but for three
    windows that RMS energy, mean absolute amplitude and peak amplitude rank differently: window 2 a steady 0.05
    (RMS 0.05, mean 0.05, peak 0.05), window 4 silent but for one sample of 1.0 (RMS 0.1, mean 0.01, peak 1.0),
    window 6 alternating 0.06 and silence (RMS 0.042, mean 0.03, peak 0.06). The base scores RMS and picks window 6;
    a fix that scores the mean absolute amplitude picks window 4, one that scores the peak window 2. Fixed, so no
    draw decides it (the drawn noise's own windows rank alike under the three measures most of the time)."""
    out = audio.clone()
    region = slice(region_start, region_start + 1000)
    out[..., region] = torch.randn(out[..., region].shape, generator=gen, dtype=torch.float64).to(out.dtype)
    steady, spike, alternating = (region_start + k * audio_cases.WINDOW for k in (2, 4, 6))
    out[..., steady:steady + audio_cases.WINDOW] = 0.05
    out[..., spike:spike + audio_cases.WINDOW] = 0.0
    out[..., spike + 37] = 1.0
    out[..., alternating:alternating + audio_cases.WINDOW] = 0.0
    out[..., alternating:alternating + audio_cases.WINDOW:2] = 0.06
    return out


@pytest.mark.criterion("c5", weight=2)
@pytest.mark.cases(site="split_audio", dtype=list(DTYPES), audio=["long", "about-one-clip"],
                   search=["quietest-window", "first-of-equal", "last-whole-window", "first-window", "rms-energy"],
                   sample_rate=["1000", "16000"], overlap=["up-to-half", "over-half", "near-clip", "equals-clip"],
                   duration=["exact", "inexact"])
def test_finite_audio_is_split_as_before(subject, base_subject, secret_generator):
    """Finite audio is split at the same quietest windows as before, into the same chunks.

    The fixed corners: digital silence over the first overlap region's last whole window, which the base's window
    loop does not reach (a region of whole windows); a whisper over the first overlap region's first window, with
    an overlap of a third of the clip, of more than half of it, and of all but half a window of it (a fix that
    clamps the overlap, or that cuts at the clip boundary when the split point is the region's start, splits
    elsewhere); and speech-to-text's own setting, 30 s clips at 16 kHz with a 1 s overlap and 1600-sample
    windows."""
    gen = secret_generator
    pauses = audio_cases.quiet_stretches
    last_window = speech(gen, 12000)
    last_window[3000 - audio_cases.WINDOW:3000] = 0.0
    first_windows = [
        case(_whisper_over_first_windows(speech(gen, 12000, dtype=dtype), 3000, overlap), 3.0, overlap / 1000,
             name=f"{dtype_name}, whisper over the first region's first window, overlap {overlap / 1000} s")
        for overlap in (1000, 2000, 2950) for dtype_name, dtype in DTYPES.items()]
    # Durations whose sample counts are not exact in binary floating point: 2.01 s and 2.03 s at 1000 and 16000
    # samples a second come to 2009.9999999999998 and 32479.999999999996 samples, which the base truncates (2009,
    # 32479); a fix that rounds or takes the ceiling moves every search region by a sample.
    inexact = [case(speech(gen, 12000), 3.0, 2.01, name="overlap of 2.01 s (2009.9999999999998 samples)"),
               case(speech(gen, 12000), 2.03, 1.0, name="clips of 2.03 s (2029.9999999999998 samples)"),
               {**case(speech(gen, 16000 * 7), 2.03, 1.0, window=1600,
                       name="16 kHz, clips of 2.03 s (32479.999999999996 samples)"), "sample_rate": 16000}]
    measures = [case(_loudness_measures_disagree(speech(gen, 12000, dtype=dtype), 2000, gen), 3.0, 1.0,
                     name=f"{dtype_name}, RMS, mean and peak amplitude ranking the first region's windows apart")
                for dtype_name, dtype in DTYPES.items()]
    equal_overlap = [case(_quieter_ahead_of_every_cursor(speech(gen, 12000, dtype=dtype)), 3.0, 3.0,
                          name=f"{dtype_name}, overlap of a whole clip, each region's quietest window ahead")
                     for dtype_name, dtype in DTYPES.items()]
    whisper = speech(gen, 16000 * 70)
    whisper[16000 * 30 - 1600:16000 * 30] *= 0.001
    cases = [
        case(last_window, 3.0, 1.0, name="silence over the first region's last whole window"),
        {**case(whisper, 30.0, 1.0, window=1600, name="70 s at 16 kHz, whisper over a region's last window"),
         "sample_rate": 16000},
        case(pauses(speech(gen, 14000), gen, 5, 250), 3.0, 1.0, name="noise with pauses"),
        case(pauses(speech(gen, 11111, dtype=torch.float64), gen, 4, 200), 2.5, 0.7, window=64,
             name="float64 noise with pauses"),
        case(speech(gen, 20000), 4.0, 1.5, window=160, name="noise, 4 s clips"),
        case(pauses(speech(gen, 16000), gen, 8, 600, gain=0.0), 3.0, 1.0, name="noise with digital silence"),
        case(speech(gen, 3000), 3.0, 1.0, name="exactly one clip"),
        case(speech(gen, 2999), 3.0, 1.0, name="just under one clip"),
        case(speech(gen, 3001), 3.0, 1.0, name="just over one clip"),
        case(pauses(speech(gen, 14000), gen, 5, 250), 3.0, 2.5, name="noise with pauses, overlap 2.5 s"),
        *first_windows,
        *equal_overlap,
        *measures,
        *inexact,
    ]
    _assert_split_as_base(subject, base_subject, cases)


def _quiet_beside_nan(audio: torch.Tensor) -> torch.Tensor:
    """For 3 s clips, a 1 s overlap and 128-sample windows (the first region's windows start at 2000 + 128 k): NaN
    over 2300-2450 (windows 2 and 3 hold some), the finite part of window 2 (2256-2300) a near-silence and window 5
    (2640) a whisper. The base skips the NaN windows and cuts at 2640; a fix that scores a window by its finite
    samples, or that reads NaN as silence or as the minimum, cuts elsewhere."""
    out = audio.clone()
    out[..., 2256:2300] *= 1e-4
    out[..., 2640:2768] *= 1e-2
    out[..., 2300:2450] = float("nan")
    return out


def _nan_after_whispered_first_window(audio: torch.Tensor) -> torch.Tensor:
    """For 3 s clips, a 1 s overlap and 100-sample windows: a whisper over the first region's first window
    (2000-2100) and NaN over 2450-2520 (windows 4 and 5 hold some). The base cuts at the region's start."""
    out = audio.clone()
    out[..., 2000:2100] *= 1e-2
    out[..., 2450:2520] = float("nan")
    return out


@pytest.mark.criterion("c5")
@pytest.mark.cases(site="split_audio", search=["partly-nan", "first-window", "rms-energy"], dtype=list(DTYPES),
                   sample_rate="1000")
def test_partly_nan_overlap_regions_are_split_as_before(subject, base_subject, secret_generator):
    """An overlap region with some NaN windows is still split at its quietest finite window, as before: fixed
    corners in both dtypes (a near-silence beside NaN in one window; the region's first window the quietest; windows
    that RMS energy and the mean absolute amplitude rank apart), so no draw decides which wrong fix fails here."""
    gen = secret_generator
    audio = speech(gen, 15000)
    for start in range(int(torch.randint(0, 500, (1,), generator=gen)), 15000, 1600):
        audio = _poisoned(audio, start, start + 150, float("nan"))
    # 128-sample windows: no search region is whole windows, so the last whole window is one the base scores too
    cases = [case(audio, 3.0, 1.0, window=128, name="NaN bursts of 150 samples every 1.6 s")]
    for dtype_name, dtype in DTYPES.items():
        cases.append(case(_quiet_beside_nan(speech(gen, 6000, dtype=dtype)), 3.0, 1.0, window=128,
                          name=f"{dtype_name}, a near-silence beside NaN in one window, a whisper in a finite one"))
        # 4000 samples: one search region (2000-3000), whose last whole window is drawn audio: the base does not
        # score it, and neither corner lets it be the quietest, so a fix that scores it splits as the base here
        # (with 6000 samples a second region of drawn speech let the draw decide that).
        cases.append(case(_nan_after_whispered_first_window(speech(gen, 4000, dtype=dtype)), 3.0, 1.0, window=100,
                          name=f"{dtype_name}, the region's first window the quietest, NaN in two later ones"))
        disagree = _loudness_measures_disagree(speech(gen, 4000, dtype=dtype), 2000, gen)
        disagree[..., 2850:2900] = float("nan")   # window 8 of the region holds NaN; 2, 4 and 6 as their helper says
        cases.append(case(disagree, 3.0, 1.0, window=100,
                          name=f"{dtype_name}, windows RMS and mean amplitude rank apart, NaN in another"))
    _assert_split_as_base(subject, base_subject, cases)


@pytest.mark.criterion("c5")
@pytest.mark.cases(site="find_split_point", dtype=list(DTYPES),
                   search=["quietest-window", "first-of-equal", "last-whole-window", "first-window", "near-tie",
                           "rms-energy"])
def test_find_split_point_finds_the_same_quietest_window(subject, base_subject, secret_generator):
    """find_split_point returns the same index as before on finite audio, the first of equally quiet windows too,
    and not the region's last whole window, which the base's loop does not score (fixed corners in both dtypes);
    the region's first window when it is the quietest; and, in float64, the quieter of two windows whose energies
    differ by less than float32 can tell (energy scored in the audio's own precision); and the window of least RMS
    energy where the mean absolute and the peak amplitude rank other windows first."""
    gen = secret_generator
    cases = []
    for dtype in DTYPES.values():
        wav = audio_cases.quiet_stretches(speech(gen, 8000, dtype=dtype), gen, 6, 150)
        starts = torch.randint(0, 6000, (6,), generator=gen).tolist()
        cases += [_region(wav, s, s + length, window) for s, length, window in
                  zip(starts, (1000, 1500, 800, 2000, 1001, 640), (100, 100, 64, 250, 100, 32))]
        silent = speech(gen, 4000, dtype=dtype)
        silent[1200:1800] = 0.0
        silent[2900:3000] = 0.0
        cases += [_region(silent, 1000, 2000, 100), _region(silent, 1150, 2150, 50),
                  _region(silent, 2000, 3000, 100), _region(silent, 2500, 3000, 50),
                  _region(silent, 1200, 2200, 100)]
        near_tie = speech(gen, 4000, dtype=dtype)
        near_tie[1200:1300] = 1e-3
        near_tie[1500:1600] = 1e-3 * (1 - 1e-9)   # quieter in float64; the same number in float32
        cases.append(_region(near_tie, 1000, 2000, 100))
        cases.append(_region(_loudness_measures_disagree(speech(gen, 4000, dtype=dtype), 1000, gen), 1000, 2000, 100))
    sent = [{k: c[k] for k in ("wav", "start_idx", "end_idx", "min_energy_window")} for c in cases]
    got = subject.call(f"{PROBES}.split_point_runs", cases=sent)
    want = base_subject.call(f"{PROBES}.split_point_runs", cases=sent)
    assert got == want, f"find_split_point on regions {[(c['start_idx'], c['end_idx']) for c in cases]}: " \
                        f"{got}, where the base gives {want}"


@pytest.mark.criterion("c5")
@pytest.mark.cases(site="process-state", dtype=list(DTYPES))
def test_process_state_left_as_before(subject, base_subject, secret_generator):
    """Importing vllm.multimodal.audio and splitting audio whose windows overflow or hold NaN leave numpy's error
    handling and the warning filters as the base leaves them: quieting numpy's overflow warnings is for a
    ``np.errstate`` block, not for the whole process (``np.seterr``, ``warnings.filterwarnings``)."""
    gen = secret_generator
    cases = []
    for dtype_name, dtype in DTYPES.items():
        audio = speech(gen, 9000, dtype=dtype)
        audio[2100:2200] = OVERFLOW[dtype]        # one window of the first region overflows, the others score
        audio[5300:5400] = float("nan")           # one window of the second region is NaN
        cases.append(case(audio, 3.0, 1.0, name=f"{dtype_name}, an overflowing and a NaN window"))
    states = []
    for who in (subject, base_subject):
        outcomes = _split(who, cases)
        assert all("returned" in o for o in outcomes), f"split_audio did not return: {outcomes}"
        states.append(who.call(f"{PROBES}.process_state"))
    got, want = states
    problems = [f"{what} after the calls: {got[what]}, where the base leaves {want[what]}"
                for what in ("numpy_errors", "warning_filters") if got[what] != want[what]]
    assert not problems, "; ".join(problems)


@pytest.mark.criterion("c5")
@pytest.mark.cases(site="public-names")
def test_module_keeps_its_public_names(subject, base_subject):
    """vllm.multimodal.audio still imports and keeps every public name the base defines."""
    before = set(base_subject.call(f"{PROBES}.public_names"))
    after = set(subject.call(f"{PROBES}.public_names"))
    assert before <= after, f"public names gone from vllm.multimodal.audio: {sorted(before - after)}"
