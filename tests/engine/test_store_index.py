"""The store's per-process kept tables (issue 15, "store at scale"): the run index behind
``list_runs`` / ``latest_points`` and the metrics caches behind ``read_metrics``.

Every test compares with what the folders say now, read without any cache: a kept table may change
what a read costs, never what it returns (beyond ``max_age_s`` for the list).
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pandas as pd
import pytest

from engine.store import (
    MetricsWriter,
    RunLock,
    annotate,
    create_run,
    latest_points,
    list_runs,
    read_metrics,
    run_dir,
    truncate_metrics,
    write_status,
)
from engine.store.index import RACY_S, index_for
from engine.store.metrics_cache import LRU, clear_caches
from engine.store.runs import STATUS_FILE, derive_record, read_run_files, runs_root
from engine.workspace import atomic_write_json, read_json


def _run(name: str, status: str = "completed", steps: int = 0, **extra) -> str:
    run_id, d = create_run({"name": name, "train": {"steps": steps}})
    write_status(d, {"status": status, "step": steps, "total_steps": steps, **extra})
    return run_id


def _external_status(run_id: str, **changes) -> None:
    """Change a run's status the way another process (its worker) does: an atomic replace that
    this process's index is not told about."""
    d = run_dir(run_id)
    atomic_write_json(d / STATUS_FILE, {**read_json(d / STATUS_FILE), **changes, "updated_at": time.time()})


def _uncached() -> list:
    """The run list read from scratch (no index): every folder's files, newest first."""
    recs = [derive_record(d, read_run_files(d)) for d in runs_root().iterdir()
            if not d.name.startswith(".") and (d / "config.json").exists()]
    return sorted(recs, key=lambda r: r.created_at, reverse=True)


def _status(run_id: str, **kw) -> str:
    return next(r.status for r in list_runs(**kw) if r.run_id == run_id)


def test_list_equals_the_uncached_read_and_follows_status_changes(workspace):
    ids = [_run(f"r{i}", status) for i, status in enumerate(["completed", "failed", "cancelled", "running"])]
    assert list_runs() == _uncached()
    assert _status(ids[3]) == "interrupted"  # running, but nobody holds its lock
    _external_status(ids[0], status="failed", error="boom")
    assert _status(ids[0]) == "failed"  # exact call: seen at once
    assert list_runs() == _uncached()


def test_max_age_list_shows_an_external_change_once_max_age_has_passed(workspace):
    run_id = _run("a", "completed")
    assert _status(run_id, max_age_s=1.0) == "completed"
    _external_status(run_id, status="cancelled")
    time.sleep(1.05)  # any table now returned was validated after the change
    assert _status(run_id, max_age_s=1.0) == "cancelled"
    assert list_runs(max_age_s=1.0) == _uncached()


def test_max_age_list_shows_this_process_writes_at_once(workspace):
    run_id = _run("a", "completed")
    assert not next(r for r in list_runs(max_age_s=60) if r.run_id == run_id).archived
    annotate(run_id, archived=True, tags=["x"])
    rec = next(r for r in list_runs(max_age_s=60) if r.run_id == run_id)
    assert rec.archived and rec.tags == ("x",)
    write_status(run_dir(run_id), {"status": "failed", "error": "e", "step": 0, "total_steps": 0})
    assert _status(run_id, max_age_s=60) == "failed"


def test_new_and_deleted_runs_show_at_once_even_with_max_age(workspace):
    a = _run("a")
    assert [r.run_id for r in list_runs(max_age_s=60)] == [a]
    b = _run("b")
    assert {r.run_id for r in list_runs(max_age_s=60)} == {a, b}
    d = run_dir(a)  # what launcher.delete_run does: hide by renaming, then remove
    gone = d.with_name(f".deleted-{a}-1")
    os.rename(d, gone)
    assert [r.run_id for r in list_runs(max_age_s=60)] == [b]
    shutil.rmtree(gone)
    assert [r.run_id for r in list_runs()] == [b] and list_runs() == _uncached()


