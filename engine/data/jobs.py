"""Imports in a background process: progress, cancel, a memory cap; the dashboard never decodes.

    >>> job = start_import("photos.zip", "photos", actor=who)       # returns at once
    >>> import_status(job)          # ImportJob(state="running", done=120, total=900, ...)
    >>> cancel_import(job, actor=who)
    >>> import_status(job).outcome  # ImportOutcome once state == "completed"

Each import is ``python -m engine.data.jobs <job_dir>``, one OS process in its own session, with
``<workspace>/imports/<job_id>/``:

==================  ==========================================================================
``job.json``        the request (source, name, options, image options, who asked), by the caller
``lock``            ``flock`` held by the import process for its life (as a run's lock)
``progress.json``   ``{done, total}`` image files read, rewritten at most every 0.2 s
``result.json``     the end: ``completed`` with the outcome, ``failed`` with the reason, ``cancelled``
``cancel``          the cancel marker (the process is also sent SIGTERM through its lock)
``job.log``         the process's stdout/stderr
==================  ==========================================================================

The process first loads the modules its kind of import needs (:attr:`engine.modalities.Importer.preload`: torch alone maps about
3 GB of address space), then caps its address space (``RLIMIT_AS``) at what it has mapped plus
``$MASKLAB_IMPORT_MEMORY_MB`` (default 2048 MB); an import that needs more ends ``failed`` with a
message naming the variable (Python's MemoryError), never the machine's OOM killer. Any other
unexpected error also ends ``failed``, with its type and message (the traceback is in ``job.log``).
A dataset is registered only by the final atomic rename of :func:`engine.workspace.publish_folder`:
SIGTERM (cancel) raises
:class:`ImportCancelled` in the process, the temporary folder is removed on the way out, and no
partial dataset is ever visible. A job whose process died without a result (SIGKILL) reads
``interrupted``; its temporary folder is the hidden ``datasets/.tmp-*`` that ``doctor`` reports.

The permission (``data.import``, editors) is checked here before the process starts, and again by
the importer in the process, as the same identity (its audit line says who).
"""

from __future__ import annotations

import importlib
import os
import resource
import secrets
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.access import audit
from engine.access.policy import Identity, authorize, authorized
from engine.data.catalog import check_new_name
from engine.data.ingest import detect_source, import_source
from engine.data.tabular import ImportOptions
from engine.errors import DatasetError, MasklabError, NothingImportedError
from engine.modalities import get_importer
from engine.store.lock import RunLock, lock_claimed, run_alive, signal_holder
from engine.workspace import atomic_write_json, read_json, workspace_root

MEMORY_ENV = "MASKLAB_IMPORT_MEMORY_MB"
DEFAULT_MEMORY_MB = 2048
START_GRACE_S = 30.0
"""A job without a result whose process has not taken its lock yet counts as starting this long."""
REPO_ROOT = Path(__file__).resolve().parents[2]
CANCEL_FILE, RESULT_FILE, PROGRESS_FILE, JOB_FILE = "cancel", "result.json", "progress.json", "job.json"


class ImportCancelled(BaseException):
    """Raised in the import process by SIGTERM (a cancel); a BaseException so that no ``except
    Exception`` of a reader swallows it and every ``finally`` (temporary folders) runs."""


@dataclass
class ImportOutcome:
    """What a finished import did, in plain values (what the Data page shows).

    Attributes:
        modality: the dataset's modality (its importer's, :class:`engine.modalities.Importer`).
        dataset: the registered dataset's name (None when nothing was imported).
        accepted: images or documents in the dataset.
        rejected / skipped: ``(file, reason)``.
        geometry: for images, what was done to their size and shape (``ImportReport.geometry_line``).
        summary: the importer's own summary (the CLI's text).
        converted: ``(note, count, first files)``: images converted by a rule worth knowing (CMYK
            through its ICC profile, 32-bit pixels scaled, content lost on the colour under
            transparency...), the most frequent first, with up to :data:`CONVERTED_NAMES` of their files.
    """

    modality: str
    dataset: str | None
    accepted: int
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    geometry: str = ""
    summary: str = ""
    converted: list[tuple[str, int, list[str]]] = field(default_factory=list)


