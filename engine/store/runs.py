"""Run records: one folder per run, a resolved config, a status file and the run lock.

``status.json`` is written by the launcher once (``queued``, before the worker exists) and
afterwards only by the holder of the run lock (:mod:`engine.store.lock`): the worker, or, once the
lock proves the worker gone, ``doctor --repair`` or a resume. Always atomically. Readers get
:class:`RunRecord` value objects, never raw files; they decide whether a ``queued``/``running`` run
is alive by its lock, and report a dead one as ``interrupted`` without rewriting anything.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.errors import DamagedFileError, FormatVersionError
from engine.messages import describe_error
from engine.store.annotations import read_annotations
from engine.store.lock import run_alive
from engine.store.paths import CONFIG_FILE, note_write, run_dir, runs_root
from engine.workspace import FORMAT, atomic_write_json, read_json

log = logging.getLogger(__name__)

#: ``interrupted``: the worker process is gone (killed, crashed, machine stopped) while the status
#: said queued/running; resumable. ``diverged``: the loss became NaN/inf (written by the loop).
STATUSES = ("queued", "running", "completed", "failed", "cancelled", "interrupted", "diverged")
ACTIVE = ("queued", "running")
RESUMABLE = ("failed", "cancelled", "diverged", "interrupted")
STATUS_FILE = "status.json"
CANCEL_FILE = "cancel"
#: While this marker exists, a local single-process worker waits before its next step (cancel still
#: reaches it): a run that has to stay alive for exactly as long as someone looks at it, such as a
#: browser test's live run, holds without taking a core. Wall-clock figures count the wait.
HOLD_FILE = "hold"
LOG_FILE = "worker.log"
#: A run the launcher has just created has no worker (and no lock) for the moment Python takes to
#: start one; for this long a lock-less ``queued`` run without a worker pid is still "starting".
LAUNCH_GRACE_S = 30.0
#: Status field of a run handed to a cluster back-end, written by the launcher before it submits the
#: job (``{"backend": "ray"}``); the worker's first status write drops it.
CLUSTER_JOB_FIELD = "cluster_job"
INTERRUPTED_ERROR = "its worker process is gone (killed, crashed, or its machine stopped) while {status}"


@dataclass(frozen=True)
class RunRecord:
    """What the store knows about one run (times are unix seconds).

    ``warnings`` lists what could not be read (e.g. a damaged ``status.json``); the record is
    still usable. ``tags``, ``note`` and ``archived`` come from ``annotations.json``
    (:mod:`engine.store.annotations`). ``pid`` is informational (the worker's last known PID): liveness and cancel never
    use it.
    """

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
    warnings: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    note: str = ""
    archived: bool = False

    @property
    def progress(self) -> float:
        """Fraction of steps done, in [0, 1]."""
        return min(1.0, self.step / self.total_steps) if self.total_steps else 0.0

    @property
    def duration_s(self) -> float | None:
        """Seconds the run trained: from the start of its latest leg to its end (to the end of training
        while its worker evaluates: ``extra["trained_at"]``; to now while it trains), plus the seconds of
        the legs before its latest resume (``extra["prior_s"]``; the pauses between legs are left out),
        so a completed run's duration is what it read while evaluating. None before it starts."""
        if self.started_at is None:
            return None
        end = self.ended_at or self.extra.get("trained_at") or time.time()
        return float(self.extra.get("prior_s") or 0.0) + float(end) - self.started_at

    @property
    def is_active(self) -> bool:
        """True while queued or running (its worker holds the run lock, or is starting)."""
        return self.status in ACTIVE

    @property
    def is_resumable(self) -> bool:
        """True for failed, cancelled, diverged and interrupted runs (resume needs a checkpoint too)."""
        return self.status in RESUMABLE


def new_run_id(name: str = "") -> str:
    """A sortable, unique id: ``YYYYmmdd-HHMMSS-<6 hex>``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def create_run(config: dict[str, Any], workspace=None) -> tuple[str, Path]:
    """Create a run folder with its resolved config and a ``queued`` status. Returns (run_id, folder).

    Internal, with no permission check: the write paths that create runs call it inside their
    :func:`engine.access.policy.authorized` (:func:`engine.runner.launcher.submit`, the CLI's
    foreground ``run``); it is not in :mod:`engine.api`, so no page can call it.

    Raises:
        StorageError: the folder or its files cannot be written (nothing half-written is left).
    """
    root = runs_root(workspace)
    while True:
        run_id = new_run_id()
        d = root / run_id
        try:
            d.mkdir()
            break
        except FileExistsError:
            continue
    now = time.time()
    atomic_write_json(d / CONFIG_FILE, config, what=f"the config of run {run_id}")
    total = int(config.get("train", {}).get("steps", 0))
    write_status(d, {"status": "queued", "created_at": now, "queued_at": now, "step": 0, "total_steps": total,
                     **cluster_mark(config)})
    return run_id, d


def cluster_mark(config: dict[str, Any]) -> dict[str, Any]:
    """The status field of a queued run whose config hands it to a cluster back-end
    (``{"cluster_job": {"backend": "ray"}}``), or ``{}`` for a local run (:data:`CLUSTER_JOB_FIELD`)."""
    backend = (config.get("launch") or {}).get("backend", "local")
    return {} if backend == "local" else {CLUSTER_JOB_FIELD: {"backend": backend}}


def write_status(d: Path, status: dict[str, Any]) -> None:
    """Atomically replace the run's status file (the launcher at creation, then the lock holder only).

    Raises:
        ValueError: unknown status value.
        StorageError: the file cannot be written (the old one is kept).
    """
    if status.get("status") not in STATUSES:
        raise ValueError(f"unknown run status {status.get('status')!r}")
    status = {**status, "updated_at": time.time(), "host": socket.gethostname(), "format": FORMAT}
    atomic_write_json(Path(d) / STATUS_FILE, status, what=f"the status of run {Path(d).name}")
    note_write(d)


def read_status(d: Path) -> dict[str, Any]:
    """The raw status dict (``{}`` if it is missing or unreadable)."""
    try:
        st = read_json(Path(d) / STATUS_FILE)
    except (OSError, ValueError):
        return {}
    return st if isinstance(st, dict) else {}


def read_status_checked(d: Path) -> tuple[dict[str, Any], list[str]]:
    """The status dict and a list with what is wrong with the file (empty when fine; a missing file
    is fine: the run was just created)."""
    path = d / STATUS_FILE
    try:
        st = read_json(path)
        if not isinstance(st, dict):
            raise ValueError(f"expected a JSON object, found {type(st).__name__}")
        return st, []
    except FileNotFoundError:
        return {}, []
    except (OSError, ValueError) as e:
        return {}, [f"{d.name}/{STATUS_FILE} is unreadable ({describe_error(e)}); status, step and latest metrics are unknown"]


def _float(v: Any) -> float | None:
    try:
        return float(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def is_starting(d: Path, st: dict[str, Any] | None = None) -> bool:
    """True for a run the launcher queued less than :data:`LAUNCH_GRACE_S` ago whose worker has not
    taken the run lock yet (``queued``, no worker pid), or handed to a cluster (``cluster_job`` in
    its status, :mod:`engine.runner.backends`) whose worker has not started: the cluster's queue may hold
    it for hours; the launcher records the run's end if its job ends without a worker
    (:func:`engine.runner.launcher.job_state`). ``st``: its status dict, read if None."""
    if st is None:
        st, damaged = read_status_checked(Path(d))
        if damaged:
            return False
    if st.get("status", "queued") != "queued" or st.get("pid"):
        return False
    if st.get(CLUSTER_JOB_FIELD):
        return True
    try:
        since = _float(st.get("updated_at")) or (Path(d) / CONFIG_FILE).stat().st_mtime
    except OSError:
        return False
    return time.time() - since < LAUNCH_GRACE_S


@dataclass(frozen=True)
class RunFiles:
    """What a run's own small files say, read once: its config, raw status and annotations, the
    warnings about them, and the folder's and config's mtimes (fallback times). Everything a
    :class:`RunRecord` needs apart from liveness (the lock) and the clock (:func:`derive_record`)."""

    cfg: dict[str, Any]
    st: dict[str, Any]
    notes: Any
    warnings: tuple[str, ...]
    dir_mtime: float
    config_mtime: float

    @property
    def raw_active(self) -> bool:
        """True when the file says queued or running: the record then depends on the lock and the clock."""
        return self.st.get("status", "queued" if not self.warnings else "running") in ACTIVE


def read_run_files(d: Path) -> RunFiles:
    """Read a run folder's ``config.json``, ``status.json`` and ``annotations.json``.

    Raises:
        DamagedFileError: its ``config.json`` is unreadable.
        FileNotFoundError: the folder or its config is gone.
    """
    try:
        cfg = read_json(d / CONFIG_FILE)
        config_mtime = (d / CONFIG_FILE).stat().st_mtime
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        raise DamagedFileError(f"{d / CONFIG_FILE}: unreadable run config ({describe_error(e)})") from None
    st, warnings = read_status_checked(d)
    notes, damaged = read_annotations(d)
    return RunFiles(cfg, st, notes, tuple(warnings + damaged), d.stat().st_mtime, config_mtime)


def _record(d: Path) -> RunRecord:
    return derive_record(d, read_run_files(d))


def derive_record(d: Path, files: RunFiles) -> RunRecord:
    """The :class:`RunRecord` of folder ``d`` from its files, deciding a queued/running run's
    liveness now (its lock, :func:`is_starting`).

    Raises:
        FormatVersionError: the run was written by a newer masklab.
    """
    cfg, st, notes, warnings = files.cfg, files.st, files.notes, list(files.warnings)
    fmt = st.get("format", 1)
    if isinstance(fmt, int) and fmt > FORMAT:
        raise FormatVersionError(f"run {d.name} was written by a newer masklab (format {fmt}; this masklab "
                                 f"reads up to {FORMAT}); upgrade masklab to open it")
    status = st.get("status", "queued" if not warnings else "running")
    error = st.get("error")
    if status not in STATUSES:
        warnings.append(f"{d.name}/{STATUS_FILE}: unknown status {status!r}")
        status, error = "failed", f"unknown status {status!r} in {STATUS_FILE}"
    if status in ACTIVE and st.get("host") in (None, socket.gethostname()) and not run_alive(d):
        if not is_starting(d, {**st, "status": status}):
            error = INTERRUPTED_ERROR.format(status=status)
            status = "interrupted"
            since = _float(st.get("updated_at")) or files.config_mtime
            st = {**st, "ended_at": st.get("ended_at") or since}  # its last sign of life
    return RunRecord(
        run_id=d.name,
        name=cfg.get("name") or d.name,
        status=status,
        created_at=_float(st.get("created_at")) or files.dir_mtime,
        started_at=_float(st.get("started_at")),
        ended_at=_float(st.get("ended_at")),
        step=int(st.get("step", 0)),
        total_steps=int(st.get("total_steps", cfg.get("train", {}).get("steps", 0))),
        error=error,
        latest=dict(st.get("latest", {})),
        config=cfg,
        pid=st.get("pid"),
        path=d,
        updated_at=_float(st.get("updated_at")),
        extra={k: v for k, v in st.items() if k in ("device", "n_params", "throughput", "num_threads",
                                                    "deterministic", "queued_at", "format", "resume_from",
                                                    "restarts", "peak_mem_bytes", "phase", "placement",
                                                    "torchrun_exit", "prior_s", "slot", "gpus", "trained_at")},
        warnings=tuple(warnings),
        tags=notes.tags,
        note=notes.note,
        archived=notes.archived,
    )


def get_run(run_id: str, workspace=None) -> RunRecord:
    """The record of one run.

    Raises:
        RunNotFoundError: no such run.
        DamagedFileError: its ``config.json`` is unreadable.
        FormatVersionError: the run folder was written by a newer masklab.
    """
    return _record(run_dir(run_id, workspace))


def read_log(run_id: str, max_bytes: int = 64_000, workspace=None) -> str | None:
    """The end of the run's ``worker.log`` (its stdout and stderr), at most ``max_bytes`` bytes.

    Returns None when the run has no log (it ran in the foreground: its output went to that
    terminal). Undecodable bytes are replaced; a cut log starts with a line saying how much is hidden.
    Raises :class:`RunNotFoundError` for an unknown run.
    """
    path = run_dir(run_id, workspace) / LOG_FILE
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return None
    if size > max_bytes:  # start at a whole line
        data = data.split(b"\n", 1)[-1]
        return f"[... {size - len(data):,} earlier bytes not shown ...]\n" + data.decode("utf-8", errors="replace")
    return data.decode("utf-8", errors="replace")
