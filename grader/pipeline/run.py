"""Run a task's hidden tests against one patched tree: a judge process decides, sandboxed subjects execute.

The judge (pytest, the hidden tests, the evidence plugin) never imports the candidate's code; it reaches the
patched tree only through probe calls answered by a subject (``grader.sandbox``) or by reading its files. The
evidence file lives in the judge's folder, which no subject can see. Parsing the evidence is kept here, apart
from scoring.
"""

from __future__ import annotations

import difflib
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from grader.pipeline.apply import apply_diff, hidden_roots, make_tree
from grader.core.paths import cache_dir, cache_lock, make_import_root, remove_tree, scratch_root
from grader.core.records import DEFAULT_TIMEOUT_S, BuiltBase, RunReport, RunStatus, TestOutcome, TestStatus
from grader.core.environment import unmet_message
from grader.core.identity import grading_identity
from grader.core.rubric import REPO_ROOT, RUBRICS_DIR, SHARED_PROBES, Task
from grader.core.sanitize import clean
from grader.pipeline.diffparse import parse_diff
from grader.sandbox import contain, protocol
from grader.sandbox.budget import CallTimes
from grader.sandbox.launch import JudgeLost, Launcher, describe_exit
from grader.sandbox.protocol import SandboxSpec, SubjectSpec, base_environment, set_up_judge, subject_environment
from grader.sandbox.leftovers import owned_name
from grader.sandbox.watchdog import gpu_memory_bound
from grader.core.probe_modules import probe_modules

EVIDENCE_CAP_BYTES = 64 << 20
# Object reprs in assertion output ("<X object at 0x7f...>") differ between identical runs.
OBJECT_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# So do the times of vLLM's log lines ("INFO 12-01 15:51:11 [file.py:12] ..."), which a probe's captured output
# can carry into a failure message.
LOG_LINE_TIME = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?")


def stage_probes(task: Task, folder: Path) -> Path:
    """Copy the task's probe modules and the shared ones into one folder the subject may read."""
    folder.mkdir(parents=True)
    for source in [SHARED_PROBES, task.folder / "probes"]:
        for module in sorted(source.glob("*.py")) if source.is_dir() else []:
            if (folder / module.name).exists():
                raise FileExistsError(f"probe module {module.name} of {task.id} shadows a shared one")
            shutil.copyfile(module, folder / module.name)
            os.chmod(folder / module.name, 0o644)
        for data in sorted(source.glob("*.json")) if source.is_dir() else []:
            shutil.copyfile(data, folder / data.name)
            os.chmod(folder / data.name, 0o644)
    os.chmod(folder, 0o755)
    return folder


def subject_spec(name: str, folder: Path, import_root: Path, tree: Path, probes: Path, gpu: bool,
                 contained: bool, memory_bytes: int | None = None,
                 also_pass: tuple[str, ...] = ()) -> tuple[SubjectSpec, contain.Sandbox | None]:
    home = folder / "home"
    home.mkdir(parents=True, exist_ok=True)
    # CUDA reserves far more address space than it uses: on a GPU run memory is capped by the cgroup alone.
    box = contain.prepare(home, visible=[tree, import_root, probes], hidden=hidden_roots(),
                          as_bytes=resource.RLIM_INFINITY if gpu else contain.ADDRESS_SPACE_BYTES,
                          memory_bytes=memory_bytes) if contained else None
    if box is not None and gpu:
        box.spec["gpu_memory_bytes"] = gpu_memory_bound(box.spec["memory_bytes"])  # see grader.sandbox.watchdog
    spec = SubjectSpec(name, SandboxSpec.from_json(box.spec) if box else None,
                       subject_environment(home, gpu, also_pass), (str(import_root), str(probes)),
                       tuple(contain.interpreter_paths()), str(home), str(folder / "subject.log"))
    return spec, box


