"""Metrics: immutable Parquet files written by one run, compacted while it trains, read by anyone.

Files of a run (``run_dir/metrics/``), all immutable once renamed into place:

* ``seg-NNNNNN.parquet``: one flush of :class:`MetricsWriter` (segment number N, from 0, no gaps);
* ``part-AAAAAA-BBBBBB.parquet``: segments A..B merged (A and B inclusive), written before its
  inputs are removed; every ``compact_every`` (16) files of equal width make one part.

Rows: ``run_id, key, step, value, wall_time``, unique per ``(run_id, key, step)`` on read (a step
logged twice keeps its last value). Readers take no lock: they keep the widest files, require a
gap-free cover from segment 0 (else list again) and skip an unreadable file with a warning in
``df.attrs["warnings"]``. Format 1's ``run_dir/metrics.parquet`` is read with any segments.
Why and how: docs/architecture.md, "Store and metrics".
"""

from __future__ import annotations

import io
import math
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.errors import DamagedFileError
from engine.workspace import atomic_write_bytes, is_temp_name

if TYPE_CHECKING:  # pandas only where a frame is built (engine.store's docstring)
    import pandas as pd

SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("key", pa.string()),
        ("step", pa.int64()),
        ("value", pa.float64()),
        ("wall_time", pa.float64()),  # unix seconds
    ]
)
COLUMNS = [f.name for f in SCHEMA]
SEGMENT_DIR = "metrics"
LEGACY_COMPACTED = "metrics.parquet"  # format 1
QUARANTINE_DIR = "quarantine"
COMPACT_EVERY = 16
READ_RETRIES = 5
_NAME = re.compile(r"^(?:seg-(\d+)|part-(\d+)-(\d+))\.parquet$")


@dataclass(frozen=True)
class MetricFile:
    """One metrics file and the segment numbers it holds (``first``..``last`` inclusive).

    ``legacy`` marks format 1's ``metrics.parquet`` (range unknown, read as it is).
    """

    path: Path
    first: int
    last: int
    legacy: bool = False

    @property
    def width(self) -> int:
        """Number of segments merged into this file."""
        return self.last - self.first + 1

    def contains(self, other: "MetricFile") -> bool:
        """True when ``other``'s segments all lie inside this file's range."""
        return self.first <= other.first and other.last <= self.last


def parse_name(name: str) -> tuple[int, int] | None:
    """``seg-000007.parquet`` -> (7, 7); ``part-000000-000015.parquet`` -> (0, 15); else None."""
    m = _NAME.match(name)
    if m is None:
        return None
    if m.group(1) is not None:
        return int(m.group(1)), int(m.group(1))
    first, last = int(m.group(2)), int(m.group(3))
    return (first, last) if first <= last else None


def _listed(folder: Path) -> list[MetricFile]:
    try:
        names = [e.name for e in os.scandir(folder) if e.is_file()]
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        if is_temp_name(name):
            continue
        r = parse_name(name)
        if r is not None:
            out.append(MetricFile(folder / name, *r))
    return out


def select_cover(files: Iterable[MetricFile]) -> list[MetricFile]:
    """The files to read: widest first, dropping any file inside an already kept one; sorted by range."""
    kept: list[MetricFile] = []
    for f in sorted(files, key=lambda f: (-f.width, f.first)):
        if not any(k.contains(f) for k in kept):
            kept.append(f)
    return sorted(kept, key=lambda f: f.first)


def gaps(cover: list[MetricFile]) -> list[tuple[int, int]]:
    """Segment ranges missing between 0 and the last kept file (cover sorted by range)."""
    out, expected = [], 0
    for f in cover:
        if f.first > expected:
            out.append((expected, f.first - 1))
        expected = max(expected, f.last + 1)
    return out


def quarantined_ranges(run_dir: Path) -> list[tuple[int, int]]:
    """Segment ranges of the metrics files that ``doctor --repair`` moved to quarantine."""
    return [(f.first, f.last) for f in _listed(Path(run_dir) / QUARANTINE_DIR / SEGMENT_DIR)]


