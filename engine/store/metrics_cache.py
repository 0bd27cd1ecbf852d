"""Metrics reads that stay fast in a long-lived reader (the dashboard): cached, and exact.

A metrics file is immutable once renamed into place (:mod:`engine.store.metrics`), so its decoded
rows are cached under its **identity** ``(path, inode, size, mtime_ns)``; a run's current
:func:`~engine.store.metrics.snapshot` identities are the **signature** of its metrics. Kept
tables, per process and bounded (least recently used dropped):

* decoded files: (identity, keys) -> Arrow table, within :data:`FILE_CACHE_BYTES`;
* results: ``(run folder, signature, keys, max_points)`` -> deduplicated, downsampled DataFrame,
  within :data:`RESULT_CACHE_BYTES`;
* latest points: identity -> the last ``(step, wall_time, value)`` of each key in that file.

The cache changes a read's cost, never its answer: ``read_metrics_files``
(:mod:`engine.store.metrics`) is the uncached reference the tests compare with. Queries go through
one in-memory DuckDB database, one cursor per thread. See docs/architecture.md, "A reader's kept
tables".
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import DamagedFileError
from engine.store.metrics import (
    COLUMNS,
    QUARANTINE_DIR,
    READ_RETRIES,
    SCHEMA,
    MetricFile,
    query_table,
    read_metrics_files,
    read_table,
    snapshot,
)

if TYPE_CHECKING:  # pandas only where a frame is built (engine.store's docstring)
    import pandas as pd

#: Bytes of decoded metrics files kept per process (``$MASKLAB_METRICS_CACHE_MB``, default 256).
FILE_CACHE_BYTES = int(float(os.environ.get("MASKLAB_METRICS_CACHE_MB", "256")) * 2**20)
#: Bytes of per-run results kept per process (a quarter of the file cache).
RESULT_CACHE_BYTES = FILE_CACHE_BYTES // 4

FileId = tuple[str, int, int, int]  # (path, inode, size, mtime_ns)


class LRU:
    """A dict bounded by a total cost (bytes), least recently used dropped first; thread-safe.

    ``cost(value)`` gives an entry's cost; an entry dearer than the whole budget is not kept.
    """

    def __init__(self, budget: int, cost: Callable[[Any], int] = lambda v: 1):
        self.budget = budget
        self._cost = cost
        self._d: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        """The value kept under ``key`` (marked recently used), or None."""
        with self._lock:
            hit = self._d.get(key)
            if hit is None:
                return None
            self._d.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key``, dropping the least recently used entries beyond the budget."""
        c = self._cost(value)
        if c > self.budget:
            return
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self._total -= old[1]
            self._d[key] = (value, c)
            self._total += c
            while self._total > self.budget and self._d:
                _, (_, oc) = self._d.popitem(last=False)
                self._total -= oc

    def clear(self) -> None:
        """Drop everything."""
        with self._lock:
            self._d.clear()
            self._total = 0

    def __len__(self) -> int:
        return len(self._d)


_files = LRU(FILE_CACHE_BYTES, lambda t: t.nbytes)
_results = LRU(RESULT_CACHE_BYTES, lambda r: int(r[0].memory_usage(index=False, deep=False).sum()) + 200)
_latest = LRU(2_000_000, lambda v: 1 + len(v))


def clear_caches() -> None:
    """Forget every kept file, result and latest point of this process (tests, benchmarks)."""
    _files.clear()
    _results.clear()
    _latest.clear()


def file_id(path: Path) -> FileId:
    """``(path, inode, size, mtime_ns)`` of a metrics file. Raises FileNotFoundError if it is gone."""
    st = os.stat(path)
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)


def signature(run_dir: Path) -> tuple[list[MetricFile], list[FileId], list[str]] | None:
    """The run's current snapshot, the identity of each of its files and the snapshot's warnings.

    None when a file vanished between the listing and its ``stat`` (a merge was renaming): the
    caller lists again.
    """
    files, warnings = snapshot(run_dir)
    try:
        return files, [file_id(f.path) for f in files], warnings
    except FileNotFoundError:
        return None


def _file_table(fid: FileId, keys: tuple[str, ...] | None = None) -> pa.Table:
    """The decoded rows of one file (``keys`` only; None: all), from the cache or read once with
    the keys filtered while decoding (as the uncached reader does). Kept per (file, keys): a page
    asks for the same keys at every refresh.

    Raises DamagedFileError (unreadable) or FileNotFoundError (merged away) like ``read_table``.
    """
    t = _files.get((fid, keys))
    if t is None:
        t = read_table(Path(fid[0]), [("key", "in", list(keys))] if keys else None)
        _files.put((fid, keys), t)
    return t


def _run_table(run_dir: Path, files: list[MetricFile], ids: list[FileId], keys: tuple[str, ...] | None,
               warnings: list[str]) -> pa.Table:
    """The rows of a snapshot (``keys`` only), skipping unreadable files with a warning (the
    uncached reader's words)."""
    tables = []
    for f, fid in zip(files, ids):
        try:
            tables.append(_file_table(fid, keys))
        except DamagedFileError as e:
            warnings.append(f"{run_dir.name}: skipped unreadable metrics file {f.path.relative_to(run_dir)} "
                            f"({e.reason}); its rows are missing; "
                            f"`python -m engine doctor --repair` moves it to {QUARANTINE_DIR}/")
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def _prepare(run_dir: Path, keys: tuple[str, ...] | None, max_points: int | None):
    """One run's cache key and kept result, or (on a miss) its rows to compute; and its warnings.

    Returns ``(cache key, kept (frame, warnings) or None, table or None, warnings)``; the cache key
    is None when the files kept changing while being read (nothing is kept then).
    """
    for attempt in range(READ_RETRIES * 4):
        sig = signature(run_dir)
        if sig is None:
            time.sleep(0.005 * (attempt + 1))
            continue
        files, ids, warnings = sig
        ck = (str(run_dir), tuple(ids), keys, max_points)
        hit = _results.get(ck)
        if hit is not None:
            return ck, hit, None, list(hit[1])
        warnings = list(warnings)
        try:
            table = _run_table(run_dir, files, ids, keys, warnings)
        except FileNotFoundError:
            time.sleep(0.005 * (attempt + 1))
            continue
        return ck, None, table, warnings
    return None, None, SCHEMA.empty_table(), [f"{run_dir.name}: its metrics files kept changing while being read; try again"]


