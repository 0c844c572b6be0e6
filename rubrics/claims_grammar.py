"""What an error message claims about which hardware runs a feature, read as claims and checked against a task's
truth (a ``Truth``: the lowest compute capability that runs it, whether hardware without CUDA does, the software
versions the check requires, whether the message must name the requirement). Shared by the hidden tests of every
task whose messages name hardware (vit-fp8-blackwell: SM100; xpu-kv-cache-dtypes: SM89 for fp8, SM80 for bfloat16).

A message is read as claims, not matched against known phrasings. Numbers spelt in words are first written in
figures ("compute capability ten", "nine point zero", "SM one hundred", "ten-series"), and an example list ("e.g.",
"such as") is kept in one clause. It is cut into clauses (at ``;``, ``,``, ``:``,
sentence ends, dashes, "but", before a second verb of need or support joined by "and"/"which", and around a
parenthesis that holds a verb of its own); commas inside a parenthesis do not cut it. In each clause every
hardware mention resolves to a set of capabilities (``major * 10 + minor``), an interval ``[lo, hi]``:

- an architecture (Blackwell ``[100, inf)``, Hopper ``[90, 99]``, Ada 89, Ampere ``[80, 88]`` ...; a "data-center"
  Blackwell is ``[100, 103]``, a consumer one ``[120, 121]``), a part (B200 100, RTX 5090 120, H100 90 ...), an SM
  number (``SM90``, ``sm_100a``), a capability number after or before a word for the GPU ("compute capability
  9.0", "cc 9.0", "arch 9.0", "9.0 GPUs", "SM >= 100"), a family ("10.x", "SM10x": ``[100, 109]``);
- then its qualifier: a minimum ("or newer", "+", "and later", "at least", ">=", "at minimum") opens it above, a
  bar ("older than", "below", "before", "pre-") is everything under it, "newer than"/"above" everything over it,
  "and older" everything up to it, a range ("SM100-SM103", "10.0 to 12.0", "between 10.0 and 12.0") both ends.
  A mention in a parenthesis right after another ("before Blackwell (SM100)") takes that one's qualifier;
- hardware that runs no CUDA (ROCm, AMD, Intel, XPU, TPU, an MI300X, a gfx target) has no capability, and a
  part-like name it cannot place (a letter-and-digits model name it does not know) is unknown.

The software a message names with a version (cuDNN, torch, FlashInfer, CUDA, Triton, the driver, ROCm, oneAPI) is
checked too: for software the truth requires, a stated minimum is the true one and a named version the minimum or
the machine's own; any other software's version is a requirement the check does not make, unless it reports the
machine's ("found torch 2.9").

Each clause has a polarity: the number of negating words (not, no, cannot, lacks, absent, unavailable,
unsupported, excluded, missing, ...) outside the qualifiers, even or odd ("is not excluded" claims support);
"without", "unless" and "until" mark what follows as what is needed. A mention followed by "is older than",
"is below" ... is itself called old. Then each claim is compared with the truth (below, SM100 stands for the
truth's ``required``):

- a positive claim ("requires", "supported on", "runs on", a plain mention) whose set holds a capability below 100,
  or hardware without a capability, or an unknown part, is false; one bounded above (a range or a family) is false,
  since every GPU of SM100 or newer runs it; an exclusive one ("only", "exclusively", "restricted to", "limited to",
  "-only") is false unless one of its sets reaches every capability from 100 up; a bare list of parts or of two or
  more exact capabilities, all of 100 or more ("supported on B200, GB200 and B300"), is false as well; an exact
  capability above the requirement stated as what it needs ("requires SM120") is false; narrowing it to
  data-center GPUs is false;
- hardware without CUDA said to run it is false where the truth says it does not (vit), and said not to run it is
  false where the truth says it does (xpu);
- a negative claim whose set holds a capability of 100 or more is false;
- the device's own capability named as the subject of the refusal ("not supported on this GPU (9.0)") or as a
  report ("this device reports 9.0", "got sm_90a") claims nothing, unless it is called old on an SM100+ GPU;
- on an SM100+ GPU refused for its cuDNN or backend, calling this GPU old or telling the user to change it is
  false; a negated clause about a market segment holding SM100+ parts (GeForce, consumer, workstation, Jetson) is
  false unless it narrows it to older parts;
- every version of required software named is its minimum or the machine's own, a stated minimum the true one;
- and, where the truth asks it, some claim names the requirement: SM100-or-newer hardware as what runs it or is
  needed, or as the bar (a message with no claim it can read then fails).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

INF = math.inf


@dataclass(frozen=True)
class Truth:
    """What a task's messages are checked against."""
    required: int  # the lowest compute capability (major * 10 + minor) that runs the feature
    # Whether hardware that runs no CUDA (Intel XPU, AMD ROCm, ...) runs it too: if so, saying it does not is false;
    # if not, saying it does is.
    without_cuda: bool = False
    # The software whose version the check requires, name -> its minimum (cuDNN 9.17.1); a version the message
    # states for any other software (torch, FlashInfer, CUDA, Triton, the driver) is a requirement the check does
    # not make, and false.
    software: tuple = ()
    # Whether some claim must name the requirement (a message with no readable claim then fails).
    must_name_requirement: bool = True