def _covered(gap: tuple[int, int], known: list[tuple[int, int]]) -> bool:
    """True when the ranges ``known`` together cover ``gap``."""
    pos = gap[0]
    for a, b in sorted(known):
        if a <= pos <= b:
            pos = b + 1
    return pos > gap[1]


def snapshot(run_dir: Path, *, retries: int = READ_RETRIES) -> tuple[list[MetricFile], list[str]]:
    """The files that hold a run's metrics now (format 1's file first) and warnings about missing ranges.

    Lists again (up to ``retries`` times) while the listing has a gap that no quarantined file
    explains: a merge was renaming its part and deleting its inputs during the listing.
    """
    run_dir = Path(run_dir)
    legacy = run_dir / LEGACY_COMPACTED
    for attempt in range(retries):
        cover = select_cover(_listed(run_dir / SEGMENT_DIR))
        has_legacy = legacy.is_file()
        holes = [] if has_legacy else gaps(cover)
        known = quarantined_ranges(run_dir) if holes else []
        unexplained = [g for g in holes if not _covered(g, known)]
        if unexplained and attempt < retries - 1:
            time.sleep(0.01 * (attempt + 1))
            continue
        files = ([MetricFile(legacy, -1, -1, legacy=True)] if has_legacy else []) + cover
        warnings = [f"{run_dir.name}: the metrics of segment{'s' if b > a else ''} {a}{f'-{b}' if b > a else ''} "
                    f"are missing ({'file gone' if (a, b) in unexplained else f'moved to {QUARANTINE_DIR}/'})"
                    for a, b in holes]
        return files, warnings
    raise AssertionError("unreachable")


def metric_files(run_dir: Path) -> list[Path]:
    """Parquet files that hold a run's metrics now (format 1's ``metrics.parquet`` first)."""
    return [f.path for f in snapshot(run_dir)[0]]


# ---------------------------------------------------------------- write side


def _table_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def read_table(path: Path, filters=None) -> pa.Table:
    """A metrics file as a table of :data:`SCHEMA` (every page decoded); ``filters`` as pyarrow's.

    Raises:
        DamagedFileError: it cannot be read (empty, garbage, wrong schema); the message names it.
        FileNotFoundError: it is gone (merged away).
    """
    try:
        t = pq.read_table(path, filters=filters)
        return t.select(COLUMNS).cast(SCHEMA)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException, KeyError, ValueError) as e:
        try:
            why = "empty file (0 bytes)" if path.stat().st_size == 0 else str(e).splitlines()[0][:160]
        except FileNotFoundError:
            raise e from None
        err = DamagedFileError(f"{path}: unreadable metrics file ({why})")
        err.reason = why
        raise err from None


def _merge(run_dir: Path, files: list[MetricFile], first: int, last: int, run_id: str,
           keep_after: int | None = None) -> tuple[MetricFile, int]:
    """Write ``part-first-last`` from ``files`` (rows with step > keep_after dropped), then delete the
    inputs. Returns the part and the number of rows dropped."""
    tables = [read_table(f.path) for f in files]
    table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    n_in = table.num_rows
    if keep_after is not None:
        table = table.filter(pc.less_equal(table["step"], keep_after))
    table = table.sort_by([("key", "ascending"), ("step", "ascending")])
    out = MetricFile(run_dir / SEGMENT_DIR / f"part-{first:06d}-{last:06d}.parquet", first, last)
    atomic_write_bytes(out.path, _table_bytes(table), what=f"metrics part {first}-{last} of run {run_id}")
    for f in files:
        if f.path != out.path:
            f.path.unlink(missing_ok=True)
    return out, n_in - table.num_rows


