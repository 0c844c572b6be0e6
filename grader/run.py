"""Run a task's hidden tests against one patched tree: a judge process decides, sandboxed subjects execute.

The judge (pytest, the hidden tests, the evidence plugin) never imports the candidate's code; it reaches the
patched tree only through probe calls answered by a subject (``grader.sandbox``) or by reading its files. The
evidence file lives in the judge's folder, which no subject can see. Parsing the evidence is kept here, apart
from scoring.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from grader.apply import hidden_roots
from grader.core.paths import cache_dir, make_import_root
from grader.core.records import RunReport, TestOutcome, TestStatus
from grader.core.environment import unmet_message
from grader.core.identity import grading_identity
from grader.core.rubric import REPO_ROOT, RUBRICS_DIR, Task
from grader.sandbox import contain
from grader.sandbox.launch import JudgeRun, Launcher, base_environment
from grader.core.probe_modules import probe_modules

DEFAULT_TIMEOUT_S = 600
EVIDENCE_CAP_BYTES = 64 << 20
SHARED_PROBES = RUBRICS_DIR / "shared_probes"
# Object reprs in assertion output ("<X object at 0x7f...>") differ between identical runs.
OBJECT_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# So do the times of vLLM's log lines ("INFO 12-01 15:51:11 [file.py:12] ..."), which a probe's captured output
# can carry into a failure message.
LOG_LINE_TIME = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?")


def secret_seed() -> str:
    """A per-installation secret from which judges draw deciding inputs: stable across runs (so identical runs
    agree), never visible to a subject (the cache folder is hidden from it).

    Made once: the first maker wins, since a hard link never replaces an existing file, and every judge of every
    thread and process reads the winner's (candidates graded at once must draw the same inputs)."""
    path = cache_dir() / "judge-secret"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, draft = tempfile.mkstemp(prefix=".judge-secret-", dir=path.parent)  # mode 0600, a name of its own
        try:
            os.write(fd, os.urandom(16).hex().encode())
            os.close(fd)
            try:
                os.link(draft, path)
            except FileExistsError:
                pass
        finally:
            os.unlink(draft)
    return path.read_text().strip()


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


def subject_environment(home: Path, gpu: bool, also_pass: tuple[str, ...] = ()) -> dict[str, str]:
    """What a subject's process sees: private HOME and caches, nothing of the grader's or the judge's."""
    env = base_environment(gpu, also_pass)
    env.update({"HOME": str(home), "TMPDIR": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
                "TRITON_CACHE_DIR": str(home / ".triton"), "TORCHINDUCTOR_CACHE_DIR": str(home / ".inductor"),
                "GRADER_GPU": "1" if gpu else "0",
                # The sandbox's uid has no passwd entry; getpass (torch's caches use it) asks these first.
                "USER": "grader", "LOGNAME": "grader"})
    return env


def subject_spec(name: str, folder: Path, import_root: Path, tree: Path, probes: Path, gpu: bool,
                 contained: bool, memory_bytes: int | None = None,
                 also_pass: tuple[str, ...] = ()) -> tuple[dict, contain.Sandbox | None]:
    home = folder / "home"
    home.mkdir(parents=True, exist_ok=True)
    # CUDA reserves far more address space than it uses: on a GPU run memory is capped by the cgroup alone.
    box = contain.prepare(home, visible=[tree, import_root, probes], hidden=hidden_roots(),
                          as_bytes=resource.RLIM_INFINITY if gpu else contain.ADDRESS_SPACE_BYTES,
                          memory_bytes=memory_bytes) if contained else None
    spec = {"name": name, "box": box.spec if box else None, "env": subject_environment(home, gpu, also_pass),
            "sys_path": [str(import_root), str(probes)], "interpreter_paths": contain.interpreter_paths(),
            "cwd": str(home), "log": str(folder / "subject.log")}
    return spec, box