ENVIRONMENT_PROBE = """
import importlib, json, sys
found = {}
try:
    import subject_setup  # the stand-ins every subject installs first
except BaseException as exc:
    found["subject_setup"] = [type(exc).__name__, str(exc)[:300], getattr(exc, "name", None)]
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        found[name] = [type(exc).__name__, str(exc)[:300], getattr(exc, "name", None)]
loaded = sorted(name for name in sys.modules if name == "vllm" or name.startswith("vllm."))
print(json.dumps({"failures": found, "loaded": loaded}))
"""
_ENVIRONMENT_CHECKED: dict[str, str | None] = {}
_ENVIRONMENT_LOCK = threading.Lock()


def environment_problem(task: Task, base_tree: Path, base_key: str, gpu: bool) -> str | None:
    """Why the grading environment cannot run this task's hidden tests, or None: each requirement the task declares
    (base.toml's ``[environment] requires``) must be installed at a version it allows, and the task's modules (the
    files pinned in ``[base.blobs]`` and every base module its probes and tests name) are imported from the
    unpatched base, as a subject would; a module missing outside vLLM is the environment's fault.

    Checked once per task, base, environment (its installed distributions), declared requirements, module list and
    GPU switch: a pass is remembered in the cache folder, a problem only for this process (it is never cached)."""
    pinned, probed = environment_modules(task, base_tree)
    # Containment does not change what imports: the check is the same for both switches.
    key = grading_identity(task, gpu, None).key("environment check", base_key, *task.base.requires, "modules",
                                                *pinned, "probed", *probed)[:24]
    passed = cache_dir() / "environment-ok" / key
    with _ENVIRONMENT_LOCK:
        if key not in _ENVIRONMENT_CHECKED:
            _ENVIRONMENT_CHECKED[key] = None if passed.is_file() else \
                _check_environment(task, base_tree, gpu, pinned, probed)
            if _ENVIRONMENT_CHECKED[key] is None:
                passed.parent.mkdir(parents=True, exist_ok=True)
                passed.touch()
        return _ENVIRONMENT_CHECKED[key]


def environment_modules(task: Task, base_tree: Path) -> tuple[list[str], list[str]]:
    """The modules the environment check imports: those of the files pinned in ``[base.blobs]``, and the other
    base modules the task's probes and tests name."""
    pinned = [p[:-3].replace("/", ".") for p in task.base.blobs if p.startswith("vllm/") and p.endswith(".py")]
    pinned = [m.removesuffix(".__init__") for m in pinned
              if (base_tree / (m.replace(".", "/") + ".py")).exists() or m.endswith(".__init__")]
    probed = [m for m in probe_modules(task.folder, base_tree) if m not in pinned]
    return pinned, probed


def install_hint(packages: list[str]) -> str:
    """The command that installs what is missing, and where to declare it so that setup installs it next time."""
    return (f"install with `{sys.executable} -m pip install {' '.join(packages)}` (and declare it in the task's "
            "base.toml [environment] requires, which `grade.py task-requirements --install` installs)")


def _check_environment(task: Task, base_tree: Path, gpu: bool, pinned: list[str], probed: list[str]) -> str | None:
    declared = unmet_message(task.id, task.base.requires)
    if declared:
        return declared
    root = Path(tempfile.mkdtemp(prefix=owned_name("grader-env")))
    try:
        os.symlink(base_tree / "vllm", root / "vllm")
        env = dict(base_environment(gpu), HOME=str(root), TMPDIR=str(root),
                   PYTHONPATH=os.pathsep.join([str(root), str(SHARED_PROBES)]))
        env[protocol.GPU] = protocol.gpu_flag(gpu)
        done = subprocess.run([sys.executable, "-c", ENVIRONMENT_PROBE, *pinned, *probed], env=env, cwd=root,
                              capture_output=True, text=True, timeout=900)
        failures = json.loads(done.stdout.strip().splitlines()[-1])["failures"] if done.stdout.strip() else None
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError, KeyError, TypeError) as exc:
        failures = {"(probe)": [type(exc).__name__, str(exc)[:300], None]}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if failures is None:
        return f"the environment check of {task.id} printed nothing: {done.stderr[-300:]}"
    missing = sorted({info[2] for info in failures.values() if info[0] == "ModuleNotFoundError" and info[2]
                      and info[2].split(".")[0] != "vllm"})
    if missing:
        return (f"the grading environment lacks {', '.join(missing)}, which the unpatched {task.id} base needs to "
                f"import {', '.join(sorted(failures))}; {install_hint([m.split('.')[0] for m in missing])}")
    # A probed module that fails for another reason (one that needs a GPU to import) is the probe's to report: the
    # test that loads it fails or skips as it would in grading. A pinned one must import.
    broken = {name: info for name, info in failures.items() if name not in probed}
    if broken:
        name, info = next(iter(broken.items()))
        return f"the unpatched {task.id} base fails to import {name} here: {info[0]}: {info[1]}"
    return None