# --- Hardware words ------------------------------------------------------------------------------------------

ARCHITECTURES = {"blackwell": (100, INF), "rubin": (100, INF), "hopper": (90, 99), "ada": (89, 89),
                 "lovelace": (89, 89), "ampere": (80, 88), "turing": (75, 75), "volta": (70, 72),
                 "pascal": (60, 62), "thor": (110, 110), "orin": (87, 87)}
# A Blackwell narrowed to a segment: data-center parts are SM100/SM103, consumer ones SM120/SM121.
DATA_CENTER = re.compile(r"\b(?:data[- ]?cent(?:er|re)|server|enterprise)\b", re.I)
CONSUMER = re.compile(r"\b(?:consumer|geforce|desktop|gaming)\b", re.I)
PARTS = [(re.compile(r"\bG?B[123]00[a-z]?\b|\bRTX\s?PRO\s?6000\b", re.I), 100),
         (re.compile(r"\bGB10\b|\bDGX\s?Spark\b", re.I), 121),
         (re.compile(r"\bRTX\s?50(?:\d0|[- ]?series)\b|\b50[- ]series\b", re.I), 120),
         (re.compile(r"\bG?H(?:100|200|20|800)\b", re.I), 90),
         (re.compile(r"\bL(?:40S?|4|20)\b|\bRTX\s?40(?:\d0|[- ]?series)\b", re.I), 89),
         (re.compile(r"\bA(?:100|10G?|30|40|800)\b|\bRTX\s?30(?:\d0|[- ]?series)\b", re.I), 80),
         (re.compile(r"\bT4\b", re.I), 75), (re.compile(r"\bV100\b", re.I), 70)]
# Hardware or platforms that run no CUDA: no capability at all.
NOT_CUDA = re.compile(r"\b(?:rocm|amd|instinct|radeon|mi\d{2,3}[a-z]?|gfx\d{3,4}[a-z]?|[cr]dna\s?\d?|intel|xpu|"
                      r"gaudi\d?|habana|arc|ponte vecchio|battlemage|alchemist|lunar lake|(?:data center )?gpu max|"
                      r"non-nvidia|non-cuda|tpus?|hpu|neuron|trainium|inferentia|apple|mps)\b", re.I)
# A model-like name (letters then digits): hardware when it is none of the above and not a data type or format.
PART_LIKE = re.compile(r"\b[A-Z]{1,3}\d{2,4}[A-Z]{0,2}\b")
NOT_HARDWARE = re.compile(r"^(?:FP|BF|INT|UINT|E\d|SM|CC|CUDA|CU|PTX|TF|MX|NV|FA|MMA|SDPA|V|ISO|UTF|X)\d*", re.I)

ARCH = re.compile(r"\b(" + "|".join(ARCHITECTURES) + r")\b", re.I)
SM = re.compile(r"\bsm[ _-]?(\d{2,3})(?![.\d])[a-z]?\b", re.I)
NUMBERED_FAMILY = re.compile(r"(?<![\d.])(\d{1,2})[\s-]*(?:series|family|generation|gen)\b", re.I)
SM_FAMILY = re.compile(r"\bsm[ _-]?(\d{1,2})x\b", re.I)
# A capability as a version number after any word for the GPU ("compute capability 9.0", "cc 9.0", "arch 9.0",
# "SM >= 100"), never across a cuDNN version; "10.x" is a family.
CAPABILITY_WORD = r"(?:capabilit(?:y|ies)|\bcc\b|\barch(?:itecture)?s?|\bcompute|\bgpus?|\bdevices?|\bsm)"
CAPABILITY_NUMBER = re.compile(CAPABILITY_WORD + r"(?:(?!cudnn|cuda\b|torch|flashinfer|triton|driver)[^\d;])*?(?<![\d.])(?:(\d{1,2})\.(\d|x)|(\d{3}))"
                               r"(?![\d.])|(?:capability|\bcc|\bmajor)(?: version)?\s*(?:>=|\u2265|=>|of|:|=|is)?\s*"
                               r"(\d{1,2})(?![\d.\w])", re.I)
NEXT_NUMBER = re.compile(r"\s*(?:-|\u2013|/|\bto\b|\bthrough\b|\bthru\b|\band\b|\bor\b)\s*(\d{1,2})\.(\d|x)(?![\d.])",
                         re.I)
GPU_VERSION = re.compile(r"(?<![\d.])(\d{1,2})\.(\d|x)(?![\d.])"
                         r"(?=[\s-]*(?:\+\s*|(?:or|and)[\s-](?:newer|later|above|higher)"
                         r"[\s-]*)?(?:class\s+|series\s+)?"
                         r"(?:gpus?|devices?|archs?|architectures?|hardware|cards?)\b)", re.I)

