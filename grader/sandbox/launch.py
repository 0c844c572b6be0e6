"""How a judge process is started: a fresh interpreter per run (cold), or a fork of a warm worker.

Both give each judge its own process, process group, environment and ``sys.path``; warm workers only save the
seconds of importing torch, triton, transformers and the rest before any test runs. The judge's subjects are
forked by its zygote (``grader.sandbox.zygote``) and inherit those imports too.
"""

from __future__ import annotations

import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Protocol

from grader.core.paths import cache_dir, make_import_root
from grader.core.records import BuiltBase
from grader.core.identity import machine_identity
from grader.core.rubric import REPO_ROOT, SHARED_PROBES, all_base_recipes
from grader.sandbox.leftovers import owned_name
from grader.sandbox.protocol import GPU, PREFIX, JudgeRequest, base_environment, gpu_flag

# Run with the shared probes on the path: a subject installs ``subject_setup``'s stand-ins before it imports the
# patched vLLM (on a GPU machine they decide which platform vLLM picks, and so what it imports), and so does this.
# The list comes as one marked line, since vLLM logs to stdout.
PROBE = """
import importlib, json, os, sys
before = set(sys.modules)
for name in ["subject_setup", *sys.argv[1:]]:
    try:
        importlib.import_module(name)
    except BaseException:
        pass
found = [m for m in sys.modules if m not in before and m.split(".")[0] != "vllm"]
def compiled(module):
    cached = getattr(getattr(module, "__spec__", None), "cached", None)
    return not cached or os.path.exists(cached)
uncompiled = [m for m in found if not compiled(sys.modules[m])]
print("PREIMPORT " + json.dumps({"modules": found, "uncompiled": len(uncompiled)}))
"""
PROBE_MARK = "PREIMPORT "

# Seconds a judge may run past its deadline to record what timed out before it is killed.
JUDGE_GRACE_S = 30


class JudgeLost(Exception):
    """The process running a judge (a warm worker) died, so the judge's own end is unknown: the grader's fault."""


def describe_exit(returncode: int | None) -> str:
    """A process's end in words: the signal that killed it, or its exit status."""
    if returncode is None:
        return "no exit status"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


class Launcher(Protocol):
    def run(self, job: JudgeRequest) -> tuple[int | None, bool]:
        """(the judge's exit code, negative for a signal, or None; whether it was killed at its time limit).
        Raises ``JudgeLost`` when what ran the judge died with it."""

    def terminate(self) -> None:
        """End every judge now (an interrupt): their runs return as killed."""

    def close(self) -> None: ...


