"""The judge/subject contract, defined once: the ``GRADER_*`` variables, what a judge is handed, what a subject is
started with, and the set-up of a judge's folder.

A judge (``grader.sandbox.judge``) is handed a ``JudgeRequest`` (as JSON on stdin, or through a warm worker's
pipe); its environment carries the ``GRADER_*`` variables below, among them where its subjects' specs lie
(``SUBJECTS``: a JSON object of ``SubjectSpec`` by name). A subject is forked by the judge's zygote from its
``SubjectSpec``; its ``SandboxSpec`` is what ``grader.sandbox.contain.enter`` applies. Every spec goes to JSON and
back unchanged (``tests/sandbox/test_protocol.py``).

Three names are defined where a module below this one needs them and only listed here: the cache and scratch
folders (``grader.core.paths``) and the uid lock folder (``grader.sandbox.contain``, which also runs as a bare
script that cannot import the grader). The hidden tests' own helpers that run in a subject (``rubrics/
shared_probes``) cannot import the grader either and spell ``GRADER_GPU`` out.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.core.paths import CACHE_VARIABLE, SCRATCH_VARIABLE, cache_dir, secret_seed
from grader.core.rubric import REPO_ROOT, SubjectPlatform
from grader.sandbox.contain import UID_LOCKS_VARIABLE

# --- the variables ----------------------------------------------------------------------------------------------------
# Set for every judge (``judge_environment``):
VLLM_TREE = "GRADER_VLLM_TREE"  # the patched tree, for static checks that read it as text
BASE_TREE = "GRADER_BASE_TREE"  # the unpatched base
EVIDENCE_OUT = "GRADER_EVIDENCE_OUT"  # the evidence plugin's output file, in the judge's folder
SUBJECTS = "GRADER_SUBJECTS"  # the subjects' specs (JSON, by name)
GPU = "GRADER_GPU"  # "1": GPU evidence was asked for (a subject sees it too)
DEADLINE = "GRADER_DEADLINE"  # the candidate's time limit: seconds from the judge's start, on its monotonic clock
# "1": that limit is the candidate's own budget, from the controls' times (a call it cuts is the candidate's failure)
DEADLINE_CHARGED = "GRADER_DEADLINE_CHARGED"
SECRET = "GRADER_SECRET"  # the installation's secret from which judges draw deciding inputs
JUDGE_PYCACHE = "GRADER_JUDGE_PYCACHE"  # where the judge keeps the modules it compiles
# Set for some runs:
CALL_BUDGETS = "GRADER_CALL_BUDGETS"  # the controls' times a candidate's calls are held to
CALL_TIMES_OUT = "GRADER_CALL_TIMES_OUT"  # a calibration run: where the calls' times are written
ADDED_LINES = "GRADER_ADDED_LINES"  # the patch's added lines the candidate's subject traces
ONLY_TESTS = "GRADER_ONLY_TESTS"  # a re-run of some checks: the node ids it runs (the others are deselected)
# Set by the judge itself for its client:
ZYGOTE_FD = "GRADER_ZYGOTE_FD"  # the judge's socket to its zygote
JUDGE_STARTED = "GRADER_JUDGE_STARTED"  # its start on its monotonic clock: where the DEADLINE duration counts from
PLATFORM_ZYGOTES = "GRADER_PLATFORM_ZYGOTES"  # its sockets to the zygotes of its task's platforms (JSON, by name)
# Read only when the grader's own tests set them (a subject never sees a judge's environment):
BUDGET_FACTOR = "GRADER_BUDGET_FACTOR"
BUDGET_FLOOR_S = "GRADER_BUDGET_FLOOR_S"
BUDGET_START_FLOOR_S = "GRADER_BUDGET_START_FLOOR_S"
BUDGET_WHOLE_FLOOR_S = "GRADER_BUDGET_WHOLE_FLOOR_S"  # read by the grader process (the whole budget's floor)
# The operator's settings of the grader process:
CACHE = CACHE_VARIABLE
SCRATCH = SCRATCH_VARIABLE
UID_LOCKS = UID_LOCKS_VARIABLE
PROGRESS_EVERY = "GRADER_PROGRESS_EVERY"  # seconds between two progress lines in a log

PREFIX = "GRADER_"
JUDGE_GRACE_S = 20.0
VARIABLES = (VLLM_TREE, BASE_TREE, EVIDENCE_OUT, SUBJECTS, GPU, DEADLINE, DEADLINE_CHARGED, SECRET, JUDGE_PYCACHE,
             CALL_BUDGETS, CALL_TIMES_OUT, ADDED_LINES, ONLY_TESTS, ZYGOTE_FD, JUDGE_STARTED, PLATFORM_ZYGOTES,
             BUDGET_FACTOR, BUDGET_FLOOR_S, BUDGET_START_FLOOR_S, BUDGET_WHOLE_FLOOR_S, CACHE, SCRATCH, UID_LOCKS,
             PROGRESS_EVERY)

# --- what every judge and subject inherits ----------------------------------------------------------------------------
PASSED_THROUGH_ENV = ("PATH", "LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "NVIDIA_VISIBLE_DEVICES",
                      "CUDA_HOME", "LD_LIBRARY_PATH")
# Every judge and subject computes on one CPU thread. A float reduction's result depends on how many threads
# split it, so a verdict would otherwise depend on --jobs and on the machine's core count; and N candidates at
# once, each process spinning up a thread per core, oversubscribe the cores and spin against each other.
# Parallelism comes from --jobs alone.
SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def base_environment(gpu: bool, also_pass: tuple[str, ...] = ()) -> dict[str, str]:
    """What every judge and subject inherits from the grader's environment (``PASSED_THROUGH_ENV`` and the
    caller's ``also_pass``); nothing else passes."""
    env = {k: os.environ[k] for k in (*PASSED_THROUGH_ENV, *also_pass) if k in os.environ}
    env.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "VLLM_NO_USAGE_STATS": "1",
                "HF_HUB_OFFLINE": "1", **SINGLE_THREADED})
    if not gpu:
        # Without a GPU, Triton kernels can only run through its interpreter. The variable must be set before
        # triton is first imported (it decides how triton.language's own helpers are built), and warm workers
        # import triton before any test runs, so it is set here for every CPU run. CUDA_VISIBLE_DEVICES=""
        # keeps vLLM from probing a driver while leaving the real Triton importable.
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["TRITON_INTERPRET"] = "1"
    # (With GPU evidence, CUDA_VISIBLE_DEVICES passes only when the caller asks: a Ray task narrowed to its GPU.)
    return env


