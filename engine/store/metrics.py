"""Metrics: append-only Parquet segments written by one run, read by anyone through DuckDB.

Write path (the worker only): :class:`MetricsWriter` buffers ``(key, step, value)`` rows and
flushes them as an immutable segment ``metrics/seg-NNNNNN.parquet`` (temporary name, then
``os.replace``) when ``flush_interval`` seconds have passed since the last flush, on
:meth:`MetricsWriter.flush`, and on :meth:`MetricsWriter.close`, which also compacts every segment
into ``metrics.parquet`` and removes the segments.

Read path (dashboard, CLI, tests): :func:`read_metrics` runs one query in an in-memory DuckDB
connection over ``read_parquet([...])``. No database file is shared, so any number of writers and
readers run at once without lock errors (see docs/architecture.md).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Iterable

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

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
COMPACTED = "metrics.parquet"
SEGMENT_DIR = "metrics"


def _write_table_atomic(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


class MetricsWriter:
    """Buffers metrics of one run and writes them as immutable Parquet segments.

    Args:
        run_dir: the run's folder; segments go to ``run_dir/metrics/``.
        run_id: stored in every row, so a query over many runs needs no file-name parsing.
        flush_interval: seconds between automatic flushes (default 0.5 s: a logged value is
            readable within about one second plus one step).
        clock: time source (seconds), injectable for tests.

    Not thread-safe: one writer per run, used from the training loop only.
    """

    def __init__(self, run_dir: Path, run_id: str, *, flush_interval: float = 0.5, clock=time.time):
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.flush_interval = flush_interval
        self._clock = clock
        self._seg_dir = self.run_dir / SEGMENT_DIR
        self._seg_dir.mkdir(parents=True, exist_ok=True)
        existing = sorted(self._seg_dir.glob("seg-*.parquet"))
        self._next_seg = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
        self._keys: list[str] = []
        self._steps: list[int] = []
        self._values: list[float] = []
        self._times: list[float] = []
        self._last_flush = clock()
        self.latest: dict[str, float] = {}
        self.closed = False

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
        """Write buffered rows as one new segment (no-op when the buffer is empty)."""
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
        _write_table_atomic(table, self._seg_dir / f"seg-{self._next_seg:06d}.parquet")
        self._next_seg += 1
        self._keys, self._steps, self._values, self._times = [], [], [], []

    def close(self, *, compact: bool = True) -> None:
        """Flush, then (by default) compact all segments into ``metrics.parquet``.

        The compacted file is written atomically *before* the segments are removed, so a reader
        always finds every row in one of the two forms.
        """
        if self.closed:
            return
        self.flush()
        self.closed = True
        if compact:
            compact_metrics(self.run_dir)


def compact_metrics(run_dir: Path) -> None:
    """Merge ``metrics.parquet`` (if any) and all segments of ``run_dir`` into ``metrics.parquet``."""
    run_dir = Path(run_dir)
    segs = sorted((run_dir / SEGMENT_DIR).glob("seg-*.parquet"))
    if not segs:
        return
    parts = [pq.read_table(p) for p in ([run_dir / COMPACTED] if (run_dir / COMPACTED).exists() else []) + segs]
    table = pa.concat_tables(parts).sort_by([("key", "ascending"), ("step", "ascending")])
    _write_table_atomic(table, run_dir / COMPACTED)
    for p in segs:
        p.unlink(missing_ok=True)


def metric_files(run_dir: Path) -> list[Path]:
    """Parquet files that hold a run's metrics now: the compacted file, else the segments."""
    compacted = run_dir / COMPACTED
    segs = sorted((run_dir / SEGMENT_DIR).glob("seg-*.parquet"))
    return ([compacted] if compacted.exists() else []) + segs


def read_metrics_files(
    run_dirs: Iterable[Path], keys: list[str] | None = None, *, max_points: int | None = 1000
) -> pd.DataFrame:
    """Read metrics of several runs with DuckDB.

    Args:
        run_dirs: run folders.
        keys: metric names to keep; None for all.
        max_points: at most about this many points per (run, key), evenly strided by row
            number, always keeping the last point; None for every row.

    Returns:
        DataFrame with columns ``run_id, key, step, value, wall_time``, sorted by run, key, step.
        Rows are unique per (run_id, key, step): if a step was logged twice the last value wins.
    """
    run_dirs = list(run_dirs)
    for attempt in range(3):
        files = [str(p) for d in run_dirs for p in metric_files(Path(d))]
        if not files:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in
                                 [("run_id", "str"), ("key", "str"), ("step", "int64"),
                                  ("value", "float64"), ("wall_time", "float64")]})
        try:
            return _query(files, keys, max_points)
        except duckdb.IOException:
            # A segment vanished between listing and reading (compaction at run end). The compacted
            # file is complete before any segment is removed, so listing again is enough.
            if attempt == 2:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def _query(files: list[str], keys: list[str] | None, max_points: int | None) -> pd.DataFrame:
    con = duckdb.connect()
    try:
        where = "WHERE key IN (SELECT unnest($keys))" if keys else ""
        stride = "" if not max_points else (
            "WHERE (rn - 1) % greatest(1, cast(ceil(n / $max_points) AS BIGINT)) = 0 OR rn = n")
        sql = f"""
            WITH raw AS (
                SELECT run_id, key, step, value, wall_time FROM read_parquet($files) {where}
            ), dedup AS (
                SELECT run_id, key, step, arg_max(value, wall_time) AS value, max(wall_time) AS wall_time
                FROM raw GROUP BY run_id, key, step
            ), numbered AS (
                SELECT *, row_number() OVER w AS rn, count(*) OVER (PARTITION BY run_id, key) AS n
                FROM dedup WINDOW w AS (PARTITION BY run_id, key ORDER BY step)
            )
            SELECT run_id, key, step, value, wall_time FROM numbered {stride}
            ORDER BY run_id, key, step
        """
        params: dict = {"files": files}
        if keys:
            params["keys"] = list(keys)
        if max_points:
            params["max_points"] = int(max_points)
        return con.execute(sql, params).df()
    finally:
        con.close()
