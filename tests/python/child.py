"""Python code run in a child interpreter, for tests whose failure would be a signal, an abort,
a hang or output at interpreter exit: the test reads the child's exit status and output."""

import os
import subprocess
import sys
import textwrap

import stoker

# What a child needs on its path: this stoker, and the tests' helper modules.
_PATH = [os.path.dirname(os.path.dirname(stoker.__file__)), os.path.dirname(__file__)]


def run_python(code: str, *args: str, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    """Runs ``code`` (dedented) with ``args`` as ``sys.argv[1:]``; returns the finished process
    (``returncode``: negative for a signal), its stdout and stderr as text. A child that runs
    past ``timeout`` seconds is killed and ``subprocess.TimeoutExpired`` raised."""
    environment = dict(os.environ if env is None else env)
    environment["PYTHONPATH"] = os.pathsep.join(
        _PATH + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p])
    environment.setdefault("PYTHONFAULTHANDLER", "1")  # a crash prints every thread's stack
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, env=environment)


def describe(process: subprocess.CompletedProcess) -> str:
    """The exit status and the end of the output, for an assertion's message."""
    return (f"exit status {process.returncode}\n--- stdout\n{process.stdout[-3000:]}"
            f"\n--- stderr\n{process.stderr[-3000:]}")
