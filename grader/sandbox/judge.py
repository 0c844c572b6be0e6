"""The judge process: runs pytest over a task's hidden tests; every assertion and every verdict is decided here.

It never imports a candidate's code: vLLM is refused at import, and the candidate's tree is reached only through
subjects (``grader.sandbox.client``) or read as text by static checks. Its first act is to fork the zygote,
before any hidden test, expectation or secret is in its memory.

Run as ``python -m grader.sandbox.judge REQUEST_JSON`` (cold), or called in a forked warm worker (``run``).
"""

from __future__ import annotations

import json
import os
import signal
import sys

from grader.sandbox import zygote


class RefuseVllm:
    """A meta-path finder: importing vLLM in the judge is a bug in a hidden test, and fails loudly."""

    def find_spec(self, name, path=None, target=None):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError(f"the judge never imports {name}: call a probe in the subject instead")
        return None


def run(request: dict) -> int:
    """Start the zygote, take the request's environment and path, run pytest; pytest's exit code."""
    control, zygote_pid = zygote.start()
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        keep_compiled_modules(request["env"].get("GRADER_JUDGE_PYCACHE"))
        os.environ["GRADER_ZYGOTE_FD"] = str(control.fileno())
        sys.path[:0] = request["sys_path"]
        os.chdir(request["cwd"])
        sys.meta_path.insert(0, RefuseVllm())
        sys.argv = ["pytest", *request["argv"]]
        import pytest

        return int(pytest.main(request["argv"]))
    finally:
        _end_subjects()
        try:
            os.kill(zygote_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def keep_compiled_modules(folder: str | None) -> None:
    """Let the judge keep the modules it compiles (pytest's assertion-rewritten hidden tests among them) in
    ``folder``, so that each run does not rewrite and compile them again. The judge imports only the project's own
    code, and the folder is under the cache, which no subject can see; the zygote, forked before this, keeps its
    subjects from writing compiled modules anywhere."""
    if folder:
        sys.dont_write_bytecode = False
        sys.pycache_prefix = folder


def _end_subjects() -> None:
    client = sys.modules.get("grader.sandbox.client")
    if client is not None:
        client.end_all()


def main() -> None:
    with open(sys.argv[1]) as handle:
        request = json.load(handle)
    code = 3
    try:
        code = run(request)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
