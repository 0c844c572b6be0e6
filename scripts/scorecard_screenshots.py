"""Screenshots of a grading run's scorecards, for docs/scorecards/.

Renders the index and three candidate pages (the first ``full``, ``partial`` and ``fail`` candidate by id, or
the ids given; each page's top and its diff) of an output folder that ``grade.py --out`` wrote, at 1280 and
390 px wide, with the system Chromium driven by Playwright. Each page must load without console errors and
without scrolling sideways; the script stops with an error otherwise, so a screenshot is never of a broken page.

    .venv/bin/python scripts/scorecard_screenshots.py --out /tmp/viewer-out [--dest docs/scorecards]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from grader.report import page_name
from grader.scorecard import CHROMIUM_FLAGS, system_chromium

WIDTHS = (1280, 390)
VERDICTS = ("full", "partial", "fail")


def pick_candidates(results: list[dict], chosen: dict[str, str | None]) -> dict[str, str]:
    """verdict -> candidate id: the one asked for, else the first by id with that verdict."""
    picked = {}
    for verdict in VERDICTS:
        ids = sorted(r["id"] for r in results if r["verdict"] == verdict)
        wanted = chosen.get(verdict)
        if wanted is not None and wanted not in {r["id"] for r in results}:
            raise SystemExit(f"{wanted!r} is not a candidate of this run")
        if wanted or ids:
            picked[verdict] = wanted or ids[0]
    return picked


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
    args = parser.parse_args(argv)
    chromium = system_chromium()
    if chromium is None:
        raise SystemExit("no Chromium found (make browser installs it)")
    results = json.loads((args.out / "results.json").read_text())["candidates"]
    pages = {"index": args.out / "index.html"}
    for verdict, cid in pick_candidates(results, vars(args)).items():
        pages[verdict] = args.out / "candidates" / page_name(cid)
    args.dest.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=list(CHROMIUM_FLAGS))
        try:
            for name, html in pages.items():
                for width in WIDTHS:
                    shots = {(): args.dest / f"{name}-{width}.png"}
                    if name != "index":  # the diff, at the foot of the page: from a hunk a failing check names
                        shots[(".hunk:has(span.named)", "#diff")] = args.dest / f"{name}-diff-{width}.png"
                    page = browser.new_page()
                    shoot(page, html.resolve().as_uri(), shots, width, args.max_height)
                    page.close()
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
