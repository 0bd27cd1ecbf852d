"""Run identity: liveness and cancel are decided by the run lock, whatever the PIDs say."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from engine.config import RunConfig
from engine.data import load_dataset
from engine.errors import RunLockedError
from engine.runner.launcher import cancel, submit
from engine.store import RunLock, create_run, get_run, lock_holder, read_status, run_alive, signal_holder, write_status
from engine.tasks import resolve

HOLD = textwrap.dedent("""
    import sys, time
    from engine.store.lock import RunLock
    RunLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(600)
""")

CFG = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
       "train": {"steps": 100_000, "batch_size": 16, "eval_interval": 1000, "checkpoint_interval": 100_000,
                 "warmup_steps": 5, "device": "cpu", "num_threads": 1}}


def hold_lock(d) -> subprocess.Popen:
    """A process that holds ``d``'s run lock until killed."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(d)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def sleeper() -> subprocess.Popen:
    """A live process that has nothing to do with any run."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def _wait(pred, timeout: float, what: str):
    end = time.time() + timeout
    while time.time() < end:
        out = pred()
        if out:
            return out
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_alive_is_the_lock_not_the_pid(workspace):
    run_id, d = create_run({"train": {"steps": 5}})
    other = sleeper()
    try:
        write_status(d, {"status": "running", "pid": other.pid, "step": 2, "total_steps": 5})
        assert not run_alive(d) and lock_holder(d) is None
        assert get_run(run_id).status == "interrupted"  # a live pid in the status counts for nothing
        holder = hold_lock(d)
        assert run_alive(d) and lock_holder(d) == holder.pid
        assert get_run(run_id).status == "running"  # same status file, now a lock holder
        holder.kill()
        holder.wait()
        assert not run_alive(d) and get_run(run_id).status == "interrupted"  # the kernel dropped the lock
    finally:
        other.kill()


def test_cancel_signals_only_the_lock_holder(workspace):
    run_id, d = create_run({"train": {"steps": 5}})
    bystander, holder = sleeper(), None
    try:
        (d / "lock").write_text(f"{bystander.pid}\n")  # a lying pid in the lock file and the status
        write_status(d, {"status": "running", "pid": bystander.pid, "step": 2, "total_steps": 5})
        assert cancel(run_id) is False  # dead run: nothing is signalled
        assert signal_holder(d) is None and bystander.poll() is None
        holder = hold_lock(d)
        (d / "lock").write_text(f"{bystander.pid}\n")
        assert cancel(run_id) is True
        assert holder.wait(timeout=10) == -signal.SIGTERM
        time.sleep(0.2)
        assert bystander.poll() is None  # never touched
    finally:
        bystander.kill()
        if holder is not None:
            holder.kill()


def test_a_second_writer_cannot_take_a_held_run(workspace):
    _, d = create_run({"train": {"steps": 5}})
    holder = hold_lock(d)
    try:
        with pytest.raises(RunLockedError, match=rf"held by another live process \(pid {holder.pid}\)"):
            RunLock(d).acquire(timeout=0.3)
    finally:
        holder.kill()
        holder.wait()
    with RunLock(d) as lock:
        assert lock.held and run_alive(d) and lock_holder(d) == os.getpid()
    assert not run_alive(d)


def test_readers_probing_do_not_keep_the_worker_out(workspace):
    _, d = create_run({"train": {"steps": 5}})
    (d / "lock").touch()
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            run_alive(d)

    threads = [threading.Thread(target=probe) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(20):
            RunLock(d).acquire(timeout=5).release()
    finally:
        stop.set()
        for t in threads:
            t.join()


@pytest.mark.slow
def test_a_live_runs_pid_in_a_dead_runs_record(workspace):
    """Acceptance: a dead run whose record (status pid and lock file) names a live run's worker is
    shown interrupted, and cancelling it leaves the live run training."""
    load_dataset("digits")
    live = submit(resolve(RunConfig.from_dict({**CFG, "name": "live"})))
    dead = submit(resolve(RunConfig.from_dict({**CFG, "name": "dead"})))
    live_dir, dead_dir = get_run(live).path, get_run(dead).path
    _wait(lambda: get_run(live).step > 0 and get_run(dead).step > 0, 120, "both runs to train")
    live_pid = lock_holder(live_dir)
    assert live_pid == get_run(live).pid
    os.kill(lock_holder(dead_dir), signal.SIGKILL)  # the dead run's worker dies without a word
    _wait(lambda: not run_alive(dead_dir), 10, "the kernel to drop the dead run's lock")
    write_status(dead_dir, {**read_status(dead_dir), "pid": live_pid})  # PID reuse, as it looks on disk
    (dead_dir / "lock").write_text(f"{live_pid}\n")

    rec = get_run(dead)
    assert rec.status == "interrupted" and rec.pid == live_pid and rec.is_resumable
    assert cancel(dead) is False
    step = get_run(live).step
    _wait(lambda: get_run(live).step > step + 5, 60, "the live run to keep training")
    assert get_run(live).status == "running" and lock_holder(live_dir) == live_pid
    assert not (live_dir / "cancel").exists()
    assert cancel(live) is True
    _wait(lambda: get_run(live).status == "cancelled", 60, "the live run to stop when cancelled itself")


@pytest.mark.slow
@pytest.mark.parametrize("sig, expected, nohup", [(signal.SIGTERM, "cancelled", False),
                                                  (signal.SIGINT, "cancelled", False),
                                                  (signal.SIGINT, "cancelled", True),
                                                  (signal.SIGHUP, "interrupted", False),
                                                  (signal.SIGHUP, "interrupted", True),
                                                  (signal.SIGKILL, "interrupted", False),
                                                  (signal.SIGUSR1, "interrupted", False),
                                                  (signal.SIGALRM, "interrupted", False)])
def test_every_signal_ends_in_a_truthful_status(workspace, sig, expected, nohup):
    """Signals a worker handles (TERM: cancel, INT: Ctrl-C) end as cancelled; signals that kill it
    leave status running with the lock free, which every reader shows as interrupted (resumable).
    ``nohup``: the submitting process ignores the signal sent (a server started under nohup ignores
    SIGHUP; one started with ``&`` from a script, where job control is off, ignores SIGINT), which its
    children would inherit."""
    load_dataset("digits")
    ignored = sig if nohup else signal.SIGHUP
    before = signal.signal(ignored, signal.SIG_IGN if nohup else signal.getsignal(ignored))
    try:
        run_id = submit(resolve(RunConfig.from_dict(CFG)))
    finally:
        signal.signal(ignored, before)
    d = get_run(run_id).path
    _wait(lambda: get_run(run_id).step > 0, 120, "the run to train")
    pid = signal_holder(d, sig)
    assert pid == get_run(run_id).pid
    _wait(lambda: not run_alive(d), 60, "the worker to exit")
    rec = get_run(run_id)
    assert rec.status == expected, (rec.status, rec.error)
    if expected == "interrupted":
        assert read_status(d)["status"] == "running" and rec.is_resumable