def pytest_args(task: Task, select: str | None = None) -> list[str]:
    # Short tracebacks: each entry's place and failing line, not its arguments' reprs. A long one formats every
    # tensor argument of every frame of every failing check in the judge (0.8 s a candidate, fp8-moe-lora on a
    # 2-core machine), for words no verdict reads; places (file:line) and the E lines are kept.
    args = ["-c", str(RUBRICS_DIR / "pytest.ini"), "--rootdir", str(RUBRICS_DIR), "-p", "grader.pipeline.pytest_evidence",
            "--tb=short", str(task.tests_dir)]
    return args + (["-k", select] if select else [])


def added_lines(base_tree: Path, tree: Path, paths: list[str]) -> dict[str, list[int]]:
    """The lines of the patched tree that the patch added (or rewrote), by path, for the Python files of vLLM it
    changed: the lines a subject can trace. Read off the two trees, so offsets and fuzz are already in them."""
    found = {}
    for path in sorted(set(paths)):
        new_file = tree / path
        if not (path.startswith("vllm/") and path.endswith(".py") and new_file.is_file()):
            continue
        old_file = base_tree / path
        old = old_file.read_text(errors="replace").splitlines() if old_file.is_file() else []
        new = new_file.read_text(errors="replace").splitlines()
        matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
        lines = [j + 1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("replace", "insert")
                 for j in range(j1, j2)]
        if lines:
            found[path] = lines
    return found


def trace_request(judge: Path, import_root: Path, lines: dict[str, list[int]]) -> dict[str, list[int]]:
    """Write the judge's record of what the candidate's subject traces (``protocol.ADDED_LINES``); the subject's
    share of it: each file as its code objects name it, with its added lines."""
    by_name = {str(import_root / path): {"path": path, "lines": numbers} for path, numbers in lines.items()}
    (judge / "added-lines.json").write_text(json.dumps(by_name))
    return {name: entry["lines"] for name, entry in by_name.items()}


