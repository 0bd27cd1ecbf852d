"""Shared fixtures: an isolated workspace per test and the read-only ../shared datasets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

from tests.runs import SharedRuns

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared"))


def pytest_configure(config):
    """No automatic evaluation at a run's end anywhere in the session, module- and session-scoped
    fixtures included (the ``workspace`` fixture only covers a test's own runs): a test that checks
    one turns it on for its runs, with ``evaluation.max_rows`` sized to what it reads. Each
    pytest-xdist worker trains on one torch thread: two workers share the 2 cores instead of
    oversubscribing them (tiny models run several times slower on threads that other processes want);
    so do the processes a test starts (CLI commands, run workers), through ``OMP_NUM_THREADS``,
    unless a run's ``train.num_threads`` says otherwise."""
    os.environ["MASKLAB_AUTO_EVAL"] = "0"
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch  # noqa: PLC0415 (only pytest-xdist workers set torch's threads; the controller never loads torch)

        torch.set_num_threads(1)
        os.environ.setdefault("OMP_NUM_THREADS", "1")


#: Tests that must not run beside each other: real-browser tests (a Streamlit server and Chromium each)
#: and those that start several processes per run or a local cluster. They form one work unit.
EXCLUSIVE = ("tests/engine/test_distributed.py", "tests/engine/test_backends.py", "tests/engine/test_runqueue.py",
             "tests/engine/test_launcher.py", "tests/bench/test_load.py")
#: Work units that take longest (the durations table at the end of a CI log says which): they start
#: first, so that no worker is left running one alone at the end.
LONG_UNITS = ("exclusive", "tests/bench/test_data_memory.py", "tests/engine/test_resume.py", "tests/engine/test_cli.py",
              "tests/bench/test_text_quality.py", "tests/engine/test_evaluation.py", "tests/engine/test_run_identity.py")


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduling by scope, one unit per test module (its module-scoped fixtures are
    set up once), except that the real-browser tests and :data:`EXCLUSIVE` share one unit,
    "exclusive", so none of them ever runs beside another; :data:`LONG_UNITS` are handed out first."""
    class ModuleScheduling(LoadScopeScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "exclusive" if Path(path).name.startswith("test_browser") or path in EXCLUSIVE else path

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:  # the queue is complete before the first unit is handed out
                self._ordered = True
                rank = {u: i for i, u in enumerate(LONG_UNITS)}
                units = sorted(self.workqueue.items(), key=lambda u: (rank.get(u[0], len(rank)), -len(u[1])))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """A fresh workspace folder, also exported as $MASKLAB_WORKSPACE for subprocesses."""
    ws = tmp_path / "workspace"
    ws.mkdir()
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    monkeypatch.setenv("MASKLAB_AUTO_EVAL", "0")  # tests of the evaluation turn it on where they need it
    return ws


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (real datasets for tests; never copied into the repo)."""
    d = SHARED / "data"
    if not d.is_dir():
        pytest.fail(f"{d} not found: tests need ../shared beside the checkout (or set MASKLAB_SHARED)")
    return d


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory, shared_data):
    """The session's shared trained runs (:mod:`tests.runs`): one completed, evaluated run per task,
    trained on first use, once for all pytest-xdist workers (their common base folder, which is this
    session's own); read them as they are, write only to a ``copy`` (checked at each worker's end: a
    shared workspace that changed fails it)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = tmp_path_factory.getbasetemp().parent / "shared-runs"  # <session>/popen-gwN -> <session>
    else:
        root = tmp_path_factory.mktemp("shared-runs")
    runs = SharedRuns(root, shared_data)
    yield runs
    assert not runs.changed(), f"a test wrote to a shared workspace instead of a copy: {runs.changed()}"

