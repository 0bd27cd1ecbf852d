"""The run store: run folders in the workspace, their status, metrics and samples.

Public API (pages and the CLI use only these):
    list_runs, get_run -> RunRecord; read_metrics -> DataFrame; load_samples -> Sample.
Write side (worker and launcher): create_run, write_status, MetricsWriter, save_samples.
"""

from __future__ import annotations

import pandas as pd

from engine.store.metrics import MetricsWriter, compact_metrics, read_metrics_files
from engine.store.runs import (
    ACTIVE,
    CANCEL_FILE,
    STATUSES,
    RunRecord,
    create_run,
    get_run,
    list_runs,
    read_status,
    run_dir,
    runs_root,
    write_status,
)
from engine.store.samples import Sample, load_samples, sample_steps, save_samples


def read_metrics(
    run_ids: list[str], keys: list[str] | None = None, *, max_points: int | None = 1000, workspace=None
) -> pd.DataFrame:
    """Metrics of ``run_ids`` as a long DataFrame ``run_id, key, step, value, wall_time``.

    Reads Parquet with an in-memory DuckDB connection; safe while the runs are writing.
    ``max_points`` downsamples each (run, key) series to about that many points (None: all rows).
    Raises :class:`~engine.errors.RunNotFoundError` for an unknown run id.
    """
    return read_metrics_files([run_dir(r, workspace) for r in run_ids], keys, max_points=max_points)


__all__ = [
    "ACTIVE", "CANCEL_FILE", "STATUSES", "MetricsWriter", "RunRecord", "Sample", "compact_metrics",
    "create_run", "get_run", "list_runs", "load_samples", "read_metrics", "read_status", "run_dir",
    "runs_root", "sample_steps", "save_samples", "write_status",
]