def run_hidden_tests(task: Task, tree: Path, import_root: Path, base_tree: Path, scratch: Path, gpu: bool,
                     launcher: Launcher, timeout: float = DEFAULT_TIMEOUT_S, contained: bool = True,
                     select: str | None = None, memory_bytes: int | None = None,
                     also_pass: tuple[str, ...] = (), call_budgets: Path | None = None,
                     call_times_out: Path | None = None, traced: list[str] | None = None,
                     only: list[str] | None = None, charged: bool = False) -> RunReport:
    """One judge run over ``tree``. ``call_budgets``: the controls' times its candidate calls are held to
    (``ensure_call_times``); ``call_times_out``: a calibration run over a control, whose calls' times are written
    there; ``traced`` (the diff's paths): each test also records which of the patch's added lines in them ran
    (``TestOutcome.ran``); ``only``: the node ids of the tests to run, the others deselected (a re-run);
    ``charged``: ``timeout`` is the candidate's own budget from the controls' times (``candidate_time``)."""
    judge = scratch / "judge"
    judge.mkdir(mode=0o700)
    probes = stage_probes(task, scratch / "probes")
    base_root = make_import_root(base_tree, scratch / "base-import-root")
    boxes = []
    specs = {}
    for name, root, source in (("candidate", import_root, tree), ("base", base_root, base_tree)):
        spec, box = subject_spec(name, scratch / f"subject-{name}", root, source, probes, gpu, contained,
                                 memory_bytes, also_pass)
        specs[name] = spec
        boxes += [box] if box else []
    extra = {protocol.DEADLINE_CHARGED: "1"} if charged else {}
    if call_budgets is not None:
        extra[protocol.CALL_BUDGETS] = str(call_budgets)
    if call_times_out is not None:
        extra[protocol.CALL_TIMES_OUT] = str(call_times_out)
    if traced is not None:
        specs["candidate"] = replace(specs["candidate"], added_lines=trace_request(
            judge, import_root, added_lines(base_tree, tree, traced)))
        extra[protocol.ADDED_LINES] = str(judge / "added-lines.json")
    if only is not None:
        (judge / "only-tests.json").write_text(json.dumps(sorted(only)))
        extra[protocol.ONLY_TESTS] = str(judge / "only-tests.json")
    folder = set_up_judge(judge, pytest_args(task, select), str(RUBRICS_DIR), tree, base_tree, gpu, timeout, specs,
                          also_pass, extra, tuple(task.platforms.values()))
    job, evidence, log = folder.request, folder.evidence, folder.log
    started = time.monotonic()
    kills_before = oom_kill_count()
    lost = None
    try:
        returncode, timed_out = launcher.run(job)
    except JudgeLost as exc:
        returncode, timed_out, lost = None, False, str(exc)
    finally:
        for box in boxes:
            box.cleanup()
    duration = time.monotonic() - started
    # What the judge wrote carries text the candidate chose (messages, captured output): cleaned here, once.
    scrub = path_scrubber(tree, scratch, base_tree, job.env[protocol.SECRET])
    text = clean(scrub(_tail(log, 200_000)), limit=None)
    recorded = _head(evidence, EVIDENCE_CAP_BYTES)
    outcomes, collect_errors = parse_evidence(recorded, timed_out)
    outcomes = [replace(o, nodeid=clean(o.nodeid), doc=clean(o.doc), message=clean(scrub(o.message)))
                for o in outcomes]
    # The last word is read from the file's end: evidence cut at the cap still ended.
    end = JudgeEnd(session_exit_status(_tail(evidence, 4096)), returncode, timed_out, lost,
                   oom_kill_count() - kills_before,
                   sum(o.status == "not_run" for o in outcomes))
    env_error = grader_error = None
    if collect_errors:
        env_error = "hidden tests could not be collected: " + clean(scrub("; ".join(collect_errors)))
    elif not outcomes and returncode is not None and returncode > 1 and end.session_exit is None:
        env_error = f"the judge exited with status {returncode} before any hidden test ran: {text[-500:]}"
    elif fault := judge_fault(end):
        kind, cause = fault
        env_error, grader_error = (cause, None) if kind == "environment_error" else (None, cause)
    return RunReport(outcomes, returncode, timed_out, text, duration, env_error, grader_error)


@dataclass(frozen=True)
class JudgeEnd:
    """How a judge's run ended, as the grader saw it."""

    # The evidence plugin's last word (pytest's exit status at the session's end), None when it never came.
    session_exit: int | None
    returncode: int | None
    timed_out: bool
    # Why what ran the judge (a warm worker) was lost, if it was.
    lost: str | None
    # OOM kills counted in the grader's memory cgroup and by the kernel while the judge ran.
    oom_kills: int
    not_run: int