class MetricsWriter:
    """Buffers metrics of one run, writes them as immutable Parquet segments and compacts them.

    Args:
        run_dir: the run's folder; files go to ``run_dir/metrics/``.
        run_id: stored in every row, so a query over many runs needs no file-name parsing.
        flush_interval: seconds between automatic flushes (default 0.5 s: a logged value is
            readable within about one second plus one step).
        clock: time source (seconds), injectable for tests.
        compact_every: files of equal width merged into one part (see the module docstring).

    Continues a run that already has metrics (a resume): numbering goes on after the last
    segment and ``latest`` starts from the stored values. Only the holder of the run lock may
    create one. Not thread-safe: one writer per run, used from the training loop only.

    Raises (from :meth:`log`, :meth:`flush`): StorageError when a file cannot be written (disk
    full...): the run should fail with that message.
    """

    def __init__(self, run_dir: Path, run_id: str, *, flush_interval: float = 0.5, clock=time.time,
                 compact_every: int = COMPACT_EVERY):
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.flush_interval = flush_interval
        self.compact_every = max(2, compact_every)
        self._clock = clock
        self._seg_dir = self.run_dir / SEGMENT_DIR
        self._seg_dir.mkdir(parents=True, exist_ok=True)
        listed = _listed(self._seg_dir)
        cover = select_cover(listed)
        for f in set(listed) - set(cover):  # inputs of a merge whose part is complete (crash in between)
            f.path.unlink(missing_ok=True)
        self._files: list[MetricFile] = cover
        self._next_seg = max((f.last for f in cover), default=-1) + 1
        self._keys: list[str] = []
        self._steps: list[int] = []
        self._values: list[float] = []
        self._times: list[float] = []
        self._last_flush = clock()
        self._compacting = True
        self.latest: dict[str, float] = latest_values(self.run_dir) if cover or (self.run_dir / LEGACY_COMPACTED).exists() else {}
        self.closed = False

    @property
    def n_files(self) -> int:
        """Metric files of this run now (bounded by compaction)."""
        return len(self._files)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record ``metrics`` (name -> value) at ``step``; flush if the interval has passed."""
        now = self._clock()
        for key, value in metrics.items():
            v = float(value)
            self._keys.append(key)
            self._steps.append(int(step))
            self._values.append(v)
            self._times.append(now)
            if math.isfinite(v):
                self.latest[key] = v
        if now - self._last_flush >= self.flush_interval:
            self.flush()

    def flush(self) -> None:
        """Write buffered rows as one new segment (no-op when the buffer is empty), then compact."""
        self._last_flush = self._clock()
        if not self._keys:
            return
        n = len(self._keys)
        table = pa.table(
            {
                "run_id": pa.array([self.run_id] * n, pa.string()),
                "key": pa.array(self._keys, pa.string()),
                "step": pa.array(self._steps, pa.int64()),
                "value": pa.array(self._values, pa.float64()),
                "wall_time": pa.array(self._times, pa.float64()),
            },
            schema=SCHEMA,
        )
        k = self._next_seg
        seg = MetricFile(self._seg_dir / f"seg-{k:06d}.parquet", k, k)
        atomic_write_bytes(seg.path, _table_bytes(table), what=f"metrics segment {k} of run {self.run_id}")
        self._next_seg += 1
        self._files.append(seg)
        self._keys, self._steps, self._values, self._times = [], [], [], []
        self._compact_tail()

    def _compact_tail(self) -> None:
        """Merge the last ``compact_every`` files while they have equal widths (a base-N counter)."""
        n = self.compact_every
        while self._compacting and len(self._files) >= n:
            tail = self._files[-n:]
            if len({f.width for f in tail}) != 1 or any(a.last + 1 != b.first for a, b in zip(tail, tail[1:])):
                return
            try:
                part, _ = _merge(self.run_dir, tail, tail[0].first, tail[-1].last, self.run_id)
            except DamagedFileError as e:  # leave the files as they are; readers skip the bad one
                print(f"masklab: metrics compaction stopped for run {self.run_id}: {e}", file=sys.stderr)
                self._compacting = False
                return
            self._files[-n:] = [part]

    def close(self, *, compact: bool = True) -> None:
        """Flush, then (by default) merge every file into one part.

        The flush raises StorageError like :meth:`flush`; the final merge is best effort: if it
        fails (disk full, a damaged file) the files stay as they are, readers read them, and
        ``doctor --repair`` merges them later. A note goes to stderr (the worker log).
        """
        if self.closed:
            return
        self.flush()
        self.closed = True
        if compact:
            try:
                compact_metrics(self.run_dir, self.run_id)
            except (OSError, DamagedFileError) as e:
                print(f"masklab: final metrics compaction of run {self.run_id} skipped: {e}", file=sys.stderr)


def compact_metrics(run_dir: Path, run_id: str | None = None) -> bool:
    """Merge every metrics file of a run (format 1's ``metrics.parquet`` included) into one part.

    Only for the holder of the run lock (the worker at its end, ``doctor --repair``). Returns True
    if something was merged.

    Raises:
        DamagedFileError: a file cannot be read (nothing is changed).
        StorageError: the part cannot be written (nothing is changed).
    """
    return _rewrite(Path(run_dir), run_id, keep_after=None)[0] is not None


def truncate_metrics(run_dir: Path, after_step: int) -> int:
    """Drop every row with ``step > after_step``, so a resumed run continues with no duplicate step.

    Rewrites the run's metrics as one part (format 1's ``metrics.parquet`` is merged in and
    removed). Only for the holder of the run lock, before its :class:`MetricsWriter` starts.
    Returns the number of rows dropped.

    Raises:
        DamagedFileError: a file cannot be read (nothing is changed; ``doctor --repair`` quarantines it).
        StorageError: the part cannot be written (nothing is changed).
    """
    return _rewrite(Path(run_dir), None, keep_after=int(after_step))[1]


def _rewrite(run_dir: Path, run_id: str | None, *, keep_after: int | None) -> tuple[MetricFile | None, int]:
    """Merge all of a run's metrics into ``part-000000-<last>`` (rows after ``keep_after`` dropped).
    Returns (the part or None if there was nothing to do, rows dropped)."""
    files, _ = snapshot(run_dir)
    cover = [f for f in files if not f.legacy]
    if not files or (keep_after is None and len(files) == 1 and not files[0].legacy and files[0].first == 0):
        return None, 0
    last = max((f.last for f in cover), default=0)
    out, dropped = _merge(run_dir, files, 0, last, run_id or run_dir.name, keep_after=keep_after)
    for f in _listed(run_dir / SEGMENT_DIR):  # anything else inside the new part's range
        if f.path != out.path and out.contains(f):
            f.path.unlink(missing_ok=True)
    return out, dropped


# ---------------------------------------------------------------- read side


def read_run_table(run_dir: Path, keys: list[str] | None = None) -> tuple[pa.Table, list[str]]:
    """Every stored metrics row of one run (duplicates kept) and warnings about what was skipped.

    Takes a :func:`snapshot` and reads each of its files with pyarrow. The files are immutable, so
    the rows read are exactly the snapshot's; a file merged away before it could be opened makes
    it take a new snapshot (up to :data:`READ_RETRIES` times). An unreadable file is skipped with
    a warning.
    """
    run_dir = Path(run_dir)
    filters = [("key", "in", list(keys))] if keys else None
    for attempt in range(READ_RETRIES * 4):
        files, warnings = snapshot(run_dir)
        tables = []
        try:
            for f in files:
                try:
                    tables.append(read_table(f.path, filters))
                except DamagedFileError as e:
                    warnings.append(f"{run_dir.name}: skipped unreadable metrics file {f.path.relative_to(run_dir)} "
                                    f"({e.reason}); its rows are missing; "
                                    f"`python -m engine doctor --repair` moves it to {QUARANTINE_DIR}/")
        except FileNotFoundError:
            time.sleep(0.005 * (attempt + 1))
            continue
        return (pa.concat_tables(tables) if tables else SCHEMA.empty_table()), warnings
    return SCHEMA.empty_table(), [f"{run_dir.name}: its metrics files kept changing while being read; try again"]


def latest_values(run_dir: Path) -> dict[str, float]:
    """The last finite value of each key (by step) in a run's stored metrics; ``{}`` if none."""
    table, _ = read_run_table(run_dir)
    if table.num_rows == 0:
        return {}
    con = _cursor()
    con.register("raw", table)
    try:
        rows = con.execute("SELECT key, arg_max(value, step) FROM raw WHERE isfinite(value) GROUP BY key").fetchall()
    finally:
        con.unregister("raw")
    return {k: float(v) for k, v in rows}