def judge_environment(judge: Path, tree: Path, base_tree: Path, gpu: bool, timeout: float,
                      also_pass: tuple[str, ...] = ()) -> dict[str, str]:
    home = judge / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = base_environment(gpu, also_pass)
    env.update({
        "HOME": str(home), "TMPDIR": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
        "TRITON_CACHE_DIR": str(home / ".triton"), "TORCHINDUCTOR_CACHE_DIR": str(home / ".inductor"),
        "PYTHONPATH": str(REPO_ROOT),
        "GRADER_VLLM_TREE": str(tree), "GRADER_BASE_TREE": str(base_tree),
        "GRADER_EVIDENCE_OUT": str(judge / "evidence.jsonl"), "GRADER_SUBJECTS": str(judge / "subjects.json"),
        "GRADER_GPU": "1" if gpu else "0", "GRADER_DEADLINE": f"{time.time() + timeout:.3f}",
        "GRADER_SECRET": secret_seed(),
        # Only the plugins the grader names load: an installed pytest plugin neither shapes the judge's run nor
        # costs it start-up time (one imported hypothesis at every session's end).
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "GRADER_JUDGE_PYCACHE": str(cache_dir() / "judge-pycache"),
    })
    return env


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
    root = Path(tempfile.mkdtemp(prefix="grader-env-"))
    try:
        os.symlink(base_tree / "vllm", root / "vllm")
        env = dict(base_environment(gpu), HOME=str(root), TMPDIR=str(root), GRADER_GPU="1" if gpu else "0",
                   PYTHONPATH=os.pathsep.join([str(root), str(SHARED_PROBES)]))
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
    args = ["-c", str(RUBRICS_DIR / "pytest.ini"), "--rootdir", str(RUBRICS_DIR), "-p", "grader.pytest_evidence",
            str(task.tests_dir)]
    return args + (["-k", select] if select else [])


def run_hidden_tests(task: Task, tree: Path, import_root: Path, base_tree: Path, scratch: Path, gpu: bool,
                     launcher: Launcher, timeout: float = DEFAULT_TIMEOUT_S, contained: bool = True,
                     select: str | None = None, memory_bytes: int | None = None,
                     also_pass: tuple[str, ...] = ()) -> RunReport:
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
    (judge / "subjects.json").write_text(json.dumps(specs))
    evidence = judge / "evidence.jsonl"
    evidence.write_text("")
    log = judge / "pytest.log"
    job = JudgeRun(pytest_args(task, select), judge_environment(judge, tree, base_tree, gpu, timeout, also_pass), [],
                   str(RUBRICS_DIR), str(log), timeout)
    started = time.monotonic()
    try:
        returncode, timed_out = launcher.run(job)
    finally:
        for box in boxes:
            box.cleanup()
    duration = time.monotonic() - started
    scrub = path_scrubber(tree, scratch, base_tree)
    text = scrub(_tail(log, 200_000))
    outcomes, collect_errors = parse_evidence(_head(evidence, EVIDENCE_CAP_BYTES), timed_out)
    outcomes = [TestOutcome(o.nodeid, o.status, o.criteria, o.kinds, o.doc, scrub(o.message), o.duration,
                            o.skipped_by) for o in outcomes]
    env_error = None
    if collect_errors:
        env_error = "hidden tests could not be collected: " + scrub("; ".join(collect_errors))
    elif not outcomes and returncode not in (0, 1) and not timed_out:
        env_error = f"the judge exited with status {returncode} before any hidden test ran: {text[-500:]}"
    return RunReport(outcomes, returncode, timed_out, text, duration, env_error)


def _tail(path: Path, limit: int) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - limit))
        return handle.read().decode("utf-8", "replace")


def _head(path: Path, limit: int) -> str:
    with open(path, "rb") as handle:
        return handle.read(limit).decode("utf-8", "replace")


def path_scrubber(tree: Path, scratch: Path, base_tree: Path):
    """Messages name the per-candidate temporary paths; replace them so identical runs give identical text. A repr
    that pytest cut short can end inside a temporary folder's random name: what is left of any ``grader-*`` folder
    of the scratch area is replaced too. Object addresses and log-line times are replaced for the same reason."""
    pairs = [(str(tree), "<tree>"), (str(scratch), "<scratch>"), (str(base_tree), "<base>")]
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
    """Fold the plugin's JSON lines into one outcome per test; a started test with no result hung or crashed."""
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
            status, message = _unfinished(timed_out)
        criteria = {c["id"]: c["weight"] for c in first["criteria"]}
        skipped_by = next((p.get("skipped_by", "") for p in by_phase.values() if p.get("skipped_by")), "")
        outcomes.append(TestOutcome(nodeid, status, criteria, first.get("kinds", []), first.get("doc", ""),
                                    message, sum(p.get("duration", 0.0) for p in by_phase.values()), skipped_by))
    for nodeid, start in {**collected, **started}.items():
        if nodeid not in phases:
            status, message = _unfinished(timed_out) if nodeid in started else _never_started(timed_out)
            criteria = {c["id"]: c["weight"] for c in start["criteria"]}
            outcomes.append(TestOutcome(nodeid, status, criteria, start.get("kinds", []), start.get("doc", ""),
                                        message))
    return outcomes, collect_errors


def _never_started(timed_out: bool) -> tuple[str, str]:
    if timed_out:
        return "timeout", "not run: the time limit was reached before this test started"
    return "error", "not run: the test process ended before this test started"


def _unfinished(timed_out: bool) -> tuple[str, str]:
    if timed_out:
        return "timeout", "the test did not finish before the time limit"
    return "error", "the test process died while this test ran"
