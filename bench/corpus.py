"""A synthetic corpus of realistic size, the same work for every throughput and scaling measurement.

    python bench/corpus.py OUT [--size 1000] [--seed 0] [--bundle ../shared/seed/graded-candidates.txt]

Writes ``OUT/<task>/<name>.diff`` (so ``grade.py OUT`` takes each candidate's task from its folder) and
``OUT/manifest.json`` (name, task, origin, sha256 per candidate). Candidates are distinct diffs (by text), drawn in
this order until ``--size`` is reached:

1. ``sample``: every sample under ``candidates/<task>/``;
2. ``reference``: every task's reference fix;
3. ``seed``: the bundle's whole diffs (cut previews are left out: they say nothing about grading cost);
4. ``mutant``: every first-order mutant of each reference fix (``grader.taskkit.mutate.derive_mutants``);
5. ``combined``: second-order mutants (a mutant of a mutant, two operators together) of each reference, and
   first-order mutants of the samples, drawn at random from ``--seed`` until the corpus is full.

The same ``--size``, ``--seed``, bundle and repository give the same corpus, byte for byte: sources are read in
sorted order and every random draw comes from one ``random.Random(seed)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.core.rubric import all_tasks  # noqa: E402
from grader.pipeline.ingest import parse_bundle  # noqa: E402
from grader.taskkit.mutate import derive_mutants  # noqa: E402

DEFAULT_BUNDLE = REPO.parent / "shared" / "seed" / "graded-candidates.txt"


@dataclass(frozen=True)
class Entry:
    name: str
    task: str
    origin: str
    diff: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.diff.encode("utf-8", "surrogateescape")).hexdigest()


def fixed_sources(bundle: Path | None, tasks: list[str]) -> list[Entry]:
    """Samples, reference fixes and the bundle's whole diffs, in a stable order."""
    found = [Entry(f"sample-{path.stem}", path.parent.name, "sample", path.read_text(encoding="utf-8"))
             for task in tasks for path in sorted((REPO / "candidates" / task).glob("*.diff"))]
    found += [Entry("reference", task, "reference", (REPO / "reference_impl" / f"{task}.diff").read_text())
              for task in tasks]
    if bundle is not None and bundle.is_file():
        found += [Entry(f"seed-{c.id}", c.task, "seed", c.diff) for c in parse_bundle(bundle)
                  if c.task in tasks and c.diff.strip() and not c.at_preview_limit and not c.ingest_error]
    return found


def first_order(tasks: list[str]) -> list[Entry]:
    return [Entry(f"mutant-{i:04d}", task, "mutant", mutant.diff) for task in tasks
            for i, mutant in enumerate(derive_mutants((REPO / "reference_impl" / f"{task}.diff").read_text()))]


def combined(pool: list[Entry], rng: random.Random) -> Entry | None:
    """One more candidate: a mutant of a randomly chosen mutant or sample (two changes together)."""
    parent = rng.choice(pool)
    children = derive_mutants(parent.diff)
    if not children:
        return None
    child = rng.choice(children)
    return Entry("", parent.task, "combined", child.diff)


def build_corpus(size: int, seed: int, bundle: Path | None, tasks: list[str] | None = None) -> list[Entry]:
    """``size`` distinct candidates of ``tasks`` (default: every task; fewer candidates only when the sources and
    their mutants run out)."""
    rng = random.Random(seed)
    tasks = sorted(tasks or all_tasks())
    chosen: list[Entry] = []
    seen: set[str] = set()

    def take(entry: Entry) -> None:
        if len(chosen) < size and entry.diff not in seen:
            seen.add(entry.diff)
            chosen.append(entry)

    for entry in fixed_sources(bundle, tasks) + first_order(tasks):
        take(entry)
    parents = [e for e in chosen if e.origin in ("mutant", "sample")]
    misses = 0
    while parents and len(chosen) < size and misses < 20 * size:
        before = len(chosen)
        entry = combined(parents, rng)
        if entry is not None:
            take(Entry(f"combined-{len(chosen):04d}", entry.task, entry.origin, entry.diff))
        misses += len(chosen) == before
    return chosen


def write_corpus(out: Path, entries: list[Entry]) -> Path:
    for entry in entries:
        folder = out / entry.task
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{entry.name}.diff").write_text(entry.diff, encoding="utf-8")
    manifest = [{**{k: v for k, v in asdict(e).items() if k != "diff"}, "sha256": e.sha256} for e in entries]
    path = out / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write the corpus into (created)")
    parser.add_argument("--size", type=int, default=1000, help="candidates in the corpus (default: 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random draws (default: 0)")
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE,
                        help=f"a bundle whose whole diffs join the corpus (default: {DEFAULT_BUNDLE})")
    args = parser.parse_args(argv)
    entries = build_corpus(args.size, args.seed, args.bundle)
    path = write_corpus(args.out, entries)
    origins: dict[str, int] = {}
    for entry in entries:
        origins[entry.origin] = origins.get(entry.origin, 0) + 1
    print(f"{len(entries)} candidates in {args.out} ({', '.join(f'{k} {v}' for k, v in origins.items())}); "
          f"manifest {path}")
    return 0 if len(entries) == args.size else 1


if __name__ == "__main__":
    sys.exit(main())