@dataclass
class ImportJob:
    """The state of one background import.

    Attributes:
        job_id: its id (``imports/<job_id>/``).
        state: ``"starting"``, ``"running"``, ``"completed"``, ``"failed"``, ``"cancelled"`` or
            ``"interrupted"`` (its process died without a result).
        done / total: image files read so far / to read (0 / 0 until known; text reports none).
        source: the source as named to the user.
        error: why it failed or was interrupted.
        outcome: set when ``completed``.
        rejected / skipped: ``(file, reason)`` of a ``failed`` import that refused every file (empty
            otherwise; a completed one has them in ``outcome``).
        base_mb / peak_mb: the import process's resident memory (MiB) once its modules were loaded,
            and at its peak; 0 until it ended. ``peak_mb - base_mb`` is what the import itself took.
    """

    job_id: str
    state: str
    done: int = 0
    total: int = 0
    source: str = ""
    error: str = ""
    outcome: ImportOutcome | None = None
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    base_mb: float = 0.0
    peak_mb: float = 0.0

    @property
    def active(self) -> bool:
        """True while it may still change (``starting`` or ``running``)."""
        return self.state in ("starting", "running")


def memory_cap_bytes(environ: dict[str, str] | None = None) -> int:
    """``$MASKLAB_IMPORT_MEMORY_MB`` (default 2048) in bytes.

    Raises:
        DatasetError: not a whole number of at least 256 MB.
    """
    env = os.environ if environ is None else environ
    raw = env.get(MEMORY_ENV, "").strip() or str(DEFAULT_MEMORY_MB)
    if not raw.isdigit() or int(raw) < 256:
        raise DatasetError(f"{MEMORY_ENV}={raw!r} must be a whole number of megabytes, at least 256")
    return int(raw) * 2**20


def jobs_dir(workspace: str | os.PathLike[str] | None = None) -> Path:
    """``<workspace>/imports``."""
    return workspace_root(workspace) / "imports"


def _job_dir(job_id: str, workspace: str | os.PathLike[str] | None) -> Path:
    d = jobs_dir(workspace) / job_id
    if not job_id or "/" in job_id or job_id.startswith(".") or not (d / JOB_FILE).is_file():
        raise DatasetError(f"no import job {job_id!r}")
    return d


