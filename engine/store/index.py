"""The run index: a per-process kept table of a workspace's runs, so the run list (and each run's
latest metrics) costs about the same at 2,000 runs as at 20 (docs/architecture.md, "A reader's
kept tables", gives the design).

Memory, never a file: the lock holder stays the only writer of a run's files. A **validation**
lists ``runs/`` and re-reads only the run folders (and ``metrics/`` folders) whose ``(inode,
mtime_ns)`` changed, or that changed less than :data:`RACY_S` before it started; queued and running
records are derived again at every validation (:func:`engine.store.runs.derive_record`).

``list_runs()`` validates on every call (exact). ``list_runs(max_age_s=1.0)`` returns the table of
a validation that started at most ``max_age_s`` ago, kept current by a background thread while such
calls come (it stops after :data:`IDLE_STOP_S` idle seconds). This process's own writes through
the store and a change of ``runs/`` itself make the next call validate at once.

Records are shared between callers: never mutate a record's ``config``, ``latest`` or ``extra``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from engine.errors import DamagedFileError, FormatVersionError
from engine.store.metrics import SEGMENT_DIR
from engine.store.metrics_cache import latest_of
from engine.store.paths import runs_root
from engine.store.runs import CONFIG_FILE, RunFiles, RunRecord, derive_record, read_run_files

log = logging.getLogger(__name__)

#: A folder changed less than this many seconds before a validation is read again at the next one.
RACY_S = 2.0
#: The background validation stops after this many seconds without a ``max_age_s`` call.
IDLE_STOP_S = 60.0
#: Workspaces whose index a process keeps (least recently used dropped).
MAX_INDEXES = 16

Key = tuple[int, int]  # (st_ino, st_mtime_ns) of a folder; (0, 0) when it does not exist


def _key(path: str) -> tuple[Key, float]:
    """The folder's key and its mtime in seconds ((0, 0) and 0.0 when it is missing)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return (0, 0), 0.0
    return (st.st_ino, st.st_mtime_ns), st.st_mtime


@dataclass
class _Entry:
    """One run folder as last validated."""

    key: Key
    files: RunFiles | None  # None: not a run (no config.json), or unreadable (logged once)
    record: RunRecord | None
    racy: bool  # the folder changed within RACY_S of the validation: read it again next time
    metrics_key: Key = (0, 0)
    metrics_racy: bool = True
    latest: dict[str, tuple[int, float]] | None = None  # None: not computed (nobody asked yet, or reloaded)


