"""What a refusal's error message claims about which GPUs run FP8 ViT attention, checked against the truth.

A message is read as claims, not matched against known phrasings. It is cut into clauses (at ``;``, ``,``, ``:``,
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

Each clause has a polarity: the number of negating words (not, no, cannot, lacks, absent, unavailable,
unsupported, excluded, missing, ...) outside the qualifiers, even or odd ("is not excluded" claims support);
"without", "unless" and "until" mark what follows as what is needed. A mention followed by "is older than",
"is below" ... is itself called old. Then each claim is compared with the truth (SM100 or newer runs it):

- a positive claim ("requires", "supported on", "runs on", a plain mention) whose set holds a capability below 100,
  or hardware without a capability, or an unknown part, is false; one bounded above (a range or a family) is false,
  since every GPU of SM100 or newer runs it; an exclusive one ("only", "exclusively", "restricted to", "limited to",
  "-only") is false unless one of its sets reaches every capability from 100 up;
- a negative claim whose set holds a capability of 100 or more is false;
- the device's own capability named as the subject of the refusal ("not supported on this GPU (9.0)") or as a
  report ("this device reports 9.0", "got sm_90a") claims nothing, unless it is called old on an SM100+ GPU;
- on an SM100+ GPU refused for its cuDNN or backend, calling this GPU old or telling the user to change it is
  false; a negated clause about a market segment holding SM100+ parts (GeForce, consumer, workstation, Jetson) is
  false unless it narrows it to older parts;
- every cuDNN version named is the minimum 9.17.1 or the machine's own, and a stated cuDNN minimum is 9.17.1;
- and some claim names the requirement: SM100-or-newer hardware as what runs it or is needed, or as the bar.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

REQUIRED = 100  # the truth: compute capability 10.0 or newer
INF = math.inf

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
NOT_CUDA = re.compile(r"\b(?:rocm|amd|instinct|radeon|mi\d{2,3}[a-z]?|gfx\d{3,4}[a-z]?|intel|xpu|gaudi\d?|"
                      r"arc|tpus?|hpu|neuron|trainium|inferentia|apple|mps)\b", re.I)
# A model-like name (letters then digits): hardware when it is none of the above and not a data type or format.
PART_LIKE = re.compile(r"\b[A-Z]{1,3}\d{2,4}[A-Z]{0,2}\b")
NOT_HARDWARE = re.compile(r"^(?:FP|BF|INT|UINT|E\d|SM|CC|CUDA|CU|PTX|TF|MX|NV|FA|MMA|SDPA|V|ISO|UTF|X)\d*", re.I)

ARCH = re.compile(r"\b(" + "|".join(ARCHITECTURES) + r")\b", re.I)
SM = re.compile(r"\bsm[ _-]?(\d{2,3})(?![.\d])[a-z]?\b", re.I)
SM_FAMILY = re.compile(r"\bsm[ _-]?(\d{1,2})x\b", re.I)
# A capability as a version number after any word for the GPU ("compute capability 9.0", "cc 9.0", "arch 9.0",
# "SM >= 100"), never across a cuDNN version; "10.x" is a family.
CAPABILITY_WORD = r"(?:capabilit(?:y|ies)|\bcc\b|\barch(?:itecture)?s?|\bcompute|\bgpus?|\bdevices?|\bsm)"
CAPABILITY_NUMBER = re.compile(CAPABILITY_WORD + r"(?:(?!cudnn)[^\d;])*?(?<![\d.])(?:(\d{1,2})\.(\d|x)|(\d{3}))"
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
                          r"works?)\b)", re.I)
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
CUDNN_MINIMUM = re.compile(r"cudnn[^;,]{0,24}?(?:>=|\u2265|=>|at least|version|minimum)\s*v?(\d+)\.(\d+)(?:\.(\d+))?"
                           r"|cudnn\s*v?(\d+)\.(\d+)(?:\.(\d+))?\s*(?:\+|or (?:newer|later|above|higher))", re.I)
CUDNN_NAMED = re.compile(r"cudnn\D{0,24}?v?(\d+)\.(\d+)(?:\.(\d+))?", re.I)


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
        found += [Mention(m.group(0), m.start(), m.end(), value, value) for m in pattern.finditer(clause)]
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


def _qualify(clause: str, mentions: list[Mention]) -> list[Mention]:
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
        if appositive and m.minimum and prev.bounded and prev.lo >= REQUIRED:
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


def _clause_claims(clause: str, context: str, device: int) -> Reading:
    positive, condition_at = _polarity(clause)
    mentions = _qualify(clause, _raw_mentions(clause))
    problems, names = [], False
    only = bool(ONLY.search(clause))
    positives = []
    shown = clause.strip()
    for m in mentions:
        claims_support = (positive or m.start >= condition_at) and not m.called_old
        if m.called_old and not positive:
            claims_support = False
        if m.comparison and m.bar:
            names = names or m.hi + 1 >= REQUIRED  # "this GPU is older than SM100": the bar, no claim
            continue
        if not claims_support:
            if m.no_cuda or m.unknown:
                continue
            if m.bar:
                names = names or m.hi + 1 >= REQUIRED
                continue
            if m.exact and m.lo == device and not (m.called_old or CALLS_IT_OLD.search(clause)) and (
                    device < REQUIRED or REPORTS_THE_DEVICE.search(context)):
                continue  # the subject of the refusal: "not supported on this GPU (capability 12.0)"
            if m.hi >= REQUIRED:
                problems.append(f"says {m.text!r} does not run it ({shown!r})")
            continue
        if m.no_cuda:
            problems.append(f"says {m.text!r}, which runs no CUDA, runs it ({shown!r})")
            continue
        if m.unknown:
            problems.append(f"names hardware it cannot place, {m.text!r}, as running it ({shown!r})")
            continue
        if (m.exact and m.lo == device and not SUPPORT_WORDS.search(clause) and REPORTS_THE_DEVICE.search(context)):
            continue  # the device named ("this device reports 9.0", "got sm_90a")
        positives.append(m)
        if m.lo < REQUIRED and ALTERNATIVE.search(clause) and m.hi < REQUIRED:
            continue  # "on Hopper, use bf16 instead": no claim that it runs FP8
        if m.lo < REQUIRED:
            problems.append(f"says {m.text!r} runs it or is what it needs ({shown!r})")
        elif m.bounded:
            problems.append(f"says only {m.text!r} (up to capability {m.hi:g}) runs it, not SM100 or newer "
                            f"({shown!r})")
        else:
            names = True
    if only and positive and positives and not any(m.hi == INF and m.lo <= REQUIRED for m in positives) \
            and all(m.lo >= REQUIRED for m in positives):
        problems.append(f"says only {', '.join(m.text for m in positives)} runs it, not SM100 or newer ({shown!r})")
    problems += _device_problems(clause, device) + _segment_problems(clause, positive, mentions)
    return Reading(problems, names)


def _device_problems(clause: str, device: int) -> list[str]:
    """On an SM100+ GPU (refused for its cuDNN or backend), what a clause says falsely of the device without naming
    a capability: calls this GPU old, or tells the user to change it."""
    if device < REQUIRED:
        return []
    problems = []
    if DEVICE_REFERENCE.search(clause) and DEVICE_CALLED_OLD.search(clause):
        problems.append(f"calls this SM100+ GPU old ({clause.strip()!r})")
    if (change := GPU_CHANGE.search(clause)) and not re.search(r"cudnn|flashinfer|driver", clause, re.I):
        problems.append(f"tells the user of an SM100+ GPU to {change.group(1).lower()} it ({clause.strip()!r})")
    return problems


def _segment_problems(clause: str, positive: bool, mentions: list[Mention]) -> list[str]:
    """A negated clause about a market segment holding SM100+ parts, unless it narrows it to older parts."""
    segment = SEGMENT.search(clause)
    if not segment or positive or CALLS_IT_OLD.search(clause) or any(m.hi < REQUIRED for m in mentions):
        return []
    return [f"says {segment.group(0)!r} GPUs, among them SM100+ parts, do not run it ({clause.strip()!r})"]


def _cudnn_problems(message: str, cudnn: str) -> list[str]:
    problems = []
    for m in CUDNN_MINIMUM.finditer(message):
        version = tuple(int(g) for g in (m.group(1, 2, 3) if m.group(1) else m.group(4, 5, 6)) if g is not None)
        if version not in ((9, 17, 1), (9, 17)):
            problems.append(f"states cuDNN minimum {'.'.join(map(str, version))} ({m.group(0)!r}; the truth: 9.17.1)")
    own = tuple(int(part) for part in cudnn.split("."))
    for m in CUDNN_NAMED.finditer(message):
        version = tuple(int(g) for g in m.group(1, 2, 3) if g is not None)
        if version not in ((9, 17, 1), (9, 17), own, own[:2]):
            problems.append(f"names cuDNN {'.'.join(map(str, version))} ({m.group(0)!r}), neither the minimum 9.17.1 "
                            f"nor this machine's {cudnn}")
    return problems


def message_problems(message: str, device: int, cudnn: str) -> list[str]:
    """What is false or missing in a refusal's message on a GPU of capability ``device`` (major * 10 + minor) with
    ``cudnn``, read as claims."""
    problems, names_requirement = [], False
    for clause, context in _clauses(message):
        reading = _clause_claims(clause, context, device)
        problems += reading.problems
        names_requirement = names_requirement or reading.names_requirement
    problems += _cudnn_problems(message, cudnn)
    if not names_requirement:
        problems.append("does not name the Blackwell / SM100-or-newer requirement")
    return problems