def gpu_flag(gpu: bool) -> str:
    """``GPU``'s value."""
    return "1" if gpu else "0"


def gpu_asked(env: dict[str, str] | os._Environ = os.environ) -> bool:
    """Whether ``env`` (this process's, by default) asks for GPU evidence."""
    return env.get(GPU) == "1"


def private_home(home: Path) -> dict[str, str]:
    """The variables that give a judge or subject ``home`` as its own folder and caches."""
    return {"HOME": str(home), "TMPDIR": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
            "TRITON_CACHE_DIR": str(home / ".triton"), "TORCHINDUCTOR_CACHE_DIR": str(home / ".inductor")}


def subject_environment(home: Path, gpu: bool, also_pass: tuple[str, ...] = ()) -> dict[str, str]:
    """What a subject's process sees: private HOME and caches, nothing of the grader's or the judge's."""
    env = base_environment(gpu, also_pass)
    env.update(private_home(home))
    env.update({GPU: gpu_flag(gpu),
                # The sandbox's uid has no passwd entry; getpass (torch's caches use it) asks these first.
                "USER": "grader", "LOGNAME": "grader"})
    return env


# --- the specs --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScratchSpec:
    """A subject's private tmpfs home: where, whose, how large."""

    path: str
    uid: int
    bytes: int
    inodes: int


@dataclass(frozen=True)
class SandboxSpec:
    """One subject's containment, as ``grader.sandbox.contain.prepare`` decides it and ``contain.enter`` applies it
    (in the subject, or in contain's bare launcher: both read its JSON)."""

    memory_bytes: int
    cpu_s: int
    as_bytes: int
    fsize_bytes: int
    nofile: int
    net: bool
    private_tmp: bool
    ipc: bool
    pid: bool
    # Each path bound back into the subject's view, with "ro" or "rw".
    binds: tuple[tuple[str, str], ...]
    hidden: tuple[str, ...]
    parent: int
    # Tasks of the subject's uid (None: not limited, a root grader that keeps its own uid).
    nproc: int | None = None
    uid: int | None = None
    scratch: ScratchSpec | None = None
    cgroup: str | None = None
    memory_cgroup: str | None = None
    cpu_cgroup: str | None = None
    # A GPU run's bound on the subject's device memory (``grader.sandbox.watchdog``).
    gpu_memory_bytes: int | None = None

    def to_json(self) -> dict:
        """The spec as contain reads it: a key left out where its value is None."""
        return {k: v for k, v in asdict(self).items() if v is not None} | {"binds": [list(b) for b in self.binds],
                                                                           "hidden": list(self.hidden)}

    @classmethod
    def from_json(cls, data: dict) -> SandboxSpec:
        fields = dict(data)
        fields["binds"] = tuple((str(path), str(mode)) for path, mode in data.get("binds", ()))
        fields["hidden"] = tuple(data.get("hidden", ()))
        fields["scratch"] = ScratchSpec(**data["scratch"]) if data.get("scratch") else None
        return cls(**fields)