def test_a_worker_dying_shows_without_any_file_change(workspace):
    run_id, d = create_run({"name": "live", "train": {"steps": 10}})
    lock = RunLock(d).acquire()
    try:
        write_status(d, {"status": "running", "step": 3, "total_steps": 10, "pid": os.getpid()})
        assert _status(run_id) == "running"
        assert _status(run_id, max_age_s=60) == "running"
    finally:
        lock.release()  # the kernel does this when a worker dies; no file changes
    index_for(runs_root())._validated_at = float("-inf")  # let the max-age call validate (1 s later, in real life)
    assert _status(run_id, max_age_s=60) == "interrupted"
    assert _status(run_id) == "interrupted" and list_runs() == _uncached()


def test_a_change_within_one_timestamp_tick_is_not_missed(workspace):
    """Two renames in one tick of the file system's clock leave the folder's mtime as it was: a
    folder changed less than RACY_S ago is read again at every validation."""
    run_id = _run("a", "completed")
    d = run_dir(run_id)
    before = os.stat(d)
    assert time.time() - before.st_mtime < RACY_S
    assert _status(run_id) == "completed"
    _external_status(run_id, status="cancelled")
    os.utime(d, ns=(before.st_atime_ns, before.st_mtime_ns))  # as if in the same tick
    assert _status(run_id) == "cancelled"


def test_damaged_and_half_created_folders_are_left_out_until_repaired(workspace):
    a = _run("a")
    b = _run("b")
    (runs_root() / "half").mkdir()  # a folder without config.json: not a run
    (run_dir(b) / "config.json").write_text("{broken")
    assert [r.run_id for r in list_runs()] == [a]
    atomic_write_json(runs_root() / b / "config.json", {"name": "b", "train": {"steps": 0}})
    assert {r.run_id for r in list_runs()} == {a, b}


# ---------------------------------------------------------------- metrics


def _log(w: MetricsWriter, steps, flush_every: int = 5) -> None:
    for s in steps:
        w.log(s, {"loss": 1.0 / (s + 1), "lr": 1e-3 * s, **({"val_loss": 2.0 / (s + 1)} if s % 10 == 0 else {})})
        if s % flush_every == flush_every - 1:
            w.flush()


def _same(run_ids, keys=None, max_points=None) -> pd.DataFrame:
    """The cached read, checked equal to the uncached one (frame and warnings)."""
    cached = read_metrics(run_ids, keys, max_points=max_points)
    plain = read_metrics(run_ids, keys, max_points=max_points, cache=False)
    pd.testing.assert_frame_equal(cached, plain)
    assert cached.attrs["warnings"] == plain.attrs["warnings"]
    return cached


@pytest.mark.parametrize("keys", [None, ["loss"], ["loss", "val_loss", "missing"]])
@pytest.mark.parametrize("max_points", [None, 1, 7, 1000])
def test_cached_reads_equal_uncached_reads(workspace, keys, max_points):
    ids = []
    for i in range(3):
        run_id, d = create_run({"name": f"m{i}"})
        w = MetricsWriter(d, run_id, flush_interval=1e9, compact_every=4)
        _log(w, range(40 + 10 * i))
        w.log(12, {"loss": -1.0})  # a step logged twice: the later value wins
        w.log(13, {"loss": float("nan")})
        w.close(compact=i != 1)
        ids.append(run_id)
    clear_caches()
    for _ in range(2):  # cold, then from the caches
        df = _same(ids, keys, max_points)
    _same(ids + ids[:1], keys, max_points)  # a run asked for twice
    assert set(df["run_id"]) == set(ids) or df.empty


def test_cached_history_follows_a_live_run_appending_merging_and_truncating(workspace):
    run_id, d = create_run({"name": "live"})
    w = MetricsWriter(d, run_id, flush_interval=1e9, compact_every=4)
    _log(w, range(12))
    w.flush()
    df = _same([run_id], ["loss"])
    assert df["step"].max() == 11
    for stop in (20, 33, 64):  # each flush adds a segment; every 4th merges a level
        _log(w, range(df["step"].max() + 1, stop))
        w.flush()
        df = _same([run_id], ["loss"])
        assert df["step"].tolist() == list(range(stop))
    w.close()  # everything merged into part-000000-N
    full = _same([run_id])
    truncate_metrics(d, 30)  # a resume rewrites part-000000-N under the same name
    df = _same([run_id])
    assert df["step"].max() == 30 and len(df) < len(full)
    w = MetricsWriter(d, run_id, flush_interval=1e9)
    _log(w, range(31, 36))
    w.close(compact=False)
    assert _same([run_id], ["loss"])["step"].tolist() == list(range(36))