class RunIndex:
    """The kept table of one ``runs/`` folder (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._entries: dict[str, _Entry] = {}
        self._records: tuple[RunRecord, ...] = ()
        self._validated_at = float("-inf")  # time.monotonic() when the last validation started
        self._root_key: Key = (0, 0)
        self._root_racy = True
        self._dirty = True  # a write by this process: validate at the next call
        self._version = 0  # bumped by a validation that replaced an entry or recomputed latest points
        self._wanted: set[str] = set()  # runs whose latest points were asked for: kept current
        self._latest_memo: tuple | None = None  # (version, run ids, points) of the last latest() answer
        self._lock = threading.Lock()  # one validation at a time
        self._thread_lock = threading.Lock()
        self._last_used = 0.0
        self._interval = 0.5
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ reads

    def records(self, max_age_s: float = 0.0) -> list[RunRecord]:
        """All runs, newest first, from a validation that started at most ``max_age_s`` s ago
        (0: validate now)."""
        self._fresh(max_age_s)
        return list(self._records)

    def latest(self, run_ids: list[str], max_age_s: float = 0.0) -> dict[tuple[str, str], tuple[int, float]]:
        """``(run_id, key) -> (step, value)`` of the last logged point of every metric of each run in
        ``run_ids`` (unknown ids are left out), as current as :meth:`records`."""
        self._fresh(max_age_s)
        ids, version = tuple(run_ids), self._version
        memo = self._latest_memo
        if memo is not None and memo[0] == version and memo[1] == ids:
            return dict(memo[2])
        entries = self._entries
        out: dict[tuple[str, str], tuple[int, float]] = {}
        for rid in ids:
            e = entries.get(rid)
            if e is None or e.record is None:
                continue
            if e.latest is None:  # first request for this run (or just reloaded): compute now
                e.latest = latest_of(self.root / rid)
                self._wanted.add(rid)
            for k, p in e.latest.items():
                out[(rid, k)] = p
        self._latest_memo = (version, ids, out)  # the version seen before reading: a newer one recomputes
        return dict(out)

    def invalidate(self) -> None:
        """Make the next call validate (this process has just written a run's files)."""
        self._dirty = True

    def _fresh(self, max_age_s: float) -> None:
        now = time.monotonic()
        self._last_used = now
        if max_age_s > 0:
            self._interval = max(0.05, max_age_s / 2)
            self._ensure_refresher()
            if not self._dirty and now - self._validated_at <= max_age_s and not self._root_changed():
                return
        self.validate()

    def _root_changed(self) -> bool:
        """True when ``runs/`` itself changed (a run created or removed) since the last validation."""
        return self._root_racy or _key(str(self.root))[0] != self._root_key

    # ------------------------------------------------------------ validation

    def validate(self) -> None:
        """Bring the table up to date with the folders (see the module docstring)."""
        with self._lock:
            started, wall = time.monotonic(), time.time()
            self._dirty = False
            root_key, root_mtime = _key(str(self.root))
            old, entries, changed, touched = self._entries, {}, False, False
            wanted = self._wanted
            try:
                listing = [(e.name, e.path) for e in os.scandir(self.root) if not e.name.startswith(".") and e.is_dir()]
            except FileNotFoundError:
                listing = []
            for name, path in listing:
                key, mtime = _key(path)
                e = old.get(name)
                if e is None or e.key != key or e.racy:
                    new = self._load(name, path, key, wall - mtime < RACY_S, e)
                    changed |= e is None or new.record != e.record
                    touched = True
                    e = new
                elif e.files is not None and e.files.raw_active:
                    rec = self._derive(path, e.files)
                    changed |= rec != e.record
                    e.record = rec
                if name in wanted and e.record is not None:
                    mkey, mmtime = _key(os.path.join(path, SEGMENT_DIR))
                    if mkey != e.metrics_key or e.metrics_racy or e.latest is None:
                        e.latest = latest_of(Path(path))
                        touched = True
                        e.metrics_key, e.metrics_racy = mkey, wall - mmtime < RACY_S
                entries[name] = e
            changed |= entries.keys() != old.keys()
            if changed:
                recs = (e.record for e in entries.values() if e.record is not None)
                self._records = tuple(sorted(recs, key=lambda r: r.created_at, reverse=True))
            if changed or touched:
                self._version += 1
            self._entries = entries
            self._root_key, self._root_racy = root_key, wall - root_mtime < RACY_S
            self._validated_at = started

    def _load(self, name: str, path: str, key: Key, racy: bool, old: _Entry | None) -> _Entry:
        """Read a new or changed run folder."""
        d = Path(path)
        if not os.path.exists(os.path.join(path, CONFIG_FILE)):
            return _Entry(key, None, None, racy)
        try:
            files = read_run_files(d)
            rec = derive_record(d, files)
        except FileNotFoundError:  # removed while being read
            return _Entry(key, None, None, True)
        except (OSError, ValueError, DamagedFileError, FormatVersionError) as e:
            if old is None or old.files is not None or old.key != key:
                log.warning("skipping run folder %s: %s", d, e)
            return _Entry(key, None, None, racy)
        return _Entry(key, files, rec, racy)

    @staticmethod
    def _derive(path: str, files: RunFiles) -> RunRecord | None:
        try:
            return derive_record(Path(path), files)
        except (OSError, ValueError, FormatVersionError):
            return None

    # ------------------------------------------------------------ background validation

    def _ensure_refresher(self) -> None:
        t = self._thread
        if t is not None and t.is_alive():
            return
        with self._thread_lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._refresh_loop, name=f"masklab-run-index {self.root}",
                                            daemon=True)
            self._thread.start()

    def _refresh_loop(self) -> None:
        while time.monotonic() - self._last_used < IDLE_STOP_S and self.root.is_dir():
            try:
                self.validate()
            except Exception:  # noqa: BLE001 - a broken folder must not kill the thread silently
                log.exception("run index validation of %s failed", self.root)
            time.sleep(self._interval)


_indexes: OrderedDict[str, RunIndex] = OrderedDict()
_indexes_lock = threading.Lock()


def index_for(root: Path) -> RunIndex:
    """This process's :class:`RunIndex` of the ``runs/`` folder ``root`` (made on first use)."""
    k = str(root)
    idx = _indexes.get(k)
    if idx is not None:
        return idx
    with _indexes_lock:
        idx = _indexes.get(k)
        if idx is None:
            idx = _indexes[k] = RunIndex(root)
            while len(_indexes) > MAX_INDEXES:
                _indexes.popitem(last=False)
        return idx


def note_write(run_dir: Path | None = None) -> None:
    """Tell this process's indexes that it has just changed a run's files (``run_dir``, for the
    reader): each validates at its next call. Cheap (every kept index is marked, whatever its
    workspace, so a path spelled differently cannot be missed)."""
    for idx in list(_indexes.values()):
        idx.invalidate()


def list_runs(workspace=None, *, max_age_s: float = 0.0) -> list[RunRecord]:
    """All runs, newest first. Reads only small JSON files (no metrics), and only those of runs
    that changed since this process last looked (:mod:`engine.store.index`).

    Args:
        workspace: the workspace (default ``$MASKLAB_WORKSPACE``).
        max_age_s: 0 (default): exact, the folders are checked now (about 2 us per run plus the
            files of changed runs). Above 0: a table no older than this many seconds may be
            returned, kept current by a background thread (the dashboard passes 1.0: a list of
            2,000 runs then costs a copy of the table). A write through the store by this process
            shows at once either way.

    A run folder that cannot be read (damaged ``config.json``, newer format, half-created) is left
    out with a logged warning (once); ``python -m engine doctor`` reports it. The records are shared
    with other callers: do not mutate their dicts.
    """
    return index_for(runs_root(workspace)).records(max_age_s)