@dataclass(frozen=True)
class SubjectSpec:
    """What a subject is started with: its environment, path and folder, its containment (None: uncontained), and
    the lines it traces (the file as its code objects name it -> the patch's added lines; None: none traced)."""

    name: str
    box: SandboxSpec | None
    env: dict[str, str]
    sys_path: tuple[str, ...]
    interpreter_paths: tuple[str, ...]
    cwd: str
    log: str
    added_lines: dict[str, list[int]] | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "box": self.box.to_json() if self.box else None, "env": dict(self.env),
                "sys_path": list(self.sys_path), "interpreter_paths": list(self.interpreter_paths),
                "cwd": self.cwd, "log": self.log, "added_lines": self.added_lines}

    @classmethod
    def from_json(cls, data: dict) -> SubjectSpec:
        return cls(str(data["name"]), SandboxSpec.from_json(data["box"]) if data.get("box") else None,
                   dict(data["env"]), tuple(data["sys_path"]), tuple(data["interpreter_paths"]), str(data["cwd"]),
                   str(data["log"]), data.get("added_lines"))


@dataclass(frozen=True)
class JudgeRequest:
    """What a judge process is handed: pytest's arguments, its environment and path, its working folder, where its
    output goes, its time, and the platforms its task's checks may ask subjects on (a zygote is made for each
    before the judge reads anything else of the request)."""

    argv: list[str]
    env: dict[str, str]
    sys_path: list[str]
    cwd: str
    log: str
    timeout: float
    platforms: tuple[SubjectPlatform, ...] = ()

    def to_json(self) -> dict:
        return {"argv": list(self.argv), "env": dict(self.env), "sys_path": list(self.sys_path), "cwd": self.cwd,
                "log": self.log, "timeout": self.timeout, "platforms": [p.to_json() for p in self.platforms]}

    @classmethod
    def from_json(cls, data: dict) -> JudgeRequest:
        return cls(list(data["argv"]), dict(data["env"]), list(data["sys_path"]), str(data["cwd"]),
                   str(data["log"]), float(data["timeout"]),
                   tuple(SubjectPlatform.from_json(p) for p in data.get("platforms", ())))


def load_subjects(path: str | Path) -> dict[str, SubjectSpec]:
    """A judge's subjects' specs, by name (the file ``SUBJECTS`` names)."""
    with open(path) as handle:
        return {name: SubjectSpec.from_json(spec) for name, spec in json.load(handle).items()}


# --- a judge's folder -------------------------------------------------------------------------------------------------


def judge_environment(judge: Path, tree: Path, base_tree: Path, gpu: bool, timeout: float,
                      also_pass: tuple[str, ...] = ()) -> dict[str, str]:
    """A judge's environment: a private home in its folder ``judge``, and every variable it is set."""
    home = judge / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = base_environment(gpu, also_pass)
    env.update(private_home(home))
    env.update({
        "PYTHONPATH": str(REPO_ROOT),
        VLLM_TREE: str(tree), BASE_TREE: str(base_tree),
        EVIDENCE_OUT: str(judge / "evidence.jsonl"), SUBJECTS: str(judge / "subjects.json"),
        # A duration, not a point on the wall clock: a clock step (NTP, a VM resumed) never turns into time-outs.
        GPU: gpu_flag(gpu), DEADLINE: f"{timeout:.3f}", DEADLINE_CHARGED: "0",
        SECRET: secret_seed(),
        # Only the plugins the grader names load: an installed pytest plugin neither shapes the judge's run nor
        # costs it start-up time (one imported hypothesis at every session's end).
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        JUDGE_PYCACHE: str(cache_dir() / "judge-pycache"),
    })
    return env


@dataclass(frozen=True)
class JudgeFolder:
    """A judge's folder once set up: the request to hand it and the files it writes."""

    request: JudgeRequest
    evidence: Path
    log: Path


def set_up_judge(judge: Path, argv: list[str], cwd: str, tree: Path, base_tree: Path, gpu: bool, timeout: float,
                 subjects: dict[str, SubjectSpec], also_pass: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None,
                 platforms: tuple[SubjectPlatform, ...] = ()) -> JudgeFolder:
    """Set up the judge's folder ``judge`` (made by the caller, mode 0700, which no subject can see): its subjects'
    specs, an empty evidence file, its environment (``judge_environment`` and ``extra_env``: the ``GRADER_*``
    variables of this run only), and the request for pytest's ``argv`` run in ``cwd`` with subjects on
    ``platforms`` as well as on the machine's own."""
    env = judge_environment(judge, tree, base_tree, gpu, timeout, also_pass) | (extra_env or {})
    (judge / "subjects.json").write_text(json.dumps({name: spec.to_json() for name, spec in subjects.items()}))
    evidence = Path(env[EVIDENCE_OUT])
    evidence.write_text("")
    log = judge / "pytest.log"
    # The judge ends its own checks at ``timeout`` (each call is cut there); the grace lets it report them before
    # whoever runs it gives up on it.
    return JudgeFolder(JudgeRequest(argv, env, [], cwd, str(log), timeout + JUDGE_GRACE_S, platforms), evidence, log)
