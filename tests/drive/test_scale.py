"""Grading at scale: the synthetic corpus, shards that merge back whole, and progress for long runs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.records import Candidate, CandidateResult, GraderRevision, Incomplete, MergedOutput, RunInfo
from grader.pipeline.ingest import IngestError, shard
from grader.drive.merge import MergeError, merge_documents
from grader.core.records import Graded
from grader.reports.terminal import Pace, ProgressLines

from conftest import run_info

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from corpus import build_corpus, first_order, fixed_sources, write_corpus  # noqa: E402

TASK = "int8-kv-rounding"


def test_corpus_is_distinct_deterministic_and_covers_every_task(tmp_path):
    tasks = sorted(p.name for p in (REPO / "rubrics").iterdir() if (p / "rubric.toml").is_file())
    size = len({e.diff for e in fixed_sources(None, tasks) + first_order(tasks)}) + 40  # 40 drawn at random
    first = build_corpus(size, seed=3, bundle=None)
    again = build_corpus(size, seed=3, bundle=None)
    other = build_corpus(size, seed=4, bundle=None)
    assert [e.diff for e in first] == [e.diff for e in again]
    assert len(first) == size and len({e.diff for e in first}) == size
    assert {e.task for e in first} == {p.name for p in (REPO / "rubrics").iterdir() if (p / "rubric.toml").is_file()}
    assert {e.origin for e in first} == {"sample", "reference", "mutant", "combined"}
    fixed = [e.diff for e in first if e.origin != "combined"]
    assert fixed == [e.diff for e in other if e.origin != "combined"]  # the fixed part does not depend on the seed
    assert [e.diff for e in first if e.origin == "combined"] != [e.diff for e in other if e.origin == "combined"]
    manifest = json.loads(write_corpus(tmp_path, first).read_text())
    assert len(manifest) == size and all((tmp_path / m["task"] / f"{m['name']}.diff").is_file() for m in manifest)


def candidates(n: int) -> list[Candidate]:
    return [Candidate(f"c{i}", f"c{i}.diff", "+x\n", TASK) for i in range(n)]


def result_of(candidate: Candidate) -> CandidateResult:
    return CandidateResult(candidate.id, candidate.task, candidate.source, "full", 1.0, {}, None, "")


def test_shards_are_disjoint_and_cover_the_input():
    every = candidates(10)
    parts = [shard(every, k, 3) for k in (1, 2, 3)]
    assert sorted(c.id for part in parts for c in part) == sorted(c.id for c in every)
    assert not set(c.id for c in parts[0]) & set(c.id for c in parts[1])
    with pytest.raises(IngestError):
        shard(every, 4, 3)


def document(ids: list[str], commit: str = "abc", verdict: str = "full", **run) -> dict:
    return {"schema_version": "2.1",
            "run": run_info(grader=GraderRevision("x", commit, False), gpu="no CUDA GPU", containment="x",
                            **run).to_json(),
            "candidates": [CandidateResult(i, TASK, f"{i}.diff", verdict, 1.0, {}, None, "",
                                           timings={"tests_s": 1.0}).to_json() for i in ids]}


def test_merge_joins_shards_and_refuses_mixed_graders_or_disagreeing_results():
    merged = merge_documents({Path("a"): document(["x", "y"]), Path("b"): document(["z", "y"])})
    assert [r.id for r in merged.results] == ["x", "y", "z"]
    assert merged.origin["z"] == Path("b") and [m.out for m in merged.run.merged_from] == ["a", "b"]
    assert merged.run.backend is None and merged.run.timings == {"wall_s": 2.0} and merged.run.exit_code == 0
    with pytest.raises(MergeError, match="another grader"):
        merge_documents({Path("a"): document(["x"]), Path("b"): document(["z"], commit="def")})
    with pytest.raises(MergeError, match="another grader"):
        merge_documents({Path("a"): document(["x"]),
                         Path("b"): document(["z"], containment_degraded=True, containment_warning="no memory bound")})
    with pytest.raises(MergeError, match="'y'"):
        merge_documents({Path("a"): document(["y"]), Path("b"): document(["y"], verdict="fail")})
    cut = merge_documents({Path("a"): document(["x"]),
                           Path("b"): document(["z"], incomplete=Incomplete("SIGINT", ["w"]))})
    assert cut.run.incomplete.not_graded == ["w"] and cut.run.candidates == 3 and cut.run.exit_code == 130


def test_a_merge_of_degraded_outputs_says_so_as_they_did():
    degraded = {"containment_degraded": True, "containment_warning": "subjects have no memory bound"}
    merged = merge_documents({Path("a"): document(["x"], **degraded), Path("b"): document(["z"], **degraded)})
    assert merged.run.containment_degraded and merged.run.containment_warning == degraded["containment_warning"]


def test_merge_refuses_a_candidate_that_is_not_a_result_of_this_schema():
    older = document(["y"])
    older["candidates"][0]["weight"] = 1.0  # a field no result has
    with pytest.raises(MergeError, match=r"b/results.json: a candidate is not a result .*unknown field 'weight'"):
        merge_documents({Path("a"): document(["x"]), Path("b"): older})


@pytest.mark.parametrize("break_run, why", [
    (lambda run: run.pop("exit_code"), "missing field 'exit_code'"),
    (lambda run: run.update(candidates="3"), r"RunInfo.candidates: expected int"),
    (lambda run: run["grader"].update(branch="main"), r"RunInfo.grader: unknown field 'branch'"),
    (lambda run: run.update(incomplete={"reason": "SIGINT"}), r"RunInfo.incomplete: .*"),
    (lambda run: run.clear(), "missing field"),
])
def test_merge_refuses_an_output_whose_run_section_is_malformed_naming_its_file(break_run, why):
    broken = document(["z"])
    break_run(broken["run"])
    with pytest.raises(MergeError, match=r"b/results.json: its run section is not one of this grader \(.*" + why):
        merge_documents({Path("a"): document(["x"]), Path("b"): broken})


def test_merge_refuses_an_output_without_a_run_section_naming_its_file():
    bare = document(["z"])
    del bare["run"]
    with pytest.raises(MergeError, match=r"b/results.json: its run section .*expected an object, got NoneType"):
        merge_documents({Path("a"): document(["x"]), Path("b"): bare})


def test_run_sections_read_back_equal_to_the_records_they_were_written_from():
    graded = run_info(containment_degraded=True, containment_warning="no memory bound", fail_under=0.5,
                      incomplete=Incomplete("interrupted by SIGINT", ["w"]))
    merged = run_info(backend=None, jobs=None, merged_from=[MergedOutput("a", "2026-12-01T21:00:00+00:00", 2, 0,
                                                                         "local", 1)])
    for run in (graded, merged, run_info()):
        assert RunInfo.from_json(json.loads(json.dumps(run.to_json()))) == run
    # What a record leaves out at its default: a graded run names no merged outputs, a merged run no backend.
    assert "merged_from" not in graded.to_json() and "incomplete" not in run_info().to_json()
    assert {"backend", "jobs"}.isdisjoint(merged.to_json()) and graded.to_json()["containment_warning"] is not None
    assert run_info().to_json()["containment_warning"] is None
def test_pace_counts_only_candidates_graded_in_this_run():
    now = [100.0]
    pace = Pace(10, clock=lambda: now[0])
    every = candidates(3)
    pace.finished(Graded(every[0], result_of(every[0]), stored=True), 1)
    pace.started(every[1])
    pace.started(every[2])
    now[0] = 130.0
    pace.finished(Graded(every[1], result_of(every[1])), 2)
    text = pace.text()
    assert text.startswith("2/10 graded, 2.0/min, ETA 4m00s")
    assert text.endswith("slowest running: c2 (30s)")


def test_a_log_gets_a_progress_line_every_interval():
    stream = io.StringIO()
    with ProgressLines(stream, total=2, every=0.05) as lines:
        lines.started(candidates(1)[0])
        import time
        time.sleep(0.3)
    assert any(line.startswith("progress: 0/2 graded") and "slowest running: c0" in line
               for line in stream.getvalue().splitlines())


def grade(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "grade.py"), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_sharded_gradings_merge_into_the_whole_run(tmp_path):
    """Two shards of three cheap samples, merged, equal the unsharded run (apart from run circumstances)."""
    from grader.reports.report import comparable

    folder = tmp_path / "in" / "xpu-kv-cache-dtypes"
    folder.mkdir(parents=True)
    for sample in sorted((REPO / "candidates" / "xpu-kv-cache-dtypes").glob("*.diff"))[:3]:
        (folder / sample.name).write_text(sample.read_text())
    common = ["--gpu", "off", "--jobs", "1"]
    whole = grade(str(tmp_path / "in"), "--out", str(tmp_path / "whole"), *common, cwd=tmp_path)
    assert whole.returncode in (0, 1), whole.stderr
    for k in (1, 2):
        done = grade(str(tmp_path / "in"), "--shard", f"{k}/2", "--out", str(tmp_path / f"s{k}"), *common,
                     cwd=tmp_path)
        assert done.returncode in (0, 1), done.stderr
    merged = grade("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"),
                   "--junit", str(tmp_path / "m" / "junit.xml"), cwd=tmp_path)
    assert merged.returncode == whole.returncode, merged.stderr
    a = comparable(json.loads((tmp_path / "whole" / "results.json").read_text()))["candidates"]
    b = comparable(json.loads((tmp_path / "m" / "results.json").read_text()))["candidates"]
    assert a == b
    assert len(list((tmp_path / "m" / "candidates").glob("*.html"))) == 3
    assert (tmp_path / "m" / "index.html").is_file() and (tmp_path / "m" / "junit.xml").is_file()


def test_weak_scaling_grades_the_same_candidates_once_per_job():
    from corpus import Entry
    from scaling import original_id, per_run_candidates

    entries = [Entry(f"c{i}", "task", "mutant", f"diff {i}") for i in range(50)]
    runs = per_run_candidates(entries, 3, [1, 2, 4], seed=0)
    assert [len(runs[n]) for n in (1, 2, 4)] == [3, 6, 12]
    drawn = runs[1]
    assert drawn != entries[:3]  # drawn in a seeded order, not the corpus's folder order
    for n in (2, 4):
        # every job's worth is the 1-job run's candidates, each copy a candidate of its own
        assert [e.diff for e in runs[n]] == [e.diff for e in drawn] * n
        assert len({e.name for e in runs[n]}) == 3 * n
        assert {original_id(f"task/{e.name}") for e in runs[n]} == {f"task/{e.name}" for e in drawn}
    assert per_run_candidates(entries, None, [1, 2], seed=0) == {1: entries, 2: entries}


def test_scaling_compares_only_candidates_two_runs_share():
    from scaling import differing

    def run(*results):
        return {"results": {"candidates": [{"id": cid, "verdict": verdict} for cid, verdict in results]}}

    small, large = run(("a", "full")), run(("a", "full"), ("b", "fail"))
    assert differing([small, large]) == []
    small["results"]["candidates"][0]["source"] = "corpus-2/a.diff"  # each run reads its own corpus folder
    large["results"]["candidates"][0]["source"] = "corpus-4/a.diff"
    assert differing([small, large]) == []
    assert differing([small, run(("a", "fail"), ("b", "fail"))]) == ["a"]
    # A copy is the candidate it was made of: its gradings, in any run, must agree with every other.
    assert differing([small, run(("a", "full"), ("a-copy01", "full"))]) == []
    assert differing([run(("a", "full"), ("a-copy01", "fail"))]) == ["a"]


def test_scaling_fails_on_a_differing_decision_not_on_differing_words():
    from scaling import decisions, differing

    def run(verdict, status, message):
        criterion = {"status": status, "rationale": message, "evidence": [{"status": status, "message": message}]}
        return {"results": {"candidates": [{"id": "a", "verdict": verdict, "summary": message,
                                            "criteria": {"c1": criterion}}]}}

    worded = [run("fail", "unmet", "max abs err 9.7e+26"), run("fail", "unmet", "max abs err 2.2e+37")]
    assert differing(worded, decisions) == [] and differing(worded) == ["a"]
    assert differing([run("fail", "unmet", "x"), run("fail", "met", "x")], decisions) == ["a"]
    assert differing([run("fail", "unmet", "x"), run("partial", "unmet", "x")], decisions) == ["a"]


def test_scaling_says_where_a_candidates_result_differs_between_runs():
    from scaling import how_they_differ

    def run(jobs, verdict):
        return {"backend": "local", "jobs": jobs,
                "results": {"candidates": [{"id": "a", "verdict": verdict, "score": 0.5}]}}

    assert how_they_differ([run(4, "full"), run(2, "full")], "a") == []
    assert how_they_differ([run(4, "full"), run(2, "full"), run(1, "fail")], "a") == [
        "local 1 jobs vs local 4 jobs.verdict: 'full' != 'fail'"]


def test_kept_runs_are_reused_only_by_the_grader_that_made_them(tmp_path):
    from scaling import grader_identity, work_folder

    made_by = grader_identity(["int8-kv-rounding"])
    assert set(made_by) == {"engine", "rubrics"} and set(made_by["rubrics"]) == {"int8-kv-rounding"}
    work_folder(tmp_path / "work", {"size": 10, "grader": made_by})
    assert work_folder(tmp_path / "work", {"size": 10, "grader": made_by}) == tmp_path / "work"
    with pytest.raises(SystemExit, match="holds runs of other settings"):
        work_folder(tmp_path / "work", {"size": 10, "grader": dict(made_by, engine="another engine")})


def test_installation_records_are_made_again_in_another_environment(tmp_path, monkeypatch):
    import scaling
    from grader.core.environment import environment_fingerprint

    made = []
    monkeypatch.setattr(scaling, "installation", lambda work, *args: made.append(work) or work / "cache-installation")
    work = tmp_path / "work"
    work.mkdir()
    (work / "installation-made").write_text("python 3.12.3; 202 distributions 0123456789abcdef\n")  # before Ray
    scaling.made_installation(work, tmp_path, 4, None, "off")
    assert made == [work] and (work / "installation-made").read_text().strip() == environment_fingerprint()
    scaling.made_installation(work, tmp_path, 4, None, "off")  # the same environment: kept
    assert made == [work]


def test_the_installation_samples_are_made_again_over_an_earlier_invocations(tmp_path):
    # The lent machine's second call makes the installation records again (Ray changed the environment) in the
    # first call's work folder, where that call's samples already are.
    from cost_model import sample_folders

    first = sample_folders(1, tmp_path, ["int8-kv-rounding", "fp8-moe-lora"])
    again = sample_folders(2, tmp_path, ["int8-kv-rounding"])
    assert again == first and [p.name for p in again.iterdir()] == ["int8-kv-rounding"]
    assert len(list((again / "int8-kv-rounding").glob("*.diff"))) == 2


def test_a_runs_stage_costs_come_from_its_candidates_timings():
    from scaling import stage_costs

    document = {"candidates": [{"timings": {"apply_s": 1.0, "tests_s": 9.0}},
                               {"timings": {"apply_s": 0.5, "tests_s": 1.5}}, {"timings": {}}]}
    stages = stage_costs(document, wall_s=8.0, jobs=2)
    assert stages["apply_s"] == 0.5 and stages["tests_s"] == 3.5  # means over all three candidates
    assert stages["slowest_s"] == 10.0
    assert stages["concurrency"] == 1.5  # 12 candidate-seconds over 8 s of wall time
    assert stages["outside_s"] == 2.0  # 8 s of wall time less 12 s spread over 2 jobs
    assert stage_costs({"candidates": []}, wall_s=0.0, jobs=1)["concurrency"] == 0.0


def test_a_runs_timeline_comes_from_when_its_log_says_each_candidate_was_graded():
    from scaling import timeline

    log = ("    0.50 grading 3 candidate(s) with 2 worker(s)\n"
           "    4.00 [1/3] t/a: t fail 0.20 in 2.0s\n"
           "    6.00 [2/3] t/b: t full 1.00 in 3.0s\n"
           "    9.00 [3/3] t/c: t full 1.00 in 2.5s\n")
    document = {"candidates": [{"id": "t/a", "timings": {"grading_s": 2.0}},
                               {"id": "t/b", "timings": {"grading_s": 4.0}},
                               {"id": "t/c", "timings": {"grading_s": 3.0}},
                               {"id": "t/not-in-the-log", "timings": {"grading_s": 1.0}}]}
    when = timeline(log, document, wall_s=10.0)
    # a from 2 to 4, b from 2 to 6, c from 6 to 9: two graded at once while c waited (2 s to 6 s)
    assert when == {"start_s": 2.0, "queue_s": 4.0, "queue_busy": 1.5, "tail_s": 3.0, "after_s": 1.0}
    assert timeline("no graded lines\n", document, wall_s=1.0) is None


def test_a_runs_machine_use_is_its_share_of_busy_cpu_ticks():
    import os

    from scaling import cpu_ticks, machine_use

    hertz = os.sysconf("SC_CLK_TCK")
    use = machine_use((100, 1000), (100 + 4 * hertz, 1000 + 16 * hertz), candidates=2)
    assert use == {"cpu_busy": 0.25, "cpu_s_per_candidate": 2.0}
    assert machine_use(None, (1, 2), 1) is None and machine_use((5, 10), (5, 10), 1) is None
    now = cpu_ticks()
    assert now is None or 0 <= now[0] <= now[1]


def test_every_measured_cache_draws_from_one_judge_secret_even_when_the_source_had_none(tmp_path):
    from throughput import fresh_cache

    source = tmp_path / "source"
    source.mkdir()
    first, second = (fresh_cache(tmp_path, name, source) for name in ("a", "b"))
    secret = (source / "judge-secret").read_text()
    assert secret and (first / "judge-secret").read_text() == secret == (second / "judge-secret").read_text()


def test_a_bench_cut_short_leaves_its_runs_and_their_table():
    from scaling import runs_printed, table

    printed = ("corpus: 200 candidates (size 200, seed 0); per run: 2 jobs 4, 4 jobs 8\n"
               "local jobs   4:     8 candidates     40.0 s,    12.0 candidates/min\n"
               "      per candidate: tree 0.4 s, tests 16.4 s, slowest 34.7 s; busy 3.2 of 4 jobs; outside 8.2 s\n"
               "local jobs   2:     4 candidates     40.0 s,     6.0 candidates/min\n")
    runs = runs_printed(printed)
    assert [(r["backend"], r["jobs"], r["per_minute"]) for r in runs] == [("local", 4, 12.0), ("local", 2, 6.0)]
    assert "| local | 4 | 40.0 | 12.0 | 2.00 | 1.00 |  |" in table(runs)


def test_repeated_runs_make_one_point_each_at_their_median():
    from scaling import runs_printed, table

    printed = ("local jobs   4:     8 candidates     40.0 s,    12.0 candidates/min\n"
               "local jobs   1:     2 candidates     30.0 s,     4.0 candidates/min\n"
               "local jobs   4:     8 candidates     48.0 s,    10.0 candidates/min, round 2\n"
               "local jobs   1:     2 candidates     34.3 s,     3.5 candidates/min, round 2\n"
               "local jobs   4:     8 candidates     60.0 s,     8.0 candidates/min, round 3\n"
               "local jobs   1:     2 candidates     24.0 s,     5.0 candidates/min, round 3\n")
    lines = table(runs_printed(printed))
    assert len(lines) == 4
    # medians: 48.0 s at 4 jobs, 30.0 s at 1 job; speedup 10.0 / 4.0
    assert "| local | 1 | 30.0 (24.0-34.3, 3 runs) | 4.0 | 1.00 | 1.00 |  |" in lines
    assert "| local | 4 | 48.0 (40.0-60.0, 3 runs) | 10.0 | 2.50 | 0.62 |  |" in lines


def test_a_run_a_later_call_reused_counts_once_in_the_table_of_both_outputs():
    from scaling import runs_printed, table

    first_call = ("local jobs   4:     8 candidates     68.8 s,     7.0 candidates/min\n"
                  "local jobs   1:     2 candidates     71.8 s,     1.7 candidates/min\n")
    second_call = ("local jobs   4:     8 candidates     68.8 s,     7.0 candidates/min, round 1 (reused: measured at "
                   "2026-12-04T13:35:28Z)\n"
                   "local jobs   4:     8 candidates     67.4 s,     7.1 candidates/min, round 2\n")
    runs = runs_printed(first_call + second_call)
    assert [(r["jobs"], r["wall_s"]) for r in runs] == [(4, 68.8), (1, 71.8), (4, 67.4)]
    assert "| local | 4 | 68.1 (67.4-68.8, 2 runs) | 7.0 | 4.12 | 1.03 |  |" in table(runs)
    # the same numbers in another round are another run
    assert len(runs_printed(first_call + first_call.replace("min\n", "min, round 2\n"))) == 4


def test_the_measurements_are_written_after_every_run(tmp_path):
    from argparse import Namespace

    from scaling import write_measurements

    out = tmp_path / "scaling.json"
    args = Namespace(json=out, size=10, seed=0, gpu="off", per_job=2)
    result = {"id": "t/a", "verdict": "full", "summary": "words"}
    run = {"backend": "local", "jobs": 1, "wall_s": 1.0, "per_minute": 60.0,
           "results": {"candidates": [result]}}
    assert write_measurements(args, [], [run], complete=False) == ([], {})
    written = json.loads(out.read_text())
    assert written["complete"] is False and [r["jobs"] for r in written["runs"]] == [1]
    other = dict(run, jobs=2, results={"candidates": [dict(result, verdict="fail")]})
    assert write_measurements(args, [], [run, other], complete=True)[0] == ["t/a"]
    assert json.loads(out.read_text())["complete"] is True


def test_two_long_messages_that_part_late_are_shown_where_they_part():
    from grader.reports.report import differences

    head = "Traceback (most recent call last):\n" + "x" * 200
    found = differences({"m": head + " at 14:46:49 the subject died"}, {"m": head + " at 14:49:56 the subject died"})
    assert len(found) == 1 and "14:46:49" in found[0] and "14:49:56" in found[0] and "from char" in found[0]
    assert differences({"m": "abc"}, {"m": "abd"}) == [".m: 'abc' != 'abd'"]
    assert differences({"m": "ab"}, {"m": "abc"}) == [".m: 'ab' != 'abc'"]


def test_a_runs_log_is_written_as_its_lines_come(tmp_path):
    """A bench run cut by its caller's time limit keeps the lines its grading printed so far."""
    import threading

    from throughput import timed

    go_on = tmp_path / "go-on"
    (tmp_path / "grade.py").write_text(
        "import pathlib, sys, time\n"
        "print('progress: 1/2 graded', flush=True)\n"
        "deadline = time.monotonic() + 20\n"
        f"while not pathlib.Path({str(go_on)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('progress: 2/2 graded', flush=True)\n")
    log = tmp_path / "log.txt"
    seconds = []
    run = threading.Thread(target=lambda: seconds.append(timed([], tmp_path / "cache", repo=tmp_path, log=log)))
    run.start()
    for _ in range(200):
        if log.is_file() and "1/2 graded" in log.read_text():
            break
        run.join(0.05)
    written_while_running = log.is_file() and "1/2 graded" in log.read_text() and run.is_alive()
    go_on.touch()
    run.join()
    assert written_while_running
    assert [line.split(None, 1)[1] for line in log.read_text().splitlines()] == [
        "progress: 1/2 graded", "progress: 2/2 graded"]
    assert seconds and seconds[0] < 20