# --- Qualifiers ----------------------------------------------------------------------------------------------

FILLER = r"(?:\W+(?:an?|the|compute|capability|sm|cc|gpus?|arch|architecture|of|class|level|nvidia))*\W*"
LEAD_MINIMUM = re.compile(r"(?:>=|\u2265|=>|\bat least|\bat minimum|\bminimum(?: of)?|\bmin\.?|"
                          r"\bno (?:older|earlier|lower) than|\bnot (?:older|earlier|lower) than)" + FILLER + "$",
                          re.I)
LEAD_BELOW = re.compile(r"(?:\bolder than|\bbelow|\bbefore|\bprior to|\bearlier than|\blower than|\bless than|"
                        r"\bunder|<(?!=)|\bpre-?)" + FILLER + "$", re.I)
LEAD_ABOVE = re.compile(r"(?:\bnewer than|\babove|\bafter|\blater than|\bhigher than|\bgreater than|>(?!=)|"
                        r"\bbeyond|\bpost-?)" + FILLER + "$", re.I)
LEAD_BETWEEN = re.compile(r"\bbetween" + FILLER + "$", re.I)
TRAIL_SKIP = (r"(?:\s*\((?![^()]*\b(?:or|and)\s+(?:newer|later|above|higher|better))[^()]*\))?"
              r"(?:[\s-]*(?:class|series|generation|gen|family|gpus?|devices?|hardware|cards?|parts?|"
              r"architectures?))*")
TRAIL_MINIMUM = re.compile(TRAIL_SKIP + r"\s*\(?\s*(?:\+|(?:-|\s)?(?:or|and)(?:-|\s)(?:an?\s+|any\s+)?(?:newer|later|"
                           r"above|higher|greater|better|up|beyond|after|more recent|subsequent)\b|(?:and\s+|or\s+)?"
                           r"(?:onwards?|upwards?|at (?:the )?least|minimum|or any (?:newer|later)\b))", re.I)
TRAIL_MAXIMUM = re.compile(TRAIL_SKIP + r"\s*(?:-|\s)(?:or|and)(?:-|\s)(?:older|earlier|below|lower|prior)\b", re.I)
RANGE_JOIN = re.compile(r"\s*(?:-|\u2013|\bto\b|\bthrough\b|\bthru\b|\band\b)\s*$", re.I)
# "compute capability 9.0 is older than Blackwell": the mention before the comparison is called old.
CALLED_OLD_AFTER = re.compile(r"(?:\s*\([^()]*\))?\s*(?:(?:is|are|was)\s+(?:\w+\s+)?(?:older|earlier|lower|below|"
                              r"prior|too old|not new enough|outdated)\b|<(?!=))", re.I)
COMPARISON = re.compile(r"\b(?:is|are|was|be)\s+(?:\w+\s+)?$", re.I)

# --- Clauses and polarity ------------------------------------------------------------------------------------

CLAUSE_BREAK = re.compile(r";|,|:|\.(?=\s|$)|\s[-\u2013\u2014]\s|\bbut\b|\s(?=(?:and|which|that|while|whereas|"
                          r"so|it)\s+(?:only\s+|also\s+)?(?:requires?|needs?|must|is required|supports?|runs?|"
                          r"works?|is not|are not|isn't|aren't|cannot|can't|does not|doesn't|is unavailable|"
                          r"is unsupported)\b)", re.I)
VERB = re.compile(r"\b(?:is|are|was|runs?|works?|supports?|supported|requires?|needs?|can|cannot|does|do|lacks?|"
                  r"excluded)\b", re.I)
NEGATOR = re.compile(r"\b(?:not|no|never|cannot|can't|isn't|aren't|doesn't|don't|won't|unsupported|lacks?|lacking|"
                     r"absent|unavailable|missing|excluded?|excludes|refuses?|refused|rejects?|rejected|disabled|"
                     r"incompatible|insufficient|too old|outdated|obsolete)\b", re.I)
CONDITION = re.compile(r"\b(?:without|unless|until)\b", re.I)
# A clause about what to do instead ("on Hopper, use bf16 instead", "drop --mm-encoder-attn-dtype fp8 there")
# names older hardware without claiming it runs FP8 ViT attention.
ALTERNATIVE = re.compile(r"\b(?:bf16|fp16|bfloat16|float16|half|fp32|float32|instead|drop|disable|unset|remove|"
                         r"fall(?:s|ing)? back|without fp8|non-fp8)\b", re.I)
ONLY = re.compile(r"\b(?:only|exclusively|solely|restricted to|limited to|reserved for)\b|\w-only\b", re.I)
CALLS_IT_OLD = re.compile(r"\b(older|too old|below|earlier|prior|predates?|pre-blackwell|lacks?|outdated)\b", re.I)

