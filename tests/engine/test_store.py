"""Run store: status records, metrics segments, compaction and the DuckDB read path."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pyarrow.parquet as pq
import pytest

import engine.workspace
from engine.errors import RunNotFoundError
from engine.store import (
    MetricsWriter,
    create_run,
    get_run,
    list_runs,
    read_log,
    read_metrics,
    truncate_metrics,
    write_status,
)
from engine.store.lock import RunLock
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
    # while its worker evaluates, the duration is the training's, as it will read once completed
    lock = RunLock(db)
    lock.acquire()  # its worker, alive
    try:
        write_status(db, {"status": "running", "phase": "evaluating", "created_at": 2e9, "step": 20,
                          "total_steps": 20, "started_at": 2e9, "trained_at": 2e9 + 5})
        rec = get_run(b)
        assert rec.status == "running" and rec.duration_s == 5
    finally:
        lock.release()
    write_status(db, {"status": "completed", "created_at": 2e9, "step": 20, "total_steps": 20,
                      "started_at": 2e9, "ended_at": 2e9 + 5, "latest": {"loss": 0.1}})
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


def _raw_rows(paths) -> list[tuple[str, int]]:
    """(key, step) of every row in ``paths``, duplicates kept (no dedup: what a reader would count)."""
    return [(k, s) for p in paths for k, s in zip(*pq.read_table(p, columns=["key", "step"]).to_pydict().values())]


@pytest.mark.parametrize("flushes, fanout, most", [(100, 4, 3 * 4), (700, 4, 3 * 5), (500, 2, 9)])
def test_compaction_while_training_keeps_few_files(workspace, monkeypatch, flushes, fanout, most):
    """At most fanout - 1 files per level: 4**4 > 100, 4**5 > 700, 2**9 > 500."""
    monkeypatch.setattr(engine.workspace.os, "fsync", lambda fd: None)  # speed only: durability is tested elsewhere
    run_id, d = create_run({"train": {"steps": flushes}})
    w = MetricsWriter(d, run_id, flush_interval=0, compact_every=fanout)  # every log call flushes
    for s in range(flushes):
        w.log(s, {"loss": float(s)})
        assert w.n_files <= most
    assert len(metric_files(d)) == w.n_files == len(list((d / "metrics").iterdir()))
    rows = _raw_rows(metric_files(d))
    assert sorted(rows) == [("loss", s) for s in range(flushes)]  # each row exactly once, none lost
    w.close()
    assert [p.name for p in metric_files(d)] == [f"part-000000-{flushes - 1:06d}.parquet"]
    assert read_metrics([run_id], max_points=None).step.tolist() == list(range(flushes))


WRITER = """
import sys
from engine.store.metrics import MetricsWriter
w = MetricsWriter(sys.argv[1], "r", flush_interval=0, compact_every=3)
for s in range(int(sys.argv[2])):
    w.log(s, {"loss": float(s), "lr": 0.1})
w.close()
"""


@pytest.mark.slow
def test_reader_during_compaction_never_double_counts_or_misses(workspace):
    """A writer process flushes every step and merges every 3 files; this process reads meanwhile.

    Every read must be a gap-free prefix of the steps (nothing missed), never shorter than an
    earlier read, and the files a reader picks must hold each row once (nothing counted twice).
    """
    n = 400
    run_id, d = create_run({"train": {"steps": n}})
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(d), str(n)])
    seen, reads, cover_checks = 0, 0, 0
    while True:
        done = proc.poll() is not None
        df = read_metrics([run_id], ["loss"], max_points=None)
        steps = df.step.tolist()
        assert steps == list(range(len(steps))), "a read missed rows"
        assert len(steps) >= seen and df.attrs["warnings"] == []
        seen, reads = len(steps), reads + 1
        try:
            rows = _raw_rows(metric_files(d))
            assert len(rows) == len(set(rows)), "the chosen files hold a row twice"
            cover_checks += 1
        except FileNotFoundError:
            pass  # a file merged away between listing and opening: read_metrics retries in that case
        if done:
            break
    assert proc.returncode == 0
    assert seen == n and reads > 10 and cover_checks > 5


def _finished_run(name: str, steps: int = 20):
    run_id, d = create_run({"name": name, "train": {"steps": steps}})
    w = MetricsWriter(d, run_id, flush_interval=0, compact_every=1000)
    for s in range(steps):
        w.log(s, {"loss": 1.0 / (s + 1)})
    w.close()
    write_status(d, {"status": "completed", "step": steps, "total_steps": steps})
    return run_id, d


def damage(d):
    """An empty and a garbage segment after the compacted part of a finished run (segments 20, 21)."""
    (d / "metrics" / "seg-000020.parquet").write_bytes(b"")
    (d / "metrics" / "seg-000021.parquet").write_bytes(b"PAR1 this is not parquet at all")


def test_unreadable_segments_are_skipped_with_a_warning(workspace):
    bad, d = _finished_run("bad")
    good, _ = _finished_run("good")
    damage(d)
    df = read_metrics([bad, good], ["loss"], max_points=None)
    assert df[df.run_id == bad].step.tolist() == list(range(20))  # the readable rows are all there
    assert df[df.run_id == good].step.tolist() == list(range(20))
    warnings = df.attrs["warnings"]
    assert len(warnings) == 2
    assert "metrics/seg-000020.parquet (empty file (0 bytes))" in warnings[0]
    assert "metrics/seg-000021.parquet" in warnings[1] and "doctor --repair" in warnings[1]
    again = read_metrics([bad], max_points=None)  # known-bad files are skipped at once the next time
    assert len(again.attrs["warnings"]) == 2 and len(again) == 20


def test_truncate_then_continue_has_one_row_per_step(workspace):
    run_id, d = _finished_run("r", steps=100)
    assert truncate_metrics(d, after_step=49) == 50
    w = MetricsWriter(d, run_id, flush_interval=0, compact_every=4)
    assert w.latest == {"loss": 1.0 / 50}  # continues from the stored values
    for s in range(50, 80):
        w.log(s, {"loss": -float(s)})
    rows = _raw_rows(metric_files(d))
    assert sorted(rows) == [("loss", s) for s in range(80)]  # no step twice, even before any dedup
    df = read_metrics([run_id], max_points=None)
    assert df.step.tolist() == list(range(80)) and df.value.iloc[-1] == -79.0
    w.close()
    assert truncate_metrics(d, after_step=1000) == 0


def test_read_log_tail(workspace):
    run_id, d = create_run({"train": {"steps": 1}})
    assert read_log(run_id) is None  # a foreground run has no worker log
    (d / "worker.log").write_bytes(b"".join(b"line %05d\n" % i for i in range(10_000)))  # 11 bytes a line
    first, *rest = read_log(run_id, max_bytes=1000).splitlines()
    # the last 1000 bytes start 1 byte into line 9909: that partial line is dropped too
    assert first == "[... 109,010 earlier bytes not shown ...]"
    assert rest == [f"line {i:05d}" for i in range(9910, 10_000)]
    assert read_log(run_id, max_bytes=200_000).splitlines()[0] == "line 00000"