def judge_fault(end: JudgeEnd) -> tuple[RunStatus, str] | None:
    """The attribution rule, in one place: a judge that ends without its protocol's last word is never a verdict.
    Its run is ``environment_error`` when the machine's memory killed it (an OOM kill was counted meanwhile),
    else ``grader_error``, with the cause; the tests it did not finish are ``not_run``. None: the evidence is a
    verdict (the judge's time limit is the run's ``timed_out`` state, decided elsewhere). A subject's death is
    not this: the judge outlives it and fails that probe's check (``SubjectBroken``)."""
    if end.timed_out:
        return None
    unfinished = f"; {end.not_run} hidden test(s) did not run" if end.not_run else ""
    if end.session_exit is None or end.lost:
        cause = end.lost or f"the judge ended before its session did ({describe_exit(end.returncode)})"
        if end.oom_kills and (end.lost or end.returncode in (None, -signal.SIGKILL)):
            return "environment_error", (f"out of memory: {cause}, and the kernel's OOM killer killed "
                                         f"{end.oom_kills} process(es) meanwhile{unfinished}")
        return "grader_error", cause + unfinished
    if end.session_exit not in (0, 1):
        return "grader_error", f"pytest's session ended with exit status {end.session_exit}{unfinished}"
    return None


def oom_kill_count() -> int:
    """OOM kills so far: the grader's own memory cgroup's (v2 ``memory.events``, hierarchical; v1
    ``memory.oom_control``) and the kernel's (``/proc/vmstat``); 0 where none can be read."""
    total = 0
    for path in _oom_counters():
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    total += int(value)
        except (OSError, ValueError):
            continue
    return total


def _oom_counters() -> list[Path]:
    paths = [Path("/proc/vmstat")]
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        number, controllers, rel = line.split(":", 2)
        if number == "0" and not controllers:
            paths.append(Path("/sys/fs/cgroup") / rel.lstrip("/") / "memory.events")
        elif "memory" in controllers.split(","):
            paths.append(Path("/sys/fs/cgroup/memory") / rel.lstrip("/") / "memory.oom_control")
    return paths


def session_exit_status(evidence: str) -> int | None:
    """pytest's exit status from the evidence's ``session_end`` line, None when the session never ended."""
    for line in reversed(evidence.splitlines()):
        if '"session_end"' in line:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                return None
            return int(record.get("exitstatus", -1)) if record.get("event") == "session_end" else None
    return None


def _tail(path: Path, limit: int) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - limit))
        return handle.read().decode("utf-8", "replace")


def _head(path: Path, limit: int) -> str:
    with open(path, "rb") as handle:
        return handle.read(limit).decode("utf-8", "replace")


def path_scrubber(tree: Path, scratch: Path, base_tree: Path, secret: str | None = None):
    """Messages name the per-candidate temporary paths; replace them so identical runs give identical text. A repr
    that pytest cut short can end inside a temporary folder's random name: what is left of any ``grader-*`` folder
    of the scratch area is replaced too. Object addresses and log-line times are replaced for the same reason.
    The judge's secret, should a message ever carry it, becomes ``<secret>`` (no subject can read it; this is a
    second wall, so that no report, page or cache holds it)."""
    pairs = [(str(tree), "<tree>"), (str(scratch), "<scratch>"), (str(base_tree), "<base>")]
    pairs += [(secret, "<secret>")] if secret else []
    cut_short = re.compile(re.escape(os.path.join(str(scratch.parent), "grader-")) + r"[\w-]*")

    def scrub(text: str) -> str:
        for raw, placeholder in pairs:
            text = text.replace(raw, placeholder)
        text = OBJECT_ADDRESS.sub(" at 0x?", cut_short.sub("<scratch>", text))
        return LOG_LINE_TIME.sub(r"\1 <time>", text)

    return scrub


def _status_of(phases: dict[str, dict]) -> TestStatus:
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if setup and setup["outcome"] == "skipped":
        return "skipped"
    if setup and setup["outcome"] == "failed":
        return "error"
    if call is None:
        return "error"
    if call.get("timeout"):
        return "timeout"
    if call["outcome"] == "failed" or (teardown and teardown["outcome"] == "failed"):
        return "failed"
    return call["outcome"]