def read_metrics_files(
    run_dirs: Iterable[Path], keys: list[str] | None = None, *, max_points: int | None = 1000
) -> pd.DataFrame:
    """Read metrics of several runs; never fails on a damaged file.

    Args:
        run_dirs: run folders.
        keys: metric names to keep; None for all.
        max_points: at most about this many points per (run, key), evenly strided by row
            number, always keeping the last point; None for every row.

    Returns:
        DataFrame with columns ``run_id, key, step, value, wall_time``, sorted by run, key, step.
        Rows are unique per (run_id, key, step): if a step was logged twice the last value wins.
        ``df.attrs["warnings"]`` lists what could not be read (a skipped file, a missing range),
        one sentence each; empty when everything was read.
    """
    tables, warnings = [], []
    for d in run_dirs:
        t, w = read_run_table(Path(d), keys)
        tables.append(t)
        warnings += w
    df = query_table(pa.concat_tables(tables) if tables else SCHEMA.empty_table(), max_points)
    df.attrs["warnings"] = warnings
    return df


_db: duckdb.DuckDBPyConnection | None = None  # one in-memory database per process, made on first use
_db_lock = threading.Lock()
_local = threading.local()  # one cursor per thread (see _cursor)


def _cursor() -> duckdb.DuckDBPyConnection:
    """This thread's cursor on the process's in-memory DuckDB database (``duckdb.connect()`` costs
    about 14 ms here, a cursor microseconds; a registered table is private to its cursor)."""
    global _db
    cur = getattr(_local, "cursor", None)
    if cur is None:
        with _db_lock:
            if _db is None:
                _db = duckdb.connect()
            cur = _local.cursor = _db.cursor()
    return cur


