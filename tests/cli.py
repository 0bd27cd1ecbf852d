"""``python -m engine ...`` in the test's own process: :func:`engine.cli.main`, the function the
command runs, called with the same arguments from the repository root, its output captured. A
command that only reads or refuses costs milliseconds this way instead of a Python start-up
(0.5 to 2 s on the 2-core machine); tests/engine/test_cli.py keeps real subprocesses for what only a
process shows (the exit status of ``python -m engine``, its progress bar, Ctrl-C)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

from engine.cli import main

REPO = Path(__file__).resolve().parents[1]


def engine_main(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m engine *args`` in this process and return what a subprocess would have:
    ``returncode`` (:func:`engine.cli.main`'s value; 2 for argparse's usage errors), ``stdout``,
    ``stderr``. ``env`` is added to the environment and ``stdin`` replaces standard input for the
    call only; the working directory is the repository root during it, as for the real command.
    An exception that :func:`~engine.cli.main` lets through (a traceback a user would see) propagates."""
    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd, saved_stdin = dict(os.environ), os.getcwd(), sys.stdin
    try:
        os.environ.update(env or {})
        os.chdir(REPO)
        sys.stdin = io.StringIO(stdin or "")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(args))
            except SystemExit as e:  # argparse: --help, or a usage error
                rc = e.code if isinstance(e.code, int) else 2
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.stdin = saved_stdin
    return subprocess.CompletedProcess(["python", "-m", "engine", *args], rc, out.getvalue(), err.getvalue())