# --- The device, segments, cuDNN ------------------------------------------------------------------------------

# What marks a mention of the device's own hardware as a report of it, not a claim ("this device reports 9.0",
# "your H100", "detected SM90"): without one, naming the device's architecture says it runs FP8 ViT attention.
REPORTS_THE_DEVICE = re.compile(r"\b(this|your|current|detected|reports?|reported|found|here|got|running|saw|seen|"
                                r"given|has|have)\b", re.I)
SUPPORT_WORDS = re.compile(r"\b(supported|supports|works?|runs?|available|fine|ok|okay|usable|use)\b", re.I)
DEVICE_REFERENCE = re.compile(r"\b(?:this|your|the current|current|detected)\s+(?:\w+\s+)?"
                              r"(?:gpus?|devices?|hardware|cards?|accelerators?)\b", re.I)
DEVICE_CALLED_OLD = re.compile(r"\b(older|too old|outdated|obsolete|legacy|below|predates?|pre-blackwell|lacks?|"
                               r"insufficient|not new enough)\b", re.I)
GPU_CHANGE = re.compile(r"\b(upgrade|replace|switch)\b[^;,.]{0,40}?\b(gpus?|devices?|hardware|cards?)\b", re.I)
# Market segments that hold SM100+ parts (GeForce RTX 50x0 and RTX PRO 6000 are SM120, Jetson Thor SM110).
SEGMENT = re.compile(r"\b(geforce|consumer|workstation|desktop|laptop|jetson|rtx(?!\s?(?:pro\s?)?\d))\b", re.I)
SOFTWARE = r"(?P<name>cudnn|torch|pytorch|flashinfer|cuda|triton|nvidia driver|driver|rocm|oneapi)"
VERSION = r"v?(?P<v1>\d+)\.(?P<v2>\d+)(?:\.(?P<v3>\d+))?"
SOFTWARE_MINIMUMS = (re.compile(SOFTWARE + r"[^;,]{0,24}?(?:>=|\u2265|=>|at least|version|minimum)\s*" + VERSION, re.I),
                     re.compile(SOFTWARE + r"\s*" + VERSION + r"\s*(?:\+|or (?:newer|later|above|higher))", re.I))
SOFTWARE_NAMED = re.compile(SOFTWARE + r"(?:(?!cudnn|torch|flashinfer|cuda|triton|driver|capabilit|\bsm|\barch|\.\s)[^\d;,])"
                            r"{0,24}?" + VERSION, re.I)
# Words that state a need ("requires SM120" overstates an SM100 requirement) and words that mark examples.
NEED = re.compile(r"\b(?:requires?|required|needs?|needed|must|minimum|at least)\b", re.I)
EXAMPLE = re.compile(r"\b(?:e\.g\.|eg|such as|for example|for instance|like|including|incl\.)", re.I)


# --- Numbers in words ------------------------------------------------------------------------------------------

UNITS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
         "nine": 9}
TEENS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
         "seventeen": 17, "eighteen": 18, "nineteen": 19}
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
        "ninety": 90}