def query_table(table: pa.Table, max_points: int | None) -> pd.DataFrame:
    """Dedup (last value per run, key, step: the latest ``wall_time`` wins) and downsample ``table``
    with DuckDB: every row when ``max_points`` is None, else about ``max_points`` rows per (run, key)
    evenly strided by row number, the first and the last always kept. Sorted by run, key, step."""
    con = _cursor()
    stride = "" if not max_points else (
        "WHERE (rn - 1) % greatest(1, cast(ceil(n / $max_points) AS BIGINT)) = 0 OR rn = n")
    sql = f"""
        WITH dedup AS (
            SELECT run_id, key, step, arg_max(value, wall_time) AS value, max(wall_time) AS wall_time
            FROM raw GROUP BY run_id, key, step
        ), numbered AS (
            SELECT *, row_number() OVER w AS rn, count(*) OVER (PARTITION BY run_id, key) AS n
            FROM dedup WINDOW w AS (PARTITION BY run_id, key ORDER BY step)
        )
        SELECT run_id, key, step, value, wall_time FROM numbered {stride}
        ORDER BY run_id, key, step
    """
    con.register("raw", table)
    try:
        df = con.execute(sql, {"max_points": int(max_points)} if max_points else {}).df()
    finally:
        con.unregister("raw")
    return df.astype({"run_id": "str", "key": "str", "step": "int64", "value": "float64", "wall_time": "float64"})

