"""No judge state in a subject's memory: a subject reads its whole address space (every readable and writable
mapping through /proc/self/mem), its initial environment block, the objects the collector knows and its frames,
looking for the judge's secret, the evidence path and the request, and finds none of them, cold and warm.

The probe is never handed what it looks for: each needle arrives cut in two halves, and it only checks where the
first half is followed by the second; it never puts the halves together, so whatever it finds was there before.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from grader.pipeline.run import path_scrubber, subject_spec
from grader.sandbox.launch import ColdLauncher, WarmPool
from grader.sandbox.protocol import JudgeRequest, base_environment, set_up_judge

SCAN_PROBE = '''
import gc, os, sys

PIECE = 64 << 20


def _found(data, head, tail):
    at = data.find(head)
    while at >= 0:
        if data[at + len(head):at + len(head) + len(tail)] == tail:
            return True
        at = data.find(head, at + 1)
    return False


def _memory(pairs):
    found, regions = set(), 0
    longest = max(len(h) + len(t) for h, t in pairs.values())
    with open("/proc/self/maps") as maps:
        lines = maps.read().splitlines()
    with open("/proc/self/mem", "rb", buffering=0) as mem:
        for line in lines:
            fields = line.split()
            if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            for offset in range(start, end, PIECE):
                try:
                    mem.seek(offset)
                    data = mem.read(min(PIECE + longest, end - offset))
                except (OSError, OverflowError, ValueError):
                    continue
                regions += 1
                found |= {name for name, (h, t) in pairs.items() if _found(data, h, t)}
    return found, regions


def _strings(obj):
    if isinstance(obj, dict):
        return [v for v in list(obj.keys()) + list(obj.values()) if isinstance(v, str)]
    if isinstance(obj, (list, tuple, set)):
        return [v for v in obj if isinstance(v, str)]
    return []


def scan(needles):
    pairs = {name: (head.encode(), tail.encode()) for name, (head, tail) in needles.items()}
    texts = {name: (head, tail) for name, (head, tail) in needles.items()}
    found, regions = _memory(pairs)
    where = {f"memory:{name}" for name in found}
    with open("/proc/self/environ", "rb") as environ:
        block = environ.read()
    where |= {f"environ:{name}" for name, (h, t) in pairs.items() if _found(block, h, t)}
    live = [s for obj in gc.get_objects() for s in _strings(obj)]
    frame = sys._getframe()
    while frame is not None:
        live += [v for v in frame.f_locals.values() if isinstance(v, str)]
        frame = frame.f_back
    live += list(os.environ.values())
    where |= {f"objects:{name}" for name, (h, t) in texts.items() if any(_found(s, h, t) for s in live)}
    return {"found": sorted(where), "regions": regions}
'''

JUDGE_TEST = '''
import json, os
from grader.sandbox.client import subject


def halves(text):
    return [text[:len(text) // 2], text[len(text) // 2:]]


def test_scan():
    evidence = os.environ["GRADER_EVIDENCE_OUT"]
    needles = {"secret": halves(os.environ["GRADER_SECRET"]), "evidence path": halves(evidence),
               "request path": halves(REQUEST_PATH), "subjects file": halves(os.environ["GRADER_SUBJECTS"]),
               "deadline": halves(os.environ["GRADER_DEADLINE"])}
    seen = subject("candidate").call("scan_probe.scan", needles=needles)
    with open(evidence + ".seen", "w") as out:
        json.dump(seen, out)
'''


def scanning_run(tmp_path: Path) -> tuple[JudgeRequest, Path]:
    probes = tmp_path / "probes"
    probes.mkdir(parents=True)
    (probes / "scan_probe.py").write_text(SCAN_PROBE)
    tree = tmp_path / "tree"
    tree.mkdir()
    spec, _ = subject_spec("candidate", tmp_path / "subject", tree, tree, probes, gpu=False, contained=False)
    judge = tmp_path / "judge"
    judge.mkdir()
    log = judge / "pytest.log"
    test = tmp_path / "tests" / "test_scan.py"
    test.parent.mkdir()
    # Where the judge's request used to be written (beside its log): a subject must not know that name either.
    test.write_text(textwrap.dedent(JUDGE_TEST).replace("REQUEST_PATH", repr(str(log.with_suffix(".request.json")))))
    argv = ["-p", "no:cacheprovider", "--rootdir", str(test.parent), str(test)]
    folder = set_up_judge(judge, argv, str(test.parent), tree, tree, False, 120, {"candidate": spec})
    return folder.request, judge / "evidence.jsonl.seen"


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_subject_finds_no_judge_state_in_its_own_memory(tmp_path, own_cache, warm):
    job, seen = scanning_run(tmp_path)
    launcher = WarmPool(1, base_environment(False), ["torch"]) if warm else ColdLauncher()
    try:
        if warm:  # a warm worker that has served a judge before: that run's request must be out of reach too
            earlier, _ = scanning_run(tmp_path / "earlier")
            launcher.run(earlier)
        returncode, timed_out = launcher.run(job)
    finally:
        launcher.close()
    assert (returncode, timed_out) == (0, False), Path(job.log).read_text()[-3000:]
    report = json.loads(seen.read_text())
    assert report["regions"] > 10, report
    assert report["found"] == [], report


def test_the_secret_is_scrubbed_from_every_recorded_message(tmp_path):
    """Defence in depth: should a candidate ever find the secret and raise with it, what the judge records says
    ``<secret>`` instead."""
    secret = "0123456789abcdef0123456789abcdef"
    scrub = path_scrubber(tmp_path / "tree", tmp_path / "scratch", tmp_path / "base", secret)
    assert scrub(f"RuntimeError: found {secret} in a frame") == "RuntimeError: found <secret> in a frame"
