"""A full disk: the run fails with the reason (UI, CLI), and no temporary file is left behind.

The runs live on a real 4 MiB tmpfs when this process may mount one (root with CAP_SYS_ADMIN):
then a real background worker hits a real ENOSPC. Where mounting is refused (an unprivileged CI
container) the same scenario runs in-process on a simulated disk of the same size, whose every write
goes through the store's one write call and fails with ENOSPC past the capacity; a warning says so
in the test summary. The ``simulated`` cases always run, so both paths stay tested.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

import engine.workspace as ws_mod
from engine.config import RunConfig
from engine.data import load_dataset
from engine.runner.launcher import submit
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, read_log, read_status, run_alive
from engine.tasks import resolve
from engine.workspace import is_temp_name

REPO = Path(__file__).resolve().parents[2]
CAPACITY = 4 * 1024 * 1024
CFG = {"name": "full", "data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
       "train": {"steps": 20, "batch_size": 16, "eval_interval": 5, "checkpoint_interval": 10, "warmup_steps": 2,
                 "device": "cpu", "num_threads": 1}}


def _usage(root: Path) -> int:
    return sum(os.lstat(os.path.join(r, f)).st_size for r, _, fs in os.walk(root) for f in fs)


@dataclass
class SmallDisk:
    """``runs/`` of the workspace on a 4 MiB disk: ``mode`` is ``tmpfs`` (real) or ``simulated``."""

    mode: str
    runs: Path
    capacity: int = CAPACITY

    def fill(self) -> None:
        """Take every free byte (as another user's job would)."""
        if self.mode == "tmpfs":
            with open(self.runs / "filler", "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError as e:
                    assert e.errno == errno.ENOSPC
        else:
            self.capacity = _usage(self.runs)

    def write_all(self, fd: int, data) -> None:
        """The simulated disk's write call: ENOSPC past the capacity, after writing what fits."""
        room = self.capacity - _usage(self.runs)
        if len(data) > room:
            ws_mod.os.write(fd, bytes(data)[: max(0, room)])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        ws_mod._real_write_all(fd, data)


def _mount_tmpfs(path: Path) -> bool:
    try:
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={CAPACITY}", "tmpfs", str(path)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0


@pytest.fixture(params=[pytest.param("tmpfs", marks=pytest.mark.slow), "simulated"])
def small_disk(request, workspace, monkeypatch):
    load_dataset("digits")  # on the normal disk; only runs/ is small
    runs = workspace / "runs"
    runs.mkdir(exist_ok=True)
    mode = request.param
    if mode == "tmpfs" and not _mount_tmpfs(runs):
        warnings.warn("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): the full-disk test ran on the "
                      "simulated disk instead", stacklevel=1)
        mode = "simulated"
    disk = SmallDisk(mode, runs)
    if mode == "simulated":
        monkeypatch.setattr(ws_mod, "_real_write_all", ws_mod._write_all, raising=False)
        monkeypatch.setattr(ws_mod, "_write_all", disk.write_all)
    yield disk
    if mode == "tmpfs":
        subprocess.run(["umount", "-l", str(runs)], check=False)


def _train(disk: SmallDisk, cfg: dict, on_step=None) -> str:
    """A background worker on the tmpfs (the real thing), or the same code in-process on the simulated disk."""
    if disk.mode == "tmpfs":
        run_id = submit(resolve(RunConfig.from_dict(cfg)))
        d = get_run(run_id).path
        deadline = time.time() + 180
        while time.time() < deadline:
            if on_step is not None and on_step(get_run(run_id).step):
                on_step = None
            if get_run(run_id).step and not run_alive(d) or get_run(run_id).status not in ("queued", "running"):
                break
            time.sleep(0.2)
        while run_alive(d) and time.time() < deadline:
            time.sleep(0.2)
        return run_id
    run_id, d = create_run(resolve(RunConfig.from_dict(cfg)).to_dict())
    fired = {"done": on_step is None}

    def step_hook(step: int) -> None:
        if not fired["done"] and on_step(step):
            fired["done"] = True

    execute_run(d, on_step=step_hook)
    return run_id


def _temps(d: Path) -> list[str]:
    return [os.path.join(r, n) for r, ds, fs in os.walk(d) for n in ds + fs if is_temp_name(n)]


def test_checkpoint_on_a_full_disk_fails_the_run_with_the_reason(small_disk):
    run_id = _train(small_disk, CFG)
    rec = get_run(run_id)
    assert rec.status == "failed", (rec.status, rec.error)
    assert rec.error.startswith("no space left on device while writing checkpoint step 10 ("), rec.error
    assert rec.step == 9  # the step before the checkpoint: the failed step is not counted
    assert _temps(rec.path) == [], "temporary files were left behind"
    assert [p.name for p in (rec.path / "checkpoints").iterdir()] == []  # no half checkpoint either
    assert _usage(small_disk.runs) < CAPACITY // 2  # the space of the failed write is free again
    cli = subprocess.run([sys.executable, "-m", "engine", "runs"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert f"failed: {rec.error}" in cli.stdout and "Traceback" not in cli.stdout + cli.stderr
    if small_disk.mode == "tmpfs":  # a background worker: its traceback is in its log
        assert "StorageError: no space left on device while writing checkpoint step 10" in read_log(run_id)


def test_disk_filled_by_someone_else_mid_run(small_disk):
    """Another job takes every free byte while the run trains: the next write fails, and the final
    status still gets written (the worker frees its reserve for it)."""
    cfg = {**CFG, "train": {**CFG["train"], "steps": 100_000, "checkpoint_interval": 100_000, "eval_interval": 1000}}

    def fill_at_step_3(step: int) -> bool:
        if step >= 3:
            small_disk.fill()
            return True
        return False

    run_id = _train(small_disk, cfg, on_step=fill_at_step_3)
    rec = get_run(run_id)
    status = read_status(rec.path)
    assert status["status"] == "failed", status  # written, not only inferred from a dead worker
    assert rec.error.startswith("no space left on device while writing "), rec.error
    assert any(w in rec.error for w in ("metrics segment", "the status of run")), rec.error
    assert _temps(rec.path) == [], "temporary files (or the reserve) were left behind"