def parse_evidence(text: str, timed_out: bool) -> tuple[list[TestOutcome], list[str]]:
    """Fold the plugin's JSON lines into one outcome per test; a started test with no result hung or crashed.
    Where the session never ended (the judge died), the tests it did not finish are ``not_run``, not failed."""
    ended = session_exit_status(text) is not None
    phases: dict[str, dict[str, dict]] = {}
    started: dict[str, dict] = {}
    collected: dict[str, dict] = {}
    collect_errors: list[str] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        event = record.get("event")
        if event == "collected":
            collected[record["nodeid"]] = record
        elif event == "start":
            started[record["nodeid"]] = record
        elif event == "report":
            phases.setdefault(record["nodeid"], {})[record["when"]] = record
        elif event == "collect_error":
            collect_errors.append(f"{record['nodeid']}: {record.get('message', '')[-300:]}")
    outcomes = []
    for nodeid, by_phase in phases.items():
        first = next(iter(by_phase.values()))
        status = _status_of(by_phase)
        message = next((p.get("message", "") for p in by_phase.values() if p.get("message")), "")
        if status == "error" and "call" not in by_phase and not message:
            status, message = _unfinished(timed_out, ended)
        criteria = {c["id"]: c["weight"] for c in first["criteria"]}
        skipped_by = next((p.get("skipped_by", "") for p in by_phase.values() if p.get("skipped_by")), "")
        outcomes.append(TestOutcome(nodeid, status, criteria, first.get("kinds", []), first.get("doc", ""),
                                    message, sum(p.get("duration", 0.0) for p in by_phase.values()), skipped_by,
                                    lines_ran(by_phase.get("teardown"))))
    for nodeid, start in {**collected, **started}.items():
        if nodeid not in phases:
            status, message = _unfinished(timed_out, ended) if nodeid in started else \
                _never_started(timed_out, ended)
            criteria = {c["id"]: c["weight"] for c in start["criteria"]}
            outcomes.append(TestOutcome(nodeid, status, criteria, start.get("kinds", []), start.get("doc", ""),
                                        message))
    return outcomes, collect_errors


def lines_ran(record: dict | None) -> dict[str, list[int]] | None:
    """A test's ``ran`` field, as its last phase recorded it; None where lines were not traced."""
    ran = record.get("ran") if record else None
    if not isinstance(ran, dict):
        return None
    return {str(path): sorted({n for n in lines if type(n) is int})
            for path, lines in ran.items() if isinstance(lines, list)}


def _never_started(timed_out: bool, ended: bool) -> tuple[str, str]:
    if timed_out:
        return "timeout", "not run: the time limit was reached before this test started"
    if not ended:
        return "not_run", "not run: the judge ended before this test started"
    return "error", "not run: the test process ended before this test started"


def _unfinished(timed_out: bool, ended: bool) -> tuple[str, str]:
    if timed_out:
        return "timeout", "the test did not finish before the time limit"
    if not ended:
        return "not_run", "not run: the judge ended while this test ran"
    return "error", "the test process died while this test ran"


# ------------------------------------------------------------------ the controls' times per probe call
# The controls' times per probe call, measured once per task, rubric, base and environment on this machine.
# 
# A calibration run is a judge run over the reference fix (or, for a task without one, the base) in which every
# call of the candidate subject is timed, then made again with the same arguments on the base subject and timed
# there (``grader.sandbox.client``); the record lands under the cache, where no subject can see it. Candidates'
# judges read it to hold each call to its budget (``grader.sandbox.budget``). It is made on first use, never from a
# candidate's run, and kept only when the calibration run finished within its time limit.

REFERENCE_DIR = REPO_ROOT / "reference_impl"
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def record_path(task: Task, base: BuiltBase, gpu: bool, contained: bool = True) -> Path:
    """Where the controls' times of ``task`` are kept: keyed by the grading identity (the rubric, its tests and
    probes, the engine, the environment, the GPU and containment switches), the base and the machine."""
    machine = f"{platform.node()}\0{os.cpu_count()}\0{platform.machine()}"
    key = grading_identity(task, gpu, contained).key("call-budgets", base.key, machine)[:24]
    return cache_dir() / "call-budgets" / f"{task.id}-{key}.json"


