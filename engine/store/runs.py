"""Run records: one folder per run, a resolved config and a status file.

``status.json`` is written by the launcher once (``queued``) and afterwards only by the run's own
worker, always atomically. Readers get :class:`RunRecord` value objects, never raw files.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.errors import RunNotFoundError
from engine.workspace import atomic_write_json, read_json, workspace_root

STATUSES = ("queued", "running", "completed", "failed", "cancelled")
ACTIVE = ("queued", "running")
CONFIG_FILE = "config.json"
STATUS_FILE = "status.json"
CANCEL_FILE = "cancel"


def runs_root(workspace=None) -> Path:
    """``<workspace>/runs`` (created if missing)."""
    d = workspace_root(workspace) / "runs"
    d.mkdir(parents=True, exist_ok=True)
    return d


def run_dir(run_id: str, workspace=None) -> Path:
    """Folder of ``run_id``. Raises :class:`RunNotFoundError` if it does not exist or the id is malformed."""
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise RunNotFoundError(f"no run {run_id!r}")
    d = runs_root(workspace) / run_id
    if not (d / CONFIG_FILE).exists():
        raise RunNotFoundError(f"no run {run_id!r} in {runs_root(workspace)}")
    return d


@dataclass(frozen=True)
class RunRecord:
    """What the store knows about one run (times are unix seconds)."""

    run_id: str
    name: str
    status: str
    created_at: float
    started_at: float | None
    ended_at: float | None
    step: int
    total_steps: int
    error: str | None
    latest: dict[str, float]
    config: dict[str, Any]
    pid: int | None
    path: Path
    updated_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def progress(self) -> float:
        """Fraction of steps done, in [0, 1]."""
        return min(1.0, self.step / self.total_steps) if self.total_steps else 0.0

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to end (or to now while running); None before it starts."""
        if self.started_at is None:
            return None
        return (self.ended_at or time.time()) - self.started_at

    @property
    def is_active(self) -> bool:
        """True while queued or running."""
        return self.status in ACTIVE


def new_run_id(name: str = "") -> str:
    """A sortable, unique id: ``YYYYmmdd-HHMMSS-<6 hex>``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def create_run(config: dict[str, Any], workspace=None) -> tuple[str, Path]:
    """Create a run folder with its resolved config and a ``queued`` status. Returns (run_id, folder)."""
    root = runs_root(workspace)
    while True:
        run_id = new_run_id()
        d = root / run_id
        try:
            d.mkdir()
            break
        except FileExistsError:
            continue
    atomic_write_json(d / CONFIG_FILE, config)
    total = int(config.get("train", {}).get("steps", 0))
    write_status(d, {"status": "queued", "created_at": time.time(), "step": 0, "total_steps": total})
    return run_id, d


def write_status(d: Path, status: dict[str, Any]) -> None:
    """Atomically replace the run's status file (worker and launcher only)."""
    if status.get("status") not in STATUSES:
        raise ValueError(f"unknown run status {status.get('status')!r}")
    status = {**status, "updated_at": time.time(), "host": socket.gethostname()}
    atomic_write_json(d / STATUS_FILE, status)


def read_status(d: Path) -> dict[str, Any]:
    """The raw status dict (``{}`` if it cannot be read yet)."""
    try:
        return read_json(d / STATUS_FILE)
    except (FileNotFoundError, ValueError):
        return {}


def worker_alive(pid: int | None, run_id: str) -> bool:
    """True if ``pid`` is a live process whose command line names this run (guards against pid reuse)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc (not Linux): the pid exists; trust it
    if b"<defunct>" in cmdline or not cmdline:
        return False
    # background worker: its argv holds the run folder; foreground CLI: `python -m engine run ...`
    return run_id.encode() in cmdline or b"-m\x00engine\x00run\x00" in cmdline


def _record(d: Path) -> RunRecord:
    cfg = read_json(d / CONFIG_FILE)
    st = read_status(d)
    status = st.get("status", "queued")
    error = st.get("error")
    pid = st.get("pid")
    if status in ACTIVE and st.get("host") in (None, socket.gethostname()):
        # A queued run without a pid was just created: the launcher writes the pid a moment later.
        grace = time.time() - float(st.get("updated_at", 0)) < 10
        if (pid and not worker_alive(pid, d.name)) or (not pid and not grace):
            status, error = "failed", "worker process exited without reporting (killed or crashed); see worker.log"
            st = {**st, "ended_at": st.get("ended_at") or st.get("updated_at")}  # its last sign of life
    return RunRecord(
        run_id=d.name,
        name=cfg.get("name") or d.name,
        status=status,
        created_at=float(st.get("created_at", d.stat().st_mtime)),
        started_at=st.get("started_at"),
        ended_at=st.get("ended_at"),
        step=int(st.get("step", 0)),
        total_steps=int(st.get("total_steps", cfg.get("train", {}).get("steps", 0))),
        error=error,
        latest=dict(st.get("latest", {})),
        config=cfg,
        pid=pid,
        path=d,
        updated_at=st.get("updated_at"),
        extra={k: v for k, v in st.items() if k in ("device", "n_params", "throughput")},
    )


def get_run(run_id: str, workspace=None) -> RunRecord:
    """The record of one run. Raises :class:`RunNotFoundError`."""
    return _record(run_dir(run_id, workspace))


def list_runs(workspace=None) -> list[RunRecord]:
    """All runs, newest first. Reads only small JSON files (no metrics)."""
    out = []
    for d in runs_root(workspace).iterdir():
        if (d / CONFIG_FILE).exists():
            try:
                out.append(_record(d))
            except (OSError, ValueError):
                continue  # a half-created folder: skip it, never fail the whole list
    return sorted(out, key=lambda r: r.created_at, reverse=True)
