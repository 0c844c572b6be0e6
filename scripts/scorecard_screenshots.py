"""Screenshots of a grading run's scorecards, for docs/scorecards/.

Renders the index and three candidate pages (the first ``full``, ``partial`` and ``fail`` candidate by id, or
the ids given; each page's top and its diff) of an output folder that ``grade.py --out`` wrote, and a failing
check linked to the hunk whose added lines ran in it (``linked-check-*``: the first candidate by id with one, or
``--linked ID``; the check, then the hunk its link leads to, ``linked-hunk-*``), at 1280 and 390 px wide, with the system Chromium driven by Playwright. Each page must load without console errors and
without scrolling sideways; the script stops with an error otherwise, so a screenshot is never of a broken page.

    .venv/bin/python scripts/scorecard_screenshots.py --out /tmp/viewer-out [--dest docs/scorecards]

With ``--bundle BUNDLE --judge LABELS`` (a bundle that ``--out`` graded and the judge's labels of it, as
``grade.py calibrate`` reads them) the pages are first written again, into a temporary folder, with the judge's
verdicts beside the grader's; ``--prefix`` names those screenshots apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from grader.pipeline.labels import bundle_ids
from grader.pipeline.ingest import parse_bundle
from grader.core.records import CandidateResult
from grader.reports.report import page_name, results_of, run_of, write_html
from grader.reports.scorecard import CHROMIUM_FLAGS, system_chromium

WIDTHS = (1280, 390)
VERDICTS = ("full", "partial", "fail")


def pick_candidates(results: list[CandidateResult], chosen: dict[str, str | None]) -> dict[str, str]:
    """verdict -> candidate id: the one asked for, else the first by id with that verdict."""
    picked = {}
    for verdict in VERDICTS:
        ids = sorted(r.id for r in results if r.verdict == verdict)
        wanted = chosen.get(verdict)
        if wanted is not None and wanted not in {r.id for r in results}:
            raise SystemExit(f"{wanted!r} is not a candidate of this run")
        if wanted or ids:
            picked[verdict] = wanted or ids[0]
    return picked


def with_judge(out: Path, bundle: Path, labels: Path, into: Path) -> Path:
    """``out``'s results written as pages into ``into`` with the judge's overall verdict of each bundle entry."""
    document = json.loads((out / "results.json").read_text())
    entries = json.loads(labels.read_text())["entries"]
    ids = bundle_ids(bundle)
    judge = {ids[int(e["bundle_position"])]: e["overall"] for e in entries}
    diffs = {c.id: c.diff for c in parse_bundle(bundle)}
    write_html(into, results_of(document), run_of(document), diffs, judge)
    return into


def shoot(page, url: str, shots: dict[tuple[str, ...], Path], width: int, max_height: int) -> None:
    """Load ``url`` and write one screenshot per {CSS selectors: path}, each at most ``max_height`` tall from
    where the first selector that matches starts (no selectors: the top of the page)."""
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(url)
    page.wait_for_load_state("load")
    overflow = page.evaluate("document.documentElement.scrollWidth - innerWidth")
    if errors or overflow > 0:
        raise SystemExit(f"{url} at {width} px: console errors {errors}, {overflow} px of sideways overflow")
    total = page.evaluate("document.documentElement.scrollHeight")
    for selectors, path in shots.items():
        top = page.evaluate("selectors => { const found = selectors.map(s => document.querySelector(s)).find(e => e);"
                            " return found ? found.getBoundingClientRect().top + scrollY : 0; }", list(selectors))
        clip = {"x": 0, "y": top, "width": width, "height": min(total - top, max_height)}
        page.screenshot(path=str(path), clip=clip, full_page=True)
        print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a folder grade.py --out wrote")
    parser.add_argument("--dest", type=Path, default=Path("docs/scorecards"))
    parser.add_argument("--max-height", type=int, default=2200, help="cut pages taller than this (px)")
    for verdict in VERDICTS:
        parser.add_argument(f"--{verdict}", metavar="ID", help=f"the {verdict} candidate to show")
    parser.add_argument("--linked", metavar="ID", help="the candidate whose linked failing check to show")
    parser.add_argument("--bundle", type=Path, help="the bundle --out graded (with --judge)")
    parser.add_argument("--judge", type=Path, help="the judge's labels of that bundle: show its verdicts")
    parser.add_argument("--prefix", default="", help="put before each screenshot's name")
    args = parser.parse_args(argv)
    if (args.bundle is None) != (args.judge is None):
        parser.error("--bundle and --judge go together")
    chromium = system_chromium()
    if chromium is None:
        raise SystemExit("no Chromium found (make browser installs it)")
    results = results_of(json.loads((args.out / "results.json").read_text()))
    with tempfile.TemporaryDirectory(prefix="scorecards-") as scratch:
        pages_at = with_judge(args.out, args.bundle, args.judge, Path(scratch)) if args.judge else args.out
        pages = {"index": pages_at / "index.html"}
        for verdict, cid in pick_candidates(results, vars(args)).items():
            pages[verdict] = pages_at / "candidates" / page_name(cid)
        args.dest.mkdir(parents=True, exist_ok=True)
        shoot_all(chromium, pages, args.dest, args.prefix, args.max_height)
        linked = args.linked or first_linked(results)
        if linked:
            shoot_linked(chromium, pages_at / "candidates" / page_name(linked), args.dest, args.prefix)
    return 0


def first_linked(results: list[CandidateResult]) -> str | None:
    """The first candidate by id with a failing check in which some of the patch's added lines ran."""
    for result in sorted(results, key=lambda r: r.id):
        for criterion in result.criteria.values():
            if any(e.status in ("failed", "error") and e.ran for e in criterion.evidence):
                return result.id
    return None


def shoot_linked(chromium: str, html: Path, dest: Path, prefix: str) -> None:
    """The first failing check with a link to a hunk that ran in it, then (following that link) the hunk."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=list(CHROMIUM_FLAGS))
        try:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 900})
                page.goto(html.resolve().as_uri())
                page.wait_for_load_state("load")
                check = page.locator(".ev:has(a.ran-link)").first
                check.scroll_into_view_if_needed()
                check.screenshot(path=str(dest / f"{prefix}linked-check-{width}.png"))
                target = check.locator("a.ran-link").first.get_attribute("href")
                check.locator("a.ran-link").first.click()
                page.locator(target).screenshot(path=str(dest / f"{prefix}linked-hunk-{width}.png"))
                print(f"wrote {dest}/{prefix}linked-*-{width}.png from {html.name}", file=sys.stderr)
                page.close()
        finally:
            browser.close()


def shoot_all(chromium: str, pages: dict[str, Path], dest: Path, prefix: str, max_height: int) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=list(CHROMIUM_FLAGS))
        try:
            for name, html in pages.items():
                for width in WIDTHS:
                    shots = {(): dest / f"{prefix}{name}-{width}.png"}
                    if name != "index":  # the diff, at the foot of the page: from a hunk a failing check names
                        shots[(".hunk:has(span.named)", "#diff")] = dest / f"{prefix}{name}-diff-{width}.png"
                    page = browser.new_page()
                    shoot(page, html.resolve().as_uri(), shots, width, max_height)
                    page.close()
        finally:
            browser.close()


if __name__ == "__main__":
    sys.exit(main())