# What names a run in a judge's environment: its folders (and, through them, its evidence file) and every GRADER_*
# variable (the secret, the deadline, the evidence path). A cold judge's interpreter starts without them.
RUN_PATH_VARIABLES = ("HOME", "TMPDIR", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")


def judge_interpreter() -> str:
    """The interpreter judges and warm workers run: this one, reached through its environment's resolved folder,
    so that every path on their ``sys.path`` (and on their subjects') is one a subject's view binds back (a
    symlinked virtual environment would otherwise leave site-packages behind a link the view hides)."""
    if sys.prefix == sys.base_prefix:
        return sys.executable
    resolved = Path(os.path.realpath(sys.prefix)) / "bin" / Path(sys.executable).name
    return str(resolved) if resolved.exists() else sys.executable


def starting_environment(env: dict[str, str]) -> dict[str, str]:
    """The environment a cold judge's interpreter starts with: the judge's own less what names its run. The
    judge forks its zygote in it and only then takes the whole environment from the request; the initial
    environment block (``/proc/self/environ``) of every subject is this one."""
    kept = {k: v for k, v in env.items() if not k.startswith(PREFIX) and k not in RUN_PATH_VARIABLES}
    return dict(kept, PYTHONPATH=str(REPO_ROOT))


class ColdLauncher:
    """One new ``python -m grader.sandbox.judge`` process per run: the simple, slow way."""

    def __init__(self) -> None:
        self.live: set[int] = set()
        self.terminated = False

    def terminate(self) -> None:
        self.terminated = True
        for pid in list(self.live):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def run(self, job: JudgeRequest) -> tuple[int | None, bool]:
        if self.terminated:  # after an interrupt no judge starts (a traced re-run would otherwise go on)
            return None, False
        command = [judge_interpreter(), "-m", "grader.sandbox.judge"]
        with open(job.log, "wb") as log:
            # Its own parent's pid in argv (not the environment, which names nothing of a run): it dies with it; and
            # its task's platforms, which are the rubric's.
            platforms = json.dumps([p.to_json() for p in job.platforms])
            proc = subprocess.Popen([*command, str(os.getpid()), platforms], cwd=job.cwd,
                                    env=starting_environment(job.env), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.PIPE, start_new_session=True)
            self.live.add(proc.pid)
            try:
                try:
                    # On stdin, read after the judge has forked its zygote: no subject's memory ever held it.
                    proc.stdin.write(json.dumps(job.to_json()).encode())
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
                return proc.wait(timeout=job.timeout + JUDGE_GRACE_S), False
            except subprocess.TimeoutExpired:
                return None, True
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
                self.live.discard(proc.pid)

    def close(self) -> None:
        pass


def warm_workers_serve(gpu: bool) -> bool:
    """Whether judges may be forked from warm workers: not with GPU evidence. On the lent H200 (2026-12-03), with
    what a GPU subject imports preloaded into the worker, the task controls' CUDA checks failed in every forked
    subject, while the same checks passed in fresh judges; a warm worker is an optimisation, so GPU evidence runs
    in fresh judges until a worker's preload is shown not to change what its subjects can do."""
    return not gpu


def vllm_module_names(tree: Path) -> list[str]:
    """Modules of every file the tasks' candidates touch under vllm/, plus the package itself."""
    names = ["vllm"]
    for recipe in all_base_recipes().values():
        names += [p[:-3].replace("/", ".") for p in recipe.blobs if p.startswith("vllm/") and p.endswith(".py")]
    return [n for n in dict.fromkeys(names) if (tree / (n.replace(".", "/") + ".py")).exists() or n == "vllm"]


def preimport_record(tree: Path, env: dict[str, str]) -> Path:
    """Where the list of third-party modules that a tree's task modules import is kept, per environment."""
    names = vllm_module_names(tree)
    key = machine_identity().key("preimport after subject_setup", sys.executable, sys.version,
                                 env.get("CUDA_VISIBLE_DEVICES"), *names)
    return cache_dir() / "preimport" / f"{key[:16]}.txt"


def preimport_known(base: BuiltBase, gpu: bool) -> bool:
    """Whether warm workers for ``base`` can start without probing first (the probe imports vLLM: seconds)."""
    return preimport_record(base.path, base_environment(gpu)).is_file()


def third_party_modules(import_root: Path, tree: Path, env: dict[str, str], gpu: bool) -> list[str]:
    """What importing vLLM's task modules pulls in from outside vLLM, in import order (cached per environment). A
    probe that gave no list is not cached: the workers start colder this run, and the next run probes again."""
    names = vllm_module_names(tree)
    cached = preimport_record(tree, env)
    if cached.is_file():
        return cached.read_text().split()
    probe_env = dict(env, PYTHONPATH=os.pathsep.join([str(import_root), str(SHARED_PROBES), str(REPO_ROOT)]))
    probe_env[GPU] = gpu_flag(gpu)
    done = subprocess.run([sys.executable, "-c", PROBE, *names], env=probe_env, capture_output=True, text=True,
                          timeout=900)
    marked = [line for line in done.stdout.splitlines() if line.startswith(PROBE_MARK)]
    if not marked:
        print(f"warning: the warm workers' preload probe gave no module list ({describe_exit(done.returncode)}): "
              f"each subject imports vLLM's dependencies itself this run", file=sys.stderr)
        return []
    found = json.loads(marked[-1][len(PROBE_MARK):])
    # The shared probes themselves are the subject's, staged per run: no worker can import them.
    own = {p.stem for p in SHARED_PROBES.glob("*.py")}
    modules = [m for m in found["modules"] if not m.startswith(("__", "_remote_module")) and m not in own]
    if found["uncompiled"] > len(modules) // 10:
        site = sysconfig.get_paths()["purelib"]
        print(f"warning: {found['uncompiled']} of the {len(modules)} modules vLLM imports from this environment have "
              f"no bytecode: every warm worker and fresh interpreter compiles them from source (seconds each); "
              f"`{sys.executable} -m compileall -q -j 0 {site}` compiles them once", file=sys.stderr)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text("\n".join(modules) + "\n")
    return modules


class _Server:
    """One warm worker as the grader holds it: the pipe its requests go down, the pipe its answers come up, and its
    pid (from its hello). ``proc`` is set for the worker the grader started; a copy (``start_workers``) is the
    started worker's child, which the grader reaches through its pipes and its pid only."""

    def __init__(self, requests, answers, proc: subprocess.Popen | None = None) -> None:
        self.requests, self.answers, self.proc = requests, answers, proc
        hello = json.loads(answers.readline() or "{}")
        if not hello.get("ready"):
            raise RuntimeError("warm worker failed to start")
        self.pid: int = hello["pid"]

    def run(self, job: JudgeRequest) -> tuple[int | None, bool]:
        request = dict(job.to_json(), timeout=job.timeout + JUDGE_GRACE_S)
        self.requests.write(json.dumps(request) + "\n")
        self.requests.flush()
        answer = self.answers.readline()
        if not answer:
            raise JudgeLost(f"the warm worker running the judge died ({self.how_it_ended()})")
        reply = json.loads(answer)
        return reply["returncode"], reply["timed_out"]

    def how_it_ended(self) -> str:
        if self.proc is None:
            return "it closed its pipe"
        try:
            return describe_exit(self.proc.wait(timeout=5))
        except subprocess.TimeoutExpired:
            return "it closed its pipe"

    def terminate(self) -> None:
        """SIGTERM: the worker kills the judge it runs and exits."""
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        self.release()
        self.reap()

    def release(self) -> None:
        """Tell the worker to exit (its request pipe closes); ``reap`` waits for it."""
        try:
            self.requests.close()
        except OSError:
            pass

    def reap(self) -> None:
        """Wait for the worker to end: the one the grader started by its exit, a copy by its answer pipe closing
        (it is not the grader's child to wait for); killed after 10 s."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            return
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                if select.select([self.answers], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    if not self.answers.readline():
                        return
            os.kill(self.pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass
        finally:
            self.answers.close()


def start_workers(env: dict[str, str], preimport_file: Path, count: int) -> list[_Server]:
    """``count`` warm workers: one started here, the others forked from it once its preload is done
    (``grader.sandbox.forkserver``), so the preload is paid once however many start. A copy's pristine zygote
    and its platform templates die with the started worker: should that worker die, a copy's next run that names
    a platform ends the copy, which the pool then replaces (a lost run, the grader's fault, as any dead
    worker's)."""
    pipes = [(os.pipe(), os.pipe()) for _ in range(count - 1)]
    # Non-inheritable, as every pipe here: only the started worker gets its copies' ends (pass_fds).
    theirs = [[request_read, answer_write] for (request_read, _), (_, answer_write) in pipes]
    try:
        proc = subprocess.Popen([judge_interpreter(), "-m", "grader.sandbox.forkserver", str(preimport_file),
                                 json.dumps(theirs)],
                                cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                                pass_fds=[fd for pair in theirs for fd in pair])
    finally:
        for fd in (fd for pair in theirs for fd in pair):
            os.close(fd)
    ends = [(os.fdopen(request_write, "w"), os.fdopen(answer_read, "r"))
            for (_, request_write), (answer_read, _) in pipes]
    servers: list[_Server] = []
    try:
        servers.append(_Server(proc.stdin, proc.stdout, proc))
        servers += [_Server(requests, answers) for requests, answers in ends]
    except (RuntimeError, ValueError, OSError):
        # Every worker of the batch ends: the started one is killed, and a copy exits when its requests close.
        proc.kill()
        for requests, answers in ends:
            requests.close()
            answers.close()
        raise
    return servers


def start_warm_pool(size: int, base: BuiltBase, gpu: bool,
                    starting: Callable[[str], AbstractContextManager] | None = None) -> WarmPool:
    """Warm workers preloaded with what the vLLM of ``base`` imports from third parties. ``starting(name)``, when
    given, wraps each worker's start-up (the terminal shows it as a phase)."""
    env = base_environment(gpu)
    folder = Path(tempfile.mkdtemp(prefix=owned_name("grader-probe")))
    try:
        modules = third_party_modules(make_import_root(base.path, folder / "import-root"), base.path, env, gpu)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return WarmPool(size, env, modules, starting)


class WarmPool:
    """Up to ``size`` warm workers, all started when a run first needs one (a run served from caches starts none),
    one importing the preload and the others forked from it; a worker that dies is replaced by a new one."""

    def __init__(self, size: int, env: dict[str, str], preimport: list[str],
                 starting: Callable[[str], AbstractContextManager] | None = None) -> None:
        self.starting_phase = starting or (lambda name: nullcontext())
        self.home = Path(tempfile.mkdtemp(prefix=owned_name("grader-warm")))
        self.env = dict(env, HOME=str(self.home), TMPDIR=str(self.home), PYTHONPATH=str(REPO_ROOT))
        self.preimport_file = self.home / "preimport.txt"
        self.preimport_file.write_text("\n".join(preimport) + "\n")
        self.idle: queue.Queue[_Server] = queue.Queue()
        self.servers: list[_Server] = []
        self.size = size
        self.starting = 0
        self.lock = threading.Lock()
        self.terminated = False

    def _checkout(self) -> _Server:
        """An idle worker, or new ones while fewer than ``size`` exist (started outside the lock): the first
        checkout starts all ``size`` at once, forked from one (``start_workers``); a later one replaces a worker
        that died."""
        while not self.terminated:
            try:
                return self.idle.get(timeout=0.2)
            except queue.Empty:
                pass
            with self.lock:
                count = (self.size if not self.servers and not self.starting
                         else int(len(self.servers) + self.starting < self.size))
                self.starting += count
                first = len(self.servers) + 1
            if count:
                try:
                    label = f"warm worker {first}" if count == 1 else f"warm workers {first}-{first + count - 1}"
                    with self.starting_phase(label):
                        started = start_workers(self.env, self.preimport_file, count)
                finally:
                    with self.lock:
                        self.starting -= count
                with self.lock:
                    self.servers += started
                for server in started[1:]:
                    self.idle.put(server)
                return started[0]
        raise OSError("the warm pool was terminated")

    def terminate(self) -> None:
        self.terminated = True
        for server in self.servers:
            server.terminate()

    def run(self, job: JudgeRequest) -> tuple[int | None, bool]:
        try:
            server = self._checkout()
        except (OSError, RuntimeError):
            return None, False
        try:
            return server.run(job)
        except (JudgeLost, OSError, ValueError) as exc:
            # The run took its worker down with it: that run ends here, as the grader's fault (never a verdict);
            # the next run starts a new worker.
            server.close()
            with self.lock:
                self.servers.remove(server)
            if isinstance(exc, JudgeLost):
                raise
            raise JudgeLost(f"the warm worker running the judge failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if server in self.servers:
                self.idle.put(server)

    def close(self) -> None:
        # Every worker is told first and then waited for: they wind down at once, not one after another (16
        # workers, each unloading thousands of modules, at the end of every run).
        for server in self.servers:
            server.release()
        for server in self.servers:
            server.reap()
        shutil.rmtree(self.home, ignore_errors=True)