def test_unreadable_file_gives_the_same_warning_cached(workspace):
    run_id, d = create_run({"name": "bad"})
    w = MetricsWriter(d, run_id, flush_interval=1e9, compact_every=100)
    _log(w, range(20))
    w.close(compact=False)
    seg = sorted((d / "metrics").glob("seg-*.parquet"))[1]
    seg.write_bytes(b"not parquet")
    df = _same([run_id])
    assert len(df.attrs["warnings"]) == 1 and seg.name in df.attrs["warnings"][0]


def _last_rows(run_ids) -> dict:
    df = read_metrics(run_ids, max_points=1, cache=False)
    last = df.sort_values("step").groupby(["run_id", "key"]).tail(1)
    return {(r.run_id, r.key): (int(r.step), r.value) for r in last.itertuples()}


def _assert_points_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k][0] == b[k][0] and (a[k][1] == b[k][1] or (np.isnan(a[k][1]) and np.isnan(b[k][1]))), k


def test_latest_points_equal_the_last_rows_and_follow_appends(workspace):
    ids, writers = [], []
    for i in range(3):
        run_id, d = create_run({"name": f"p{i}"})
        w = MetricsWriter(d, run_id, flush_interval=1e9, compact_every=4)
        _log(w, range(15 + i))
        w.log(14, {"loss": float("nan")})
        w.flush()
        ids.append(run_id)
        writers.append(w)
    empty, _ = create_run({"name": "no metrics"})
    _assert_points_equal(latest_points(ids + [empty, "nope"]), _last_rows(ids))
    _log(writers[0], range(15, 40))  # a live run goes on
    writers[0].flush()
    _assert_points_equal(latest_points(ids), _last_rows(ids))
    assert latest_points(ids)[(ids[0], "loss")][0] == 39
    writers[1].close()
    _assert_points_equal(latest_points(ids, max_age_s=60), _last_rows(ids))


def test_latest_points_with_max_age_follow_another_process_within_max_age(workspace):
    run_id, d = create_run({"name": "live"})
    w = MetricsWriter(d, run_id, flush_interval=1e9)
    _log(w, range(10))
    w.flush()
    assert latest_points([run_id], max_age_s=1.0)[(run_id, "loss")][0] == 9
    _log(w, range(10, 20))  # a worker's flush: this process's index is not told
    w.flush()
    time.sleep(1.05)
    assert latest_points([run_id], max_age_s=1.0)[(run_id, "loss")][0] == 19


def test_lru_keeps_within_its_budget_dropping_the_least_recently_used():
    cache = LRU(10, cost=len)
    cache.put("a", "xxxx")
    cache.put("b", "xxxx")
    assert cache.get("a") == "xxxx"  # a is now the most recently used
    cache.put("c", "xxxx")
    assert cache.get("b") is None and cache.get("a") == "xxxx" and cache.get("c") == "xxxx"
    cache.put("big", "x" * 11)  # dearer than the whole budget: not kept, nothing dropped
    assert cache.get("big") is None and len(cache) == 2


def test_a_folder_copied_by_hand_reads_as_uncached(workspace):
    """Rows keep the run id they were logged with: a copied folder's rows share it with the
    original, so both folders dedup together, exactly as the uncached reader does."""
    run_id, d = create_run({"name": "orig"})
    w = MetricsWriter(d, run_id, flush_interval=1e9)
    _log(w, range(30))
    w.close()
    copy = d.with_name(d.name + "-copy")
    shutil.copytree(d, copy)
    clear_caches()
    df = _same([run_id, copy.name])
    assert set(df["run_id"]) == {run_id} and df[df["key"] == "loss"]["step"].tolist() == list(range(30))  # once