def _compute(misses: list[tuple], max_points: int | None) -> list[pd.DataFrame]:
    """The deduplicated, downsampled frame of each missed run (``(cache key, table, warnings)``),
    kept for the next read. One DuckDB query serves them all when each table holds rows of one run
    id of its own (always, but for a folder copied by hand): its result is split by run id."""
    rids = []
    for _, t, _ in misses:
        u = pc.unique(t["run_id"])
        rids.append(u[0].as_py() if len(u) == 1 else ("" if len(u) == 0 else None))
    named = [r for r in rids if r]
    if len(misses) > 1 and None not in rids and len(set(named)) == len(named):
        big = query_table(pa.concat_tables([t for _, t, _ in misses]), max_points)
        at = big.groupby("run_id", sort=False).indices
        out = [big.iloc[at[r][0]:at[r][-1] + 1].reset_index(drop=True).copy() if r in at else big.iloc[0:0].copy()
               for r in rids]
    else:
        out = [query_table(t, max_points) for _, t, _ in misses]
    for (ck, _, w), df in zip(misses, out):
        if ck is not None:
            _results.put(ck, (df, tuple(w)))
    return out


def read_metrics_cached(run_dirs: Iterable[Path], keys: list[str] | None = None, *,
                        max_points: int | None = 1000) -> pd.DataFrame:
    """:func:`engine.store.metrics.read_metrics_files` through this process's caches: the same
    DataFrame (columns, order, dtypes, ``attrs["warnings"]``) for the same files.

    Each run is deduplicated and downsampled on its own (the runs not kept yet in one query) and the
    runs are concatenated in run id order. If rows of two folders share a run id (a folder copied by
    hand), the runs are not independent and the uncached reader answers instead.
    """
    k = None if not keys else tuple(sorted(set(keys)))
    dirs = sorted({Path(d) for d in run_dirs}, key=lambda d: d.name)
    prepared = [_prepare(d, k, max_points) for d in dirs]
    misses = [(ck, table, w) for ck, hit, table, w in prepared if hit is None]
    computed = iter(_compute(misses, max_points) if misses else [])
    frames = [hit[0] if hit is not None else next(computed) for _, hit, _, _ in prepared]
    warnings = [w for *_, ws in prepared for w in ws]
    ids = [(f["run_id"].iat[0], f["run_id"].iat[-1]) for f in frames if len(f)]
    independent = all(a == b for a, b in ids) and all(p[0] < q[0] for p, q in zip(ids, ids[1:]))
    if not independent:
        return read_metrics_files(dirs, keys, max_points=max_points)
    import pandas as pd  # noqa: PLC0415 (engine.store's docstring: only readers load pandas)

    out = pd.concat(frames, ignore_index=True) if frames else query_table(SCHEMA.empty_table(), max_points)
    out.attrs["warnings"] = warnings
    return out


def _file_latest(fid: FileId) -> dict[str, tuple[int, float, float]]:
    """key -> ``(step, wall_time, value)`` of the row with the highest (step, wall_time) in one file."""
    hit = _latest.get(fid)
    if hit is not None:
        return hit
    t = _files.get((fid, None))
    if t is None:  # read just what is needed, and keep the big table out of the file cache
        t = read_table(Path(fid[0]))
    codes = pc.dictionary_encode(t["key"]).combine_chunks()
    idx = codes.indices.to_numpy(zero_copy_only=False)
    step = t["step"].to_numpy()
    wall = t["wall_time"].to_numpy()
    value = t["value"].to_numpy()
    out: dict[str, tuple[int, float, float]] = {}
    if len(idx):
        order = np.lexsort((wall, step, idx))
        last = order[np.flatnonzero(np.r_[idx[order][1:] != idx[order][:-1], True])]
        names = codes.dictionary.to_pylist()
        out = {names[idx[i]]: (int(step[i]), float(wall[i]), float(value[i])) for i in last}
    _latest.put(fid, out)
    return out


def latest_of(run_dir: Path) -> dict[str, tuple[int, float]]:
    """key -> ``(step, value)`` of the last logged point of each metric of one run.

    The same point as the last row of :func:`read_metrics_cached` with ``max_points=1`` (the highest
    step; for a step logged twice, the later value; a NaN is a point too), from a small summary
    kept per file. Unreadable files are skipped (``read_metrics`` warns about them).
    """
    run_dir = Path(run_dir)
    for attempt in range(READ_RETRIES * 4):
        sig = signature(run_dir)
        if sig is None:
            time.sleep(0.005 * (attempt + 1))
            continue
        best: dict[str, tuple[int, float, float]] = {}
        try:
            for fid in sig[1]:
                try:
                    part = _file_latest(fid)
                except DamagedFileError:
                    continue
                for key, p in part.items():
                    if key not in best or p[:2] >= best[key][:2]:
                        best[key] = p
        except FileNotFoundError:
            time.sleep(0.005 * (attempt + 1))
            continue
        return {k: (s, v) for k, (s, _, v) in best.items()}
    return {}


__all__ = ["COLUMNS", "LRU", "clear_caches", "file_id", "latest_of", "read_metrics_cached", "signature"]