def start_import(path: str | os.PathLike[str], name: str | None = None, options: ImportOptions | None = None, *,
                 workspace: str | os.PathLike[str] | None = None, actor: Identity | None = None,
                 source_label: str | None = None, overwrite: bool = False, **image_options: Any) -> str:
    """Start importing ``path`` as dataset ``name`` in a background process; return the job id at once.

    Arguments as :func:`engine.data.import_source` (``image_options``: ``image_size``, ``geometry``,
    ``pad_fill``, ``fill``). The source file must stay in place until the job ends.

    Raises:
        PermissionDeniedError: ``actor`` is not an editor, or demo mode; no process is started.
        DatasetError: ``$MASKLAB_IMPORT_MEMORY_MB`` is invalid, the source does not exist, or
            ``name`` is invalid, reserved or taken (without ``overwrite``).
        StorageError: the job folder cannot be written.
    """
    ws = workspace_root(workspace)
    label = source_label or str(path)
    who = authorize("data.import", name or label, actor=actor, workspace=ws)
    try:  # refused before any process starts: the audit line says why (the job's own line never comes)
        memory_cap_bytes()
        if not Path(path).exists():
            raise DatasetError(f"{label}: no such file or folder")
        if name is not None:  # a bad, reserved or taken name is refused now, not after the whole import

            check_new_name(name, ws, overwrite)
    except DatasetError as e:
        audit.record("data.import", name or label, "failed", who, ws, quiet=True, reason=str(e), file=label)
        raise
    job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    d = jobs_dir(ws) / job_id
    d.mkdir(parents=True)
    atomic_write_json(d / JOB_FILE, {
        "path": str(Path(path).resolve()), "name": name, "options": (options or ImportOptions()).model_dump(),
        "source_label": label, "overwrite": overwrite, "image_options": image_options,
        "actor": asdict(who), "created_at": time.time(),
    })  # fmt: skip
    env = {**os.environ, "MASKLAB_WORKSPACE": str(ws)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    with open(d / "job.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "engine.data.jobs", str(d)], cwd=REPO_ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)  # fmt: skip
    threading.Thread(target=proc.wait, name=f"reap-import-{job_id}", daemon=True).start()
    return job_id


def import_status(job_id: str, workspace: str | os.PathLike[str] | None = None) -> ImportJob:
    """The job's state, progress and, once completed, its outcome. Reads small JSON files only.

    Raises:
        DatasetError: no such job.
    """
    d = _job_dir(job_id, workspace)
    job = read_json(d / JOB_FILE)
    out = ImportJob(job_id, "running", source=job.get("source_label", ""))
    try:
        prog = read_json(d / PROGRESS_FILE)
        out.done, out.total = int(prog["done"]), int(prog["total"])
    except (OSError, ValueError, KeyError):
        pass
    try:
        res = read_json(d / RESULT_FILE)
    except (OSError, ValueError):
        res = None
    if res is not None:
        out.state, out.error = res["state"], res.get("error", "")
        out.rejected = [tuple(x) for x in res.get("rejected", ())]
        out.skipped = [tuple(x) for x in res.get("skipped", ())]
        out.base_mb, out.peak_mb = float(res.get("base_mb", 0.0)), float(res.get("peak_mb", 0.0))
        if res.get("outcome"):
            o = res["outcome"]
            out.outcome = ImportOutcome(**{**o, "rejected": [tuple(x) for x in o["rejected"]],
                                           "skipped": [tuple(x) for x in o["skipped"]],
                                           "converted": [(c[0], c[1], list(c[2])) for c in o.get("converted", [])]})  # fmt: skip
    elif not run_alive(d):
        if not lock_claimed(d) and time.time() - float(job.get("created_at", 0)) < START_GRACE_S:
            out.state = "starting"
        else:
            out.state = "interrupted"
            out.error = ("the import process ended without a result (killed?); nothing was registered. "
                         "See its log, then import again")
    return out


def cancel_import(job_id: str, *, workspace: str | os.PathLike[str] | None = None,
                  actor: Identity | None = None) -> bool:
    """Stop a starting or running import; False when it had already ended. Nothing it read is kept.

    Raises:
        DatasetError: no such job.
        PermissionDeniedError: ``actor`` is not an editor, or demo mode.
    """
    with authorized("data.import", f"import job {job_id}", actor=actor, workspace=workspace) as entry:
        entry["cancel"] = True
        d = _job_dir(job_id, workspace)
        if not import_status(job_id, workspace).active:
            return False
        (d / CANCEL_FILE).touch()
        signal_holder(d, signal.SIGTERM)
        return True


def _outcome(report: Any, modality: str) -> dict[str, Any]:
    """The :class:`ImportOutcome` of ``report`` as a dict; ``modality``: that of the source's importer.
    The geometry line is any report's that has one (images: ``ImportReport.geometry_line``)."""
    geometry = getattr(report, "geometry_line", None)
    return asdict(ImportOutcome(
        modality, report.dataset.name if report.dataset is not None else None, report.accepted,
        list(report.rejected), list(report.skipped),
        geometry() if callable(geometry) and report.dataset is not None else "", report.summary(),
        _converted(getattr(report, "converted", ())),
    ))  # fmt: skip


#: Files named per conversion note in :attr:`ImportOutcome.converted`.
CONVERTED_NAMES = 5


def _converted(pairs) -> list[tuple[str, int, list[str]]]:
    """``[(file, note)]`` -> ``[(note, count, first files)]``, the most frequent note first."""
    files: dict[str, list[str]] = {}
    for name, note in pairs:
        files.setdefault(note, []).append(name)
    return [(note, n, [f for f in files[note] if f][:CONVERTED_NAMES])
            for note, n in Counter(note for _, note in pairs).most_common()]


def _preload(path: str, label: str) -> str:
    """Import the modules the source's importer loads lazily (:attr:`engine.modalities.Importer.preload`:
    under the memory cap, mapping a large shared library fails, "failed to map segment"), and return
    its modality (``""`` when no importer claims the source: the import itself then refuses it in
    masklab's words)."""
    try:
        imp = get_importer(detect_source(path, label))
    except MasklabError:
        return ""
    for name in imp.preload:
        importlib.import_module(name)
    if "PIL.Image" in sys.modules:
        sys.modules["PIL.Image"].init()  # every format plugin, not only the first few
    return imp.modality


def mapped_bytes() -> int:
    """This process's address space now (``VmSize`` of ``/proc/self/status``), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def resident_mb() -> float:
    """This process's resident memory now (``VmRSS`` of ``/proc/self/status``), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise OSError("no VmRSS in /proc/self/status")


def run_job(d: Path) -> int:
    """The import process: take the job's lock, cap memory, import, write ``result.json``. Returns
    the exit code (0 completed, 1 failed, 130 cancelled)."""
    job = read_json(d / JOB_FILE)
    lock = RunLock(d).acquire(timeout=5.0)

    def on_term(signum, frame):  # noqa: ARG001
        raise ImportCancelled()

    signal.signal(signal.SIGTERM, on_term)
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.monotonic() - last[0] >= 0.2 or done == total:
            last[0] = time.monotonic()
            atomic_write_json(d / PROGRESS_FILE, {"done": done, "total": total})

    cap = memory_cap_bytes()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    base_mb = 0.0
    try:
        if (d / CANCEL_FILE).exists():
            raise ImportCancelled()
        modality = _preload(job["path"], job["source_label"])
        base_mb = resident_mb()
        limit = mapped_bytes() + cap
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))  # the soft limit: lifted again below
        report = import_source(job["path"], job["name"], ImportOptions(**job["options"]),
                               overwrite=job["overwrite"], source_label=job["source_label"],
                               actor=Identity(**job["actor"]), progress=progress, **job["image_options"])  # fmt: skip
        result, code = {"state": "completed", "outcome": _outcome(report, modality)}, 0
    except ImportCancelled:
        result, code = {"state": "cancelled", "error": "cancelled; nothing was registered"}, 130
    except MemoryError:
        result, code = {"state": "failed", "error": (
            f"the import needed more memory than its cap of {cap // 2**20} MB ({MEMORY_ENV}); nothing was "
            "registered. Import fewer or smaller images at once, or raise the cap")}, 1  # fmt: skip
    except NothingImportedError as e:  # every file refused: the table of them, as for a partial import
        result, code = {"state": "failed", "error": str(e), "rejected": e.rejected, "skipped": e.skipped}, 1
    except MasklabError as e:
        result, code = {"state": "failed", "error": str(e)}, 1
    except Exception as e:  # a bug or an environment fault: still an ended job, with the reason
        traceback.print_exc()
        result, code = {"state": "failed", "error": (
            f"{type(e).__name__}: {e}; nothing was registered (the traceback is in {d / 'job.log'})")}, 1
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if base_mb:
        result["base_mb"] = round(base_mb, 1)
    result["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux
    atomic_write_json(d / RESULT_FILE, result)
    lock.release()
    return code


if __name__ == "__main__":
    sys.exit(run_job(Path(sys.argv[1])))