ORDINALS = {"seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13}
_UNIT = "|".join(UNITS)
_SMALL = "|".join([*TEENS, *UNITS])
_NUMBER_WORDS = re.compile(
    r"\b(?:(?P<hundreds>one|two)[\s-]+hundred(?:[\s-]+(?:and[\s-]+)?(?P<rest>(?:" + "|".join(TENS) + r")(?:[\s-]+(?:"
    + _UNIT + r"))?|" + _SMALL + r"))?"
    r"|(?P<tens>" + "|".join(TENS) + r")(?:[\s-]+(?P<unit>" + _UNIT + r"))?"
    r"|(?P<major>" + _SMALL + r")[\s-]+(?:point|dot)[\s-]+(?P<minor>" + _UNIT + r"|x)"
    r"|(?P<pair_major>" + _SMALL + r")-(?P<pair_minor>" + _UNIT + r")"
    r"|(?P<ordinal>" + "|".join(ORDINALS) + r")(?=[\s-]+gen)"
    r"|(?P<small>" + "|".join([*TEENS, *[u for u in UNITS if u not in ("one", "zero")]]) + r"))\b", re.I)


def _word_value(words: str) -> int:
    words = words.lower().replace("-", " ").split()
    value = 0
    for word in words:
        value += TENS.get(word, 0) + TEENS.get(word, 0) + UNITS.get(word, 0)
    return value


def in_figures(message: str) -> str:
    """The message with numbers spelt in words written in figures: "compute capability ten" -> "... 10", "nine
    point zero" -> "9.0", "SM one hundred" -> "SM 100", "the ninth-generation" -> "9-generation", "ten-series" ->
    "10-series". "one" alone is left as a word (it is rarely a number in a message)."""
    def figure(m: re.Match) -> str:
        if m.group("hundreds"):
            return str(100 * UNITS[m.group("hundreds").lower()] + (_word_value(m.group("rest")) if m.group("rest")
                                                                   else 0))
        if m.group("tens"):
            return str(TENS[m.group("tens").lower()] + (UNITS[m.group("unit").lower()] if m.group("unit") else 0))
        if m.group("major"):
            return f"{_word_value(m.group('major'))}.{m.group('minor') if m.group('minor') == 'x' else _word_value(m.group('minor'))}"
        if m.group("pair_major"):
            return f"{_word_value(m.group('pair_major'))}.{_word_value(m.group('pair_minor'))}"
        if m.group("ordinal"):
            return str(ORDINALS[m.group("ordinal").lower()])
        return str(_word_value(m.group("small")))
    return _NUMBER_WORDS.sub(figure, message)


@dataclass
class Mention:
    text: str
    start: int
    end: int
    lo: float  # the capabilities it names: [lo, hi]; NaN for hardware without one, None-like for unknown
    hi: float
    exact: bool = True       # one capability or part, stated without a qualifier
    bar: bool = False        # "older than X": X is the bar, the set is everything below it
    bounded: bool = False    # an explicit upper bound (a range, a family, a segment)
    no_cuda: bool = False    # hardware that runs no CUDA
    unknown: bool = False    # a part-like name it cannot place
    called_old: bool = False
    minimum: bool = False     # stated as a minimum ("SM100 or newer", ">= 10.0")
    comparison: bool = False  # the bar of a comparison ("is older than SM100", "9.0 < 10.0"), not a claim
    part: bool = False        # a named part (B200, RTX 5090), not a capability or an architecture


def _raw_mentions(clause: str) -> list[Mention]:
    found: list[Mention] = []
    for m in ARCH.finditer(clause):
        lo, hi = ARCHITECTURES[m.group(1).lower()]
        bounded = False
        if m.group(1).lower() == "blackwell":
            near = clause[max(0, m.start() - 24):m.end() + 24]
            if DATA_CENTER.search(near):
                lo, hi, bounded = 100, 103, True
            elif CONSUMER.search(near):
                lo, hi, bounded = 120, 121, True
        found.append(Mention(m.group(0), m.start(), m.end(), lo, hi, exact=hi == lo, bounded=bounded))
    for pattern, value in PARTS:
        found += [Mention(m.group(0), m.start(), m.end(), value, value, part=True)
                  for m in pattern.finditer(clause)]
    for m in SM.finditer(clause):
        value = int(m.group(1)) * (10 if int(m.group(1)) < 20 else 1)
        found.append(Mention(m.group(0), m.start(), m.end(), value, value))
    for m in SM_FAMILY.finditer(clause):
        value = int(m.group(1)) * 10
        found.append(Mention(m.group(0), m.start(), m.end(), value, value + 9, exact=False, bounded=True))
    for pattern in (CAPABILITY_NUMBER, GPU_VERSION):
        for m in pattern.finditer(clause):
            if pattern is CAPABILITY_NUMBER and m.group(3):
                value, start, family = int(m.group(3)), m.start(3), False
            elif pattern is CAPABILITY_NUMBER and m.group(4):
                value, start, family = int(m.group(4)) * 10, m.start(4), False
            else:
                family = m.group(2).lower() == "x"
                value, start = int(m.group(1)) * 10 + (0 if family else int(m.group(2))), m.start(1)
            found.append(Mention(clause[start:m.end()], start, m.end(), value, value + 9 if family else value,
                                 exact=not family, bounded=family))
    # A second capability joined to one ("10.0 and 12.0", "9.0 to 12.x", "9.0, 10.0"): no word for the GPU before it.
    for first in [f for f in found if re.fullmatch(r"\d{1,2}\.[\dx]|\d{3}", f.text, re.I)]:
        if m := NEXT_NUMBER.match(clause, first.end):
            family = m.group(2).lower() == "x"
            value = int(m.group(1)) * 10 + (0 if family else int(m.group(2)))
            found.append(Mention(clause[m.start(1):m.end()], m.start(1), m.end(), value,
                                 value + 9 if family else value, exact=not family, bounded=family))
    # A capability family in figures (from words: "ten-series", "the ninth-generation GPUs"): 10.x.
    for m in NUMBERED_FAMILY.finditer(clause):
        if 7 <= (major := int(m.group(1))) <= 20:
            found.append(Mention(m.group(0), m.start(), m.end(), major * 10, major * 10 + 9, exact=False, bounded=True))
    for m in NOT_CUDA.finditer(clause):
        found.append(Mention(m.group(0), m.start(), m.end(), math.nan, math.nan, no_cuda=True))
    for m in PART_LIKE.finditer(clause):
        if not NOT_HARDWARE.match(m.group(0)):
            found.append(Mention(m.group(0), m.start(), m.end(), math.nan, math.nan, unknown=True))
    # One mention per place: where two overlap, the longer (then the known one) stands.
    found.sort(key=lambda x: (x.start, -(x.end - x.start), x.unknown))
    kept: list[Mention] = []
    for mention in found:
        if kept and mention.start < kept[-1].end:
            continue
        kept.append(mention)
    return kept


def _qualify(clause: str, mentions: list[Mention], required: int) -> list[Mention]:
    """Apply each mention's qualifier; join ranges; a parenthesised mention right after another takes its
    qualifier."""
    out: list[Mention] = []
    for i, m in enumerate(mentions):
        if m.no_cuda or m.unknown:
            out.append(m)
            continue
        before, after = clause[:m.start], clause[m.end:]
        prev = out[-1] if out else None
        appositive = prev is not None and re.fullmatch(r"[\s\w-]{0,16}?\(\s*[^()]*?", clause[prev.end:m.start]) \
            and "(" in clause[prev.end:m.start]
        if prev is not None and not prev.no_cuda and not prev.unknown and RANGE_JOIN.fullmatch(
                clause[prev.end:m.start]) and (LEAD_BETWEEN.search(clause[:prev.start])
                                                or not re.search(r"\band\b", clause[prev.end:m.start], re.I)):
            prev.hi, prev.exact, prev.bounded = m.hi, False, True
            prev.text = clause[prev.start:m.end]
            prev.end = m.end
            continue
        if LEAD_MINIMUM.search(before) or TRAIL_MINIMUM.match(after):
            m.hi, m.exact, m.bounded, m.minimum = INF, False, False, True
        elif below := LEAD_BELOW.search(before):
            m.lo, m.hi, m.exact, m.bar, m.bounded = -INF, m.lo - 1, False, True, False
            m.comparison = bool(COMPARISON.search(before[:below.start()]) or below.group(0).startswith("<"))
        elif LEAD_ABOVE.search(before):
            m.lo, m.hi, m.exact, m.bounded = m.hi + 1, INF, False, False
        elif TRAIL_MAXIMUM.match(after):
            m.lo, m.exact = -INF, False
        elif appositive and not prev.exact:
            if prev.bar:
                m.lo, m.hi, m.bar, m.comparison = -INF, m.lo - 1, True, prev.comparison
            elif prev.hi == INF:
                m.hi = INF
            m.exact = False
        if appositive and m.minimum and prev.bounded and prev.lo >= required:
            prev.hi, prev.bounded = INF, False  # "a data-center Blackwell GPU (SM100 or newer)": it says what it means
        if CALLED_OLD_AFTER.match(after):
            m.called_old = True
        out.append(m)
    return out


def _split_parentheses(clause: str) -> list[str]:
    """A parenthesis that holds a verb of its own, or reports the device ("(this GPU: compute capability 10.0)"), is
    a clause of its own."""
    inner = [p for p in re.findall(r"\(([^()]*)\)", clause)
             if VERB.search(p) or (DEVICE_REFERENCE.search(p) and _raw_mentions(p))]
    for p in inner:
        clause = clause.replace(f"({p})", " ")
    return [clause, *inner]


def _split(message: str) -> list[str]:
    """Cut at CLAUSE_BREAK outside parentheses."""
    pieces, depth, start = [], 0, 0
    spans = [(m.start(), m.end()) for m in CLAUSE_BREAK.finditer(message)]
    depth_at = []
    for ch in message:
        depth_at.append(depth)
        depth += (ch == "(") - (ch == ")")
        depth = max(depth, 0)
    for s, e in spans:
        if depth_at[s] if s < len(depth_at) else 0:
            continue
        pieces.append((message[start:s], message[s:e]))
        start = e
    pieces.append((message[start:], ""))
    return pieces


def _fragment_of_next(clause: str) -> bool:
    """A piece with no verb that leads into the next one: a phrase opened by a preposition ("on Hopper, use bf16",
    "Without an SM100 GPU, it cannot run") or a bare list of hardware ("Hopper, Ada and Ampere are not ...")."""
    if VERB.search(clause) or NEGATOR.search(clause) or ONLY.search(clause):
        return False
    if re.match(r"\s*(?:on|for|with|without|in|under|at|from)\b", clause, re.I):
        return True
    rest = clause
    for m in sorted(_raw_mentions(clause), key=lambda x: -x.start):
        rest = rest[:m.start] + rest[m.end:]
    return bool(_raw_mentions(clause)) and re.fullmatch(r"[\s()/&+-]*(?:(?:and|or|gpus?)[\s()/&+-]*)*", rest,
                                                        re.I) is not None


def _clauses(message: str) -> list[tuple[str, str]]:
    """The message's clauses, each with its context for a report of the device: the clause itself, and the one
    before it where a colon joins them ("this device: compute capability 9.0")."""
    pieces = []
    for clause, cut in _split(message):
        if pieces and pieces[-1][1].strip() == "," and _fragment_of_next(pieces[-1][0]):
            clause = pieces.pop()[0] + ", " + clause
        pieces.append((clause, cut))
    out = []
    for i, (clause, _) in enumerate(pieces):
        context = (pieces[i - 1][0] + " " if i and pieces[i - 1][1].strip() == ":" else "") + clause
        out += [(part, context) for part in _split_parentheses(clause)]
    return out


def _qualifier_spans(clause: str) -> str:
    """The clause with its qualifying phrases blanked, so "older than" or "no older than" is not read as a
    negation."""
    for pattern in (r"\b(?:no|not) (?:older|earlier|lower) than\b", r"\b(?:older|earlier|lower|newer) than\b",
                    r"\bpre-"):
        clause = re.sub(pattern, " ", clause, flags=re.I)
    return clause


def _polarity(clause: str) -> tuple[bool, int]:
    """Whether the clause claims support (True) or its absence (False), and where a condition begins."""
    condition = CONDITION.search(clause)
    head = clause[:condition.start()] if condition else clause
    negations = len(NEGATOR.findall(_qualifier_spans(head)))
    if condition:
        negations += 1
    return negations % 2 == 0, condition.end() if condition else len(clause)


@dataclass
class Reading:
    problems: list[str]
    names_requirement: bool


def _clause_claims(clause: str, context: str, device: float, truth: Truth) -> Reading:
    required = truth.required
    positive, condition_at = _polarity(clause)
    mentions = _qualify(clause, _raw_mentions(clause), required)
    problems, names = [], False
    only = bool(ONLY.search(clause))
    positives = []
    shown = clause.strip()
    for m in mentions:
        claims_support = (positive or m.start >= condition_at) and not m.called_old
        if m.called_old and not positive:
            claims_support = False
        if m.comparison and m.bar:
            names = names or m.hi + 1 >= required  # "this GPU is older than SM100": the bar, no claim
            continue
        if not claims_support:
            if m.no_cuda and truth.without_cuda:
                problems.append(f"says {m.text!r} does not run it ({shown!r}); it does")
                continue
            if m.no_cuda or m.unknown:
                continue
            if m.bar:
                names = names or m.hi + 1 >= required
                continue
            if m.exact and m.lo == device and not (m.called_old or CALLS_IT_OLD.search(clause)) and (
                    device < required or REPORTS_THE_DEVICE.search(context)):
                continue  # the subject of the refusal: "not supported on this GPU (capability 12.0)"
            if m.hi >= required:
                problems.append(f"says {m.text!r} does not run it ({shown!r})")
            continue
        if m.no_cuda:
            if not truth.without_cuda:
                problems.append(f"says {m.text!r}, which runs no CUDA, runs it ({shown!r})")
            continue
        if m.unknown:
            problems.append(f"names hardware it cannot place, {m.text!r}, as running it ({shown!r})")
            continue
        if (m.exact and m.lo == device and not SUPPORT_WORDS.search(clause) and REPORTS_THE_DEVICE.search(context)):
            continue  # the device named ("this device reports 9.0", "got sm_90a")
        positives.append(m)
        if m.lo < required and ALTERNATIVE.search(clause) and m.hi < required:
            continue  # "on Hopper, use bf16 instead": no claim that it runs FP8
        if m.lo < required:
            problems.append(f"says {m.text!r} runs it or is what it needs ({shown!r})")
        elif m.bounded:
            problems.append(f"says only {m.text!r} (up to capability {m.hi:g}) runs it, not SM{required} or newer "
                            f"({shown!r})")
        elif m.lo > required and not m.part and NEED.search(clause) and not EXAMPLE.search(clause) \
                and not _lists_what_a_minimum_holds(clause, m, positives[:-1], required):
            problems.append(f"states {m.text!r} as what it needs, above the requirement SM{required} ({shown!r})")
        else:
            names = True
    if only and positive and positives and not any(m.hi == INF and m.lo <= required for m in positives) \
            and all(m.lo >= required for m in positives):
        problems.append(f"says only {', '.join(m.text for m in positives)} runs it, not SM{required} or newer "
                        f"({shown!r})")
    elif positive and not only and _is_a_list_of_parts(clause, positives, required):
        problems.append(f"names {', '.join(m.text for m in positives)} as what runs it: a list that leaves out other "
                        f"GPUs of SM{required} or newer ({shown!r})")
    if positive and positives and DATA_CENTER.search(clause) and all(m.lo >= required for m in positives) \
            and not EXAMPLE.search(clause):
        problems.append(f"narrows it to data-center GPUs; consumer parts of SM{required} or newer run it too "
                        f"({shown!r})")
    problems += _device_problems(clause, device, required) + _segment_problems(clause, positive, mentions, required)
    return Reading(problems, names)


def _lists_what_a_minimum_holds(clause: str, m: Mention, before: list[Mention], required: int) -> bool:
    """A mention in a parenthesis after the true minimum ("an SM89+ GPU (Ada, Hopper, Blackwell)") lists what the
    minimum holds; it does not state what is needed."""
    inside = clause[:m.start].count("(") > clause[:m.start].count(")")
    return inside and any(p.minimum and p.lo == required for p in before)


def _is_a_list_of_parts(clause: str, positives: list[Mention], required: int) -> bool:
    """A positive clause whose hardware is only named parts or exact SM numbers of the requirement or newer (two or
    more, or one part), none of them open above, and no "e.g."/"such as": those are all it says runs it."""
    if not positives or EXAMPLE.search(clause) or any(not m.exact or m.lo < required for m in positives):
        return False
    return len(positives) >= 2 or positives[0].part


def _device_problems(clause: str, device: float, required: int) -> list[str]:
    """On a GPU that meets the requirement (refused for something else), what a clause says falsely of the device
    without naming a capability: calls this GPU old, or tells the user to change it."""
    if not device >= required:
        return []
    problems = []
    if DEVICE_REFERENCE.search(clause) and DEVICE_CALLED_OLD.search(clause):
        problems.append(f"calls this SM{required}+ GPU old ({clause.strip()!r})")
    if (change := GPU_CHANGE.search(clause)) and not re.search(r"cudnn|flashinfer|driver", clause, re.I):
        problems.append(f"tells the user of an SM{required}+ GPU to {change.group(1).lower()} it ({clause.strip()!r})")
    return problems


def _segment_problems(clause: str, positive: bool, mentions: list[Mention], required: int) -> list[str]:
    """A negated clause about a market segment holding parts that run it, unless it narrows it to older parts."""
    segment = SEGMENT.search(clause)
    if not segment or positive or CALLS_IT_OLD.search(clause) or any(m.hi < required for m in mentions):
        return []
    return [f"says {segment.group(0)!r} GPUs, among them SM{required}+ parts, do not run it ({clause.strip()!r})"]


def _version(groups) -> tuple:
    return tuple(int(g) for g in groups if g is not None)


def _software_problems(message: str, truth: Truth, installed: dict) -> list[str]:
    """Every version the message names: for software the check requires (``truth.software``), the minimum or this
    machine's own (``installed``), a stated minimum the true one; for any other software, only this machine's own
    as a report ("found torch 2.9"), never a requirement."""
    problems = []
    minimums = dict(truth.software)
    for m in (m for pattern in SOFTWARE_MINIMUMS for m in pattern.finditer(message)):
        name = _software_name(m.group("name"))
        version = _version(m.group("v1", "v2", "v3"))
        if name in minimums and version not in (minimums[name], minimums[name][:2]):
            problems.append(f"states {name} minimum {'.'.join(map(str, version))} ({m.group(0)!r}; the truth: "
                            f"{'.'.join(map(str, minimums[name]))})")
    for m in SOFTWARE_NAMED.finditer(message):
        name = _software_name(m.group("name"))
        version = _version(m.group("v1", "v2", "v3"))
        own = installed.get(name)
        if name in minimums:
            if version not in (minimums[name], minimums[name][:2]) and own not in (version, None) \
                    and own[:len(version)] != version:
                problems.append(f"names {name} {'.'.join(map(str, version))} ({m.group(0)!r}), neither the minimum "
                                f"{'.'.join(map(str, minimums[name]))} nor this machine's "
                                f"{'.'.join(map(str, own))}")
        elif not REPORTS_THE_DEVICE.search(message[max(0, m.start() - 24):m.start()]):
            problems.append(f"states a {name} version ({m.group(0)!r}), a requirement the check does not make")
    return problems


def _software_name(word: str) -> str:
    word = word.lower()
    return {"pytorch": "torch", "nvidia driver": "driver", "driver": "driver"}.get(word, word)


def _examples_joined(message: str) -> str:
    """An example list kept in one clause: "e.g." spelt out (its dots end no sentence) and the commas after an
    example marker, up to the end of its sentence, parenthesis or clause, read as "and"."""
    message = re.sub(r"\be\.\s?g\.", "for example", message, flags=re.I)
    return re.sub(EXAMPLE.pattern + r"[^;()]*?(?=[;()]|\.(?:\s|$)|$)",
                  lambda m: m.group(0).replace(",", " and"), message, flags=re.I)


def message_problems(message: str, device: float, truth: Truth, installed: dict | None = None) -> list[str]:
    """What is false or missing in a refusal's message on a GPU of capability ``device`` (major * 10 + minor; NaN
    for a device that reports none) with the software versions ``installed`` ({"cudnn": (9, 16, 0)}), read as claims
    against ``truth``. Numbers spelt in words ("compute capability ten", "nine point zero") are read as figures."""
    message = _examples_joined(in_figures(message))
    problems, names_requirement = [], False
    for clause, context in _clauses(message):
        reading = _clause_claims(clause, context, device, truth)
        problems += reading.problems
        names_requirement = names_requirement or reading.names_requirement
    problems += _software_problems(message, truth, installed or {})
    if truth.must_name_requirement and not names_requirement:
        problems.append(f"does not name the requirement (SM{truth.required} or newer) in any claim it can read")
    return problems
