"""``python -m engine doctor [--repair]``: check a workspace, repair what can be repaired, report the rest.

What it looks at, and the repair (``--repair``) of each:

=======================================  ==========================================================
workspace ``VERSION``                    newer than this masklab: reported, nothing else is touched
queue tickets of dead runs               removed
temporary files of dead writers          removed (``.*.tmp``, ``.tmp-*`` in a run folder whose lock is
                                         free; elsewhere when older than an hour)
a run whose process is gone              status rewritten ``interrupted`` (resumable)
(``queued``/``running``, lock free)
unreadable ``status.json``               moved to ``quarantine/``; status rewritten ``interrupted``
unreadable metrics files                 moved to ``<run>/quarantine/metrics/`` (readers then report
                                         the gap instead of skipping the file each time)
uncompacted metrics of an ended run      merged into one part
half-written or damaged checkpoints      moved to ``<run>/quarantine/checkpoints/``
unreadable reconstruction samples        moved to ``<run>/quarantine/samples/``
unreadable ``config.json``               reported (the run cannot be opened; move or delete it)
runs of a newer format                   reported
=======================================  ==========================================================

**Who writes.** Only the holder of a run's lock writes in its folder. Doctor repairs a run only
after taking its lock (so its worker is provably gone and cannot start meanwhile: a worker that
starts then waits up to 10 s for the lock); it never touches a live run (lock held) or one the
launcher has just queued, and reports those. Each repair is recorded in the run's
``doctor.log`` (one JSON line per repair: time, what, files).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.access.policy import Identity, authorized
from engine.errors import DamagedFileError, FormatVersionError, MasklabError, RunLockedError
from engine.runner.queue import QUEUE_DIR, waiting_runs
from engine.store.checkpoints import CKPT_DIR, checkpoint_problem, list_checkpoints
from engine.store.lock import RunLock, run_alive
from engine.store.metrics import QUARANTINE_DIR, compact_metrics, read_table, snapshot
from engine.store.runs import (
    ACTIVE,
    CONFIG_FILE,
    INTERRUPTED_ERROR,
    STATUS_FILE,
    is_starting,
    read_status_checked,
    write_status,
)
from engine.store.samples import SAMPLES_DIR, read_sample_file
from engine.workspace import (
    ENV_VAR,
    FORMAT,
    VERSION_FILE,
    atomic_write_bytes,
    check_workspace_version,
    is_temp_name,
    read_json,
    workspace_format,
)

DOCTOR_LOG = "doctor.log"
STALE_TEMP_S = 3600.0


@dataclass
class Finding:
    """One thing doctor found. ``state``: ``repaired``, ``repairable`` (run with --repair),
    ``problem`` (doctor cannot fix it; the message says what to do) or ``skipped`` (a live run)."""

    state: str
    where: str
    message: str


@dataclass
class DoctorReport:
    """All findings for one workspace."""

    workspace: Path
    findings: list[Finding] = field(default_factory=list)

    @property
    def unresolved(self) -> list[Finding]:
        """Findings still needing something (not ``repaired``, not ``skipped``)."""
        return [f for f in self.findings if f.state in ("repairable", "problem")]

    def lines(self) -> list[str]:
        """One line per finding, then a summary line."""
        out = [f"[{f.state}] {f.where}: {f.message}" for f in self.findings]
        n = len(self.unresolved)
        out.append(f"{self.workspace}: " + ("everything is fine" if not self.findings else
                   f"{len(self.findings)} finding(s), {n} unresolved"))
        return out

    def to_dict(self) -> dict:
        """JSON-safe form (``python -m engine doctor --json``)."""
        return {"workspace": str(self.workspace), "findings": [asdict(f) for f in self.findings]}


def _temps(folder: Path) -> list[Path]:
    out = []
    for p in folder.rglob("*"):
        if is_temp_name(p.name) and not any(is_temp_name(q.name) for q in p.relative_to(folder).parents if q.name):
            out.append(p)
    return out


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _quarantine(run_dir: Path, p: Path) -> Path:
    dest = run_dir / QUARANTINE_DIR / p.relative_to(run_dir)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        dest = dest.with_name(f"{dest.name}.{int(time.time())}")
    p.rename(dest)
    return dest


def _sample_problem(p: Path) -> str | None:
    try:
        read_sample_file(p)
    except DamagedFileError as e:
        return str(e).split(": ", 1)[-1]
    return None


class _RunCheck:
    """Checks (and with ``repair``, repairs) one run folder; appends findings to ``report``."""

    def __init__(self, d: Path, report: DoctorReport, repair: bool):
        self.d, self.report, self.repair = d, report, repair
        self.where = f"run {d.name}"
        self.done: list[dict] = []

    def add(self, message: str, *, fixable: bool = True) -> None:
        state = "problem" if not fixable else ("repaired" if self.repair else "repairable")
        self.report.findings.append(Finding(state, self.where, message))
        if self.repair and fixable:
            self.done.append({"time": time.time(), "repair": message})

    def run(self) -> None:
        d = self.d
        try:
            read_json(d / CONFIG_FILE)
        except (OSError, ValueError) as e:
            self.add(f"{CONFIG_FILE} is unreadable ({e}); the run cannot be opened: move the folder out of "
                     f"runs/ (or delete it)", fixable=False)
            return
        st, bad_status = read_status_checked(d)
        if isinstance(st.get("format"), int) and st["format"] > FORMAT:
            self.add(f"written by a newer masklab (format {st['format']}); upgrade masklab", fixable=False)
            return
        if run_alive(d) or (not bad_status and is_starting(d, st)):
            problems = [p for p in self._bad_metrics()]
            if problems:
                self.report.findings.append(Finding("skipped", self.where, f"live run with {len(problems)} unreadable "
                                                    f"metrics file(s); run doctor --repair after it ends"))
            return
        lock = RunLock(d)
        if self.repair:
            try:
                lock.acquire(timeout=1.0)
            except RunLockedError:
                self.report.findings.append(Finding("skipped", self.where, "its worker started meanwhile"))
                return
        try:
            self._dead_run(st, bad_status)
        finally:
            lock.release()
            if self.done:
                old = (d / DOCTOR_LOG).read_bytes() if (d / DOCTOR_LOG).exists() else b""
                new = "".join(json.dumps(e) + "\n" for e in self.done).encode()
                atomic_write_bytes(d / DOCTOR_LOG, old + new, what=f"the doctor log of run {d.name}")

    def _bad_metrics(self) -> list[tuple[Path, str]]:
        files, _ = snapshot(self.d, retries=1)
        out = []
        for f in files:
            try:
                read_table(f.path)
            except DamagedFileError as e:
                out.append((f.path, e.reason))
            except FileNotFoundError:
                pass
        return out

    def _dead_run(self, st: dict, bad_status: list[str]) -> None:
        d, repair = self.d, self.repair
        temps = _temps(d)
        if temps:
            self.add(f"{'removed' if repair else 'remove'} {len(temps)} temporary file(s) of a dead writer: "
                     + ", ".join(str(t.relative_to(d)) for t in temps[:5]) + (" ..." if len(temps) > 5 else ""))
            if repair:
                for t in temps:
                    _remove(t)
        if bad_status:
            self.add(f"{STATUS_FILE} is unreadable; {'moved it to' if repair else 'move it to'} {QUARANTINE_DIR}/ "
                     f"and record the run as interrupted")
            if repair:
                _quarantine(d, d / STATUS_FILE)
                write_status(d, {"status": "interrupted", "step": 0, "error": f"{STATUS_FILE} was unreadable; "
                                 f"doctor moved it to {QUARANTINE_DIR}/", "repaired_by": "doctor"})
        elif st.get("status", "queued") in ACTIVE:
            self.add(f"its worker process is gone (status {st.get('status', 'queued')!r}, run lock free): "
                     f"{'recorded' if repair else 'record'} it as interrupted (resumable)")
            if repair:
                write_status(d, {**st, "status": "interrupted", "error": INTERRUPTED_ERROR.format(status=st.get("status")),
                                 "ended_at": st.get("ended_at") or st.get("updated_at"), "repaired_by": "doctor"})
        for path, why in self._bad_metrics():
            self.add(f"unreadable metrics file {path.relative_to(d)} ({why}): "
                     f"{'moved' if repair else 'move'} to {QUARANTINE_DIR}/")
            if repair:
                _quarantine(d, path)
        files, _ = snapshot(d, retries=1)
        if len(files) > 1:
            self.add(f"{len(files)} uncompacted metrics file(s) of an ended run: {'merged' if repair else 'merge'} "
                     f"into one")
            if repair:
                try:
                    compact_metrics(d)
                except MasklabError as e:
                    self.add(f"compaction failed: {e}", fixable=False)
        for ckpt in list_checkpoints(d):
            why = checkpoint_problem(ckpt)
            if why:
                self.add(f"checkpoint {ckpt.name} is incomplete or damaged ({why}): "
                         f"{'moved' if repair else 'move'} to {QUARANTINE_DIR}/{CKPT_DIR}/")
                if repair:
                    _quarantine(d, ckpt)
        for p in sorted((d / SAMPLES_DIR).glob("recon-*.npz")):
            why = _sample_problem(p)
            if why:
                self.add(f"unreadable samples {p.name} ({why}): {'moved' if repair else 'move'} to "
                         f"{QUARANTINE_DIR}/{SAMPLES_DIR}/")
                if repair:
                    _quarantine(d, p)


def check_workspace(workspace: Path | str | None = None, *, repair: bool = False,
                    actor: Identity | None = None) -> DoctorReport:
    """Check every run folder and the shared folders of a workspace; with ``repair``, fix what can be.

    Never raises for what it finds (each problem is a :class:`Finding`); the workspace must exist.
    A workspace of a newer format is reported and left alone. A repair is the ``workspace.repair``
    action of ``actor`` (default: the current identity; admins), checked before anything is written
    and audited with the number of repairs; a check alone is a read.

    Raises:
        PermissionDeniedError: ``repair`` and ``actor`` is not an admin, or demo mode; nothing is repaired.
    """
    root = Path(workspace if workspace is not None else os.environ.get(ENV_VAR, "workspace")).expanduser().resolve()
    if not repair or not root.is_dir():
        return _check_workspace(root, False)
    with authorized("workspace.repair", str(root), actor=actor, workspace=root) as entry:
        report = _check_workspace(root, True)
        entry.update(repaired=sum(f.state == "repaired" for f in report.findings), unresolved=len(report.unresolved))
    return report


def _check_workspace(root: Path, repair: bool) -> DoctorReport:
    """:func:`check_workspace` of the existing folder ``root`` (or one that is not), unchecked."""
    report = DoctorReport(root)
    if not root.is_dir():
        report.findings.append(Finding("problem", "workspace", f"{root} does not exist"))
        return report
    try:
        fmt = workspace_format(root)
    except FormatVersionError as e:
        report.findings.append(Finding("problem", VERSION_FILE, str(e)))
        return report
    if fmt is not None and fmt > FORMAT:
        report.findings.append(Finding("problem", VERSION_FILE, f"format {fmt} is newer than this masklab "
                                       f"reads ({FORMAT}); upgrade masklab. Nothing was checked."))
        return report
    if fmt is not None and fmt != FORMAT:
        report.findings.append(Finding("repaired" if repair else "repairable", VERSION_FILE,
                                       f"format {fmt}: "
                                       f"{'recorded' if repair else 'record'} format {FORMAT}; format-1 run folders "
                                       f"are read as they are"))
        if repair:
            check_workspace_version(root)
    runs = root / "runs"
    for d in sorted(runs.iterdir()) if runs.is_dir() else []:
        if d.is_dir() and not d.name.startswith("."):
            _RunCheck(d, report, repair).run()
    live = set(waiting_runs(root, prune=False))
    tickets = [t for t in (root / QUEUE_DIR).glob("*-*") if not t.name.startswith(".")] if (root / QUEUE_DIR).is_dir() else []
    dead = [t for t in tickets if t.name.split("-", 1)[1] not in live]
    if dead:
        report.findings.append(Finding("repaired" if repair else "repairable", QUEUE_DIR,
                                       f"{len(dead)} queue ticket(s) of runs that are no longer waiting"))
        if repair:
            waiting_runs(root, prune=True)
    now = time.time()
    for folder in (root, root / QUEUE_DIR, root / "slots"):
        for p in folder.glob(".*") if folder.is_dir() else []:
            if is_temp_name(p.name) and now - p.stat().st_mtime > STALE_TEMP_S:
                report.findings.append(Finding("repaired" if repair else "repairable", str(p.relative_to(root)),
                                               "temporary file older than an hour"))
                if repair:
                    _remove(p)
    for p in (root / "datasets").glob(".*") if (root / "datasets").is_dir() else []:
        if now - p.stat().st_mtime > STALE_TEMP_S:
            report.findings.append(Finding("problem", str(p.relative_to(root)), "hidden folder of an import that did "
                                           "not finish (owned by engine.data); delete it if no import is running"))
    return report
