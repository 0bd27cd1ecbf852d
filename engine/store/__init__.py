"""The run store: run folders in the workspace, their lock, status, metrics, checkpoints and samples.

Public API (pages and the CLI use only these):
    list_runs, get_run -> RunRecord; read_metrics -> DataFrame (``attrs["warnings"]``);
    latest_points -> {(run_id, key): (step, value)} (kept per process, like the run list);
    load_samples -> Sample; read_log -> str; latest_checkpoint_step -> int;
    checkpoint_weights -> CheckpointWeights (the newest complete checkpoint's weights: step, size, parameters);
    read_config_history -> list of {step, config, changed};
    disk_usage -> DiskUsage (bytes per run, per dataset, in total); run_bytes, dataset_bytes -> int.
Annotations (tags, note, archived; editors, audited): annotate, set_tags, tag_run, set_note, archive_run.
Write side (only the holder of the run lock, plus the launcher's create_run): write_status,
MetricsWriter, save_samples, save_checkpoint, append_config_history, truncate_metrics, compact_metrics.
Nothing here imports torch at import time (a queued worker must not load it), nor pandas (0.25 s of
every worker's and CLI command's start; DuckDB builds the frames a reader asks for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.store.annotations import Annotations, annotate, archive_run, set_note, set_tags, tag_run
from engine.store.checkpoints import (
    CheckpointWeights,
    checkpoint_weights,
    latest_checkpoint_step,
    latest_complete_checkpoint,
    list_checkpoints,
    load_checkpoint_state,
    load_weights,
    save_checkpoint,
)
from engine.store.history import append_config_history, read_config_history
from engine.store.index import index_for, list_runs
from engine.store.lock import RunLock, lock_holder, run_alive, signal_holder
from engine.store.metrics import MetricsWriter, compact_metrics, read_metrics_files, truncate_metrics
from engine.store.metrics_cache import read_metrics_cached
from engine.store.paths import run_dir, run_dirs, runs_root
from engine.store.portable import CHECKPOINT_CHOICES, ImportReport, PortableRunsError, export_runs, import_runs, read_provenance
from engine.store.runs import (
    ACTIVE,
    CANCEL_FILE,
    HOLD_FILE,
    RESUMABLE,
    STATUSES,
    RunRecord,
    create_run,
    get_run,
    read_log,
    read_status,
    write_status,
)
from engine.store.samples import Sample, load_samples, sample_files, sample_steps, save_samples
from engine.store.usage import DiskUsage, dataset_bytes, disk_usage, format_bytes, run_bytes

if TYPE_CHECKING:  # pandas only where a frame is built (above)
    import pandas as pd


def read_metrics(
    run_ids: list[str], keys: list[str] | None = None, *, max_points: int | None = 1000, workspace=None,
    cache: bool = True,
) -> pd.DataFrame:
    """Metrics of ``run_ids`` as a long DataFrame ``run_id, key, step, value, wall_time``.

    Reads Parquet with this process's DuckDB database; safe while the runs are writing and
    compacting. ``max_points`` downsamples each (run, key) series to about that many points (None:
    all rows). An unreadable file is skipped, never raised: ``df.attrs["warnings"]`` says which.
    ``cache`` (default): decoded files and per-run results are kept in this process, keyed by the
    identity of the run's files now (:mod:`engine.store.metrics_cache`), so the answer is the same
    as with ``cache=False`` (every file read again), only cheaper.
    Raises :class:`~engine.errors.RunNotFoundError` for an unknown run id.
    """
    dirs = run_dirs(list(run_ids), workspace)
    if cache:
        return read_metrics_cached(dirs, keys, max_points=max_points)
    return read_metrics_files(dirs, keys, max_points=max_points)


def latest_points(run_ids: list[str], *, max_age_s: float = 0.0, workspace=None) -> dict[tuple[str, str], tuple[int, float]]:
    """``(run_id, key) -> (step, value)``: the last logged point of every metric of each run (the
    highest step; a step logged twice gives its later value; a NaN counts), i.e. the last row of
    ``read_metrics(run_ids, max_points=1)`` per (run, key).

    Kept in this process's run index (:mod:`engine.store.index`) with a small summary per metrics
    file, so a run list with each run's latest figures costs a lookup per run. ``max_age_s`` as in
    :func:`list_runs` (0: checked now). Unknown run ids are left out (no error).
    """
    return index_for(runs_root(workspace)).latest(list(run_ids), max_age_s)


__all__ = [
    "Annotations", "DiskUsage", "annotate", "archive_run", "dataset_bytes", "disk_usage", "format_bytes", "run_bytes", "set_note",
    "set_tags", "tag_run",
    "ACTIVE", "CANCEL_FILE", "HOLD_FILE", "RESUMABLE", "STATUSES", "CheckpointWeights", "MetricsWriter", "RunLock", "RunRecord",
    "Sample", "append_config_history", "checkpoint_weights", "compact_metrics", "create_run", "get_run", "latest_checkpoint_step",
    "latest_complete_checkpoint", "latest_points", "list_checkpoints", "list_runs", "load_checkpoint_state", "load_samples",
    "load_weights", "lock_holder", "read_config_history", "read_log", "read_metrics", "read_status", "run_alive",
    "CHECKPOINT_CHOICES", "ImportReport", "PortableRunsError", "export_runs", "import_runs", "read_provenance",
    "run_dir", "run_dirs", "runs_root", "sample_files", "sample_steps", "save_checkpoint", "save_samples", "signal_holder", "truncate_metrics",
    "write_status",
]
