"""The queue: first come first served across waiting workers, a cap on queued runs, no torch while queued."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from engine.config import RunConfig
from engine.data import load_dataset
from engine.errors import ConfigError, QueueFullError
from engine.runner.launcher import REPO_ROOT, cancel, submit
from engine.runner.queue import enqueue, max_queued, waiting_runs
from engine.store import create_run, get_run, list_runs, lock_holder
from engine.tasks import resolve

SHORT = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
         "train": {"steps": 3, "batch_size": 16, "eval_interval": 3, "checkpoint_interval": 100, "warmup_steps": 1,
                   "device": "cpu"}}


@contextmanager
def busy_slot(workspace):
    """Hold the only slot (MASKLAB_MAX_RUNS=1), as a long run would."""
    (workspace / "slots").mkdir(exist_ok=True)
    with open(workspace / "slots" / "slot-0.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _wait(pred, timeout: float, what: str):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def maps_torch(pid: int) -> bool:
    """True if process ``pid`` has torch's shared library mapped (it imported torch)."""
    with open(f"/proc/{pid}/maps") as f:
        return "libtorch" in f.read()


def test_queue_cap_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("MASKLAB_MAX_QUEUED", raising=False)
    assert max_queued() == 20
    monkeypatch.setenv("MASKLAB_MAX_QUEUED", "3")
    assert max_queued() == 3
    monkeypatch.setenv("MASKLAB_MAX_QUEUED", "lots")
    with pytest.raises(ConfigError, match=r"\$MASKLAB_MAX_QUEUED: expected an integer, got 'lots'"):
        max_queued()


@pytest.mark.slow
def test_first_come_first_served_and_no_torch_while_queued(workspace, monkeypatch):
    monkeypatch.setenv("MASKLAB_MAX_RUNS", "1")
    load_dataset("digits")
    with busy_slot(workspace):
        ids = [submit(resolve(RunConfig.from_dict({**SHORT, "name": f"q{i}"}))) for i in range(4)]
        _wait(lambda: all(lock_holder(get_run(r).path) for r in ids), 60, "every worker to take its run lock")
        time.sleep(1.5)  # several polls of every waiting worker
        assert [get_run(r).status for r in ids] == ["queued"] * 4
        assert waiting_runs(workspace) == ids  # tickets in submit order
        for r in ids:
            assert not maps_torch(lock_holder(get_run(r).path)), "a queued worker imported torch"
    _wait(lambda: all(get_run(r).status == "completed" for r in ids), 180, "all runs to complete")
    starts = [get_run(r).started_at for r in ids]
    assert starts == sorted(starts), "runs did not take the slot in the order they were queued"
    assert waiting_runs(workspace) == [] and not list((workspace / "queue").glob("*-*"))


@pytest.mark.slow
def test_an_older_run_whose_worker_is_still_starting_keeps_its_turn(workspace, monkeypatch):
    monkeypatch.setenv("MASKLAB_MAX_RUNS", "1")
    load_dataset("digits")
    older, d = create_run(resolve(RunConfig.from_dict({**SHORT, "name": "older"})).to_dict())
    enqueue(workspace, d)  # what submit does before it starts the worker
    newer = submit(resolve(RunConfig.from_dict({**SHORT, "name": "newer"})))
    _wait(lambda: lock_holder(get_run(newer).path), 60, "the newer worker to start")
    time.sleep(2)
    assert get_run(newer).status == "queued"  # the slot is free, but the older run comes first
    worker = subprocess.Popen([sys.executable, "-m", "engine.runner.worker", str(d)], cwd=REPO_ROOT)
    assert worker.wait(timeout=120) == 0
    _wait(lambda: get_run(newer).status == "completed", 120, "the newer run to complete")
    assert get_run(older).started_at < get_run(newer).started_at


@pytest.mark.slow
def test_submit_refuses_past_the_queue_cap(workspace, monkeypatch):
    monkeypatch.setenv("MASKLAB_MAX_RUNS", "1")
    monkeypatch.setenv("MASKLAB_MAX_QUEUED", "2")
    load_dataset("digits")
    with busy_slot(workspace):
        a, b = (submit(resolve(RunConfig.from_dict({**SHORT, "name": n}))) for n in "ab")
        with pytest.raises(QueueFullError) as info:
            submit(resolve(RunConfig.from_dict({**SHORT, "name": "c"})))
        msg = str(info.value)
        assert "2 runs are waiting" in msg and "MASKLAB_MAX_QUEUED=2" in msg and "raise MASKLAB_MAX_QUEUED" in msg
        assert sorted(r.name for r in list_runs()) == ["a", "b"]  # nothing was created
        assert cancel(a)
        _wait(lambda: get_run(a).status == "cancelled", 30, "the queued run to be cancelled")
        c = submit(resolve(RunConfig.from_dict({**SHORT, "name": "c"})))  # room again
        for r in (b, c):
            cancel(r)
        _wait(lambda: all(get_run(r).status == "cancelled" for r in (b, c)), 30, "the queue to empty")
