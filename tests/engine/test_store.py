"""Run store: status records, metrics segments, compaction and the DuckDB read path."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from engine.errors import RunNotFoundError
from engine.store import (
    MetricsWriter, create_run, get_run, list_runs, read_metrics, write_status,
)
from engine.store.metrics import metric_files


def _logged(writer: MetricsWriter, steps: range) -> None:
    for s in steps:
        writer.log(s, {"loss": 1.0 / (s + 1), "lr": 0.01})


def test_metrics_roundtrip_segments_then_compacted(workspace):
    run_id, d = create_run({"name": "a", "train": {"steps": 100}})
    clock = iter(range(10_000)).__next__  # one "second" per log call: every call flushes
    w = MetricsWriter(d, run_id, flush_interval=5, clock=clock, compact_every=1000)
    _logged(w, range(100))
    w.flush()
    assert len(metric_files(d)) == 20  # a flush every 5 log calls
    before = read_metrics([run_id], max_points=None)
    assert sorted(before[before.key == "loss"].step) == list(range(100))
    w.close()
    assert [p.name for p in metric_files(d)] == ["part-000000-000019.parquet"]
    after = read_metrics([run_id], max_points=None)
    pd.testing.assert_frame_equal(before.drop(columns="wall_time"), after.drop(columns="wall_time"))


def test_flush_interval_bounds_what_is_buffered(workspace):
    run_id, d = create_run({"train": {"steps": 10}})
    now = [0.0]
    w = MetricsWriter(d, run_id, flush_interval=0.5, clock=lambda: now[0])
    w.log(1, {"loss": 1.0})
    assert read_metrics([run_id]).empty  # 0 s since the last flush: still buffered
    now[0] = 0.6
    w.log(2, {"loss": 0.5})  # the interval has passed: both rows are written now
    assert list(read_metrics([run_id]).step) == [1, 2]


def test_downsampling_keeps_first_and_last_and_dedups(workspace):
    run_id, d = create_run({"train": {"steps": 5000}})
    w = MetricsWriter(d, run_id, flush_interval=1e9)
    _logged(w, range(5000))
    w.log(4999, {"loss": -1.0})  # a step logged twice: the later value wins
    w.close()
    df = read_metrics([run_id], ["loss"], max_points=100)
    assert 90 <= len(df) <= 110
    assert df.step.iloc[0] == 0 and df.step.iloc[-1] == 4999
    assert df.value.iloc[-1] == -1.0
    assert set(df.key) == {"loss"}


def test_status_records_and_listing(workspace):
    a, da = create_run({"name": "first", "train": {"steps": 10}})
    b, db = create_run({"name": "second", "train": {"steps": 20}})
    write_status(db, {"status": "completed", "created_at": 2e9, "step": 20, "total_steps": 20,
                      "started_at": 2e9, "ended_at": 2e9 + 5, "latest": {"loss": 0.1}})
    runs = list_runs()
    assert [r.run_id for r in runs] == [b, a]  # newest first
    rb = get_run(b)
    assert rb.status == "completed" and rb.progress == 1.0 and rb.duration_s == 5 and rb.latest == {"loss": 0.1}
    with pytest.raises(RunNotFoundError):
        get_run("nope")
    with pytest.raises(ValueError):
        write_status(da, {"status": "exploded"})


def test_dead_worker_is_reported_interrupted_without_rewriting(workspace):
    run_id, d = create_run({"train": {"steps": 10}})
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # a pid that surely no longer runs this run
    write_status(d, {"status": "running", "pid": p.pid, "step": 3, "total_steps": 10})
    raw = (d / "status.json").read_text()
    rec = get_run(run_id)
    assert rec.status == "interrupted" and "worker process is gone" in rec.error and rec.is_resumable
    assert rec.ended_at == rec.updated_at  # its duration stops at its last sign of life, not "now"
    assert (d / "status.json").read_text() == raw
    write_status(d, {"status": "running", "pid": os.getpid(), "step": 3, "total_steps": 10})
    # a live pid (this very process) is not the run's worker: only the run lock says alive
    assert get_run(run_id).status == "interrupted"