def ensure_call_times(task: Task, base: BuiltBase, gpu: bool, launcher: Launcher, contained: bool = True,
                      memory_bytes: int | None = None, also_pass: tuple[str, ...] = ()) -> Path | None:
    """The record of the controls' times for ``task``, measured now if there is none; None when the calibration
    run could not finish (every candidate call then keeps its plain limit)."""
    path = record_path(task, base, gpu, contained)
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(str(path), threading.Lock())
    # The file lock: another grader on this machine (a Ray actor, a second run) timing the same controls at the
    # same time would double the work and time both under the other's load.
    with lock, cache_lock(f"call-budgets-{path.stem}"):
        if not path.is_file():
            measure_call_times(task, base, gpu, launcher, path, contained, memory_bytes, also_pass)
    return path if path.is_file() else None


def measure_call_times(task: Task, base: BuiltBase, gpu: bool, launcher: Launcher, path: Path,
                       contained: bool = True, memory_bytes: int | None = None,
                       also_pass: tuple[str, ...] = ()) -> None:
    reference = REFERENCE_DIR / f"{task.id}.diff"
    scratch = Path(tempfile.mkdtemp(prefix=f"grader-calls-{task.id}-", dir=scratch_root()))
    try:
        tree = make_tree(base, scratch)
        if reference.is_file():
            applied = apply_diff(parse_diff(reference.read_text()), tree, contained)
            if applied.status not in ("applied", "partial"):
                return
        draft = scratch / "call-times.json"
        import_root = make_import_root(tree, scratch / "import-root")
        run = run_hidden_tests(task, tree, import_root, base.path, scratch, gpu, launcher, DEFAULT_TIMEOUT_S,
                               contained, memory_bytes=memory_bytes, also_pass=also_pass, call_times_out=draft)
        if run.timed_out or run.environment_error or not draft.is_file():
            return
        times = CallTimes.load(draft)
        times.note_run(run.duration, [o.nodeid for o in run.outcomes if o.status not in UNREACHED])
        times.save(draft)
        path.parent.mkdir(parents=True, exist_ok=True)
        landing = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        shutil.copyfile(draft, landing)
        os.replace(landing, path)  # whole or absent for a reader in another grader
    finally:
        remove_tree(scratch)


# ------------------------------------------------------------------ the candidate's whole time, charged to it
UNREACHED = ("timeout", "not_run")


def candidate_time(limit: float, call_budgets: Path | None) -> tuple[float, bool]:
    """The candidate judge's time limit and whether it is charged: the whole budget the controls' times give
    (``CallTimes.whole_budget``) where that is within the operator's ``limit``; else ``limit``, uncharged (a cut
    the operator chose, or no calibration: a time-out there is not the candidate's)."""
    times = CallTimes.load(call_budgets)
    whole = times.whole_budget() if times is not None else None
    if whole is None or whole > limit:
        return limit, False
    return whole, True


def charge_unreached(run: RunReport, call_budgets: Path | None, seconds: float) -> RunReport:
    """A charged run that ran out of time: each check the controls finished and the candidate did not reach (or
    did not finish) fails, ``timeout: ...``; the run stays ``timed_out`` only where a check is left that the
    controls could not finish either."""
    times = CallTimes.load(call_budgets)
    finished = times.finished_checks() if times is not None else frozenset()
    why = (f"timeout: the candidate used its whole time budget ({seconds:.0f} s, from the controls' own time on "
           "this machine) before this check finished; the controls finished it")
    outcomes = [replace(o, status="failed", message=f"{why} ({o.message})" if o.message else why)
                if o.status == "timeout" and o.nodeid in finished else o for o in run.outcomes]
    left = any(o.status == "timeout" for o in outcomes)
    return replace(run, outcomes=outcomes, timed_out=left)
