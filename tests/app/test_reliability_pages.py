"""Runs and Run detail on damaged and ended-badly runs: warnings instead of tracebacks, the reason of a
failure, interrupted and diverged runs, the worker log. AppTest on the real engine, nothing mocked
except the disk's write call in the full-disk case (see tests/engine/test_disk_full.py for the real one)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from streamlit.testing.v1 import AppTest

import engine.workspace as ws_mod
from engine.config import RunConfig
from engine.runner.worker import execute_run
from engine.store import MetricsWriter, create_run, write_status
from engine.tasks import resolve

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"


def page(name: str, run_id: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ENTRY), default_timeout=60)
    if run_id is not None:
        at.query_params["run"] = run_id
    at.run()
    if name != "runs":
        at.switch_page(f"../pages/{name}.py")
        if run_id is not None:
            at.query_params["run"] = run_id
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


def finished_run(name: str, status: str = "completed", error: str | None = None) -> tuple[str, Path]:
    """A run with 30 logged steps, compacted, and a final status."""
    run_id, d = create_run(resolve(RunConfig.from_dict({"name": name, "train": {"steps": 30}})).to_dict())
    w = MetricsWriter(d, run_id, flush_interval=0, compact_every=1000)
    for s in range(1, 31):
        w.log(s, {"loss": 1.0 / s, "throughput": 100.0})
    w.log(30, {"val_loss": 0.5})
    w.close()
    write_status(d, {"status": status, "step": 30, "total_steps": 30, "started_at": 1.0, "ended_at": 2.0,
                     **({"error": error} if error else {})})
    return run_id, d


def test_charts_render_with_a_warning_when_a_segment_is_empty_or_garbage(workspace):
    healthy, _ = finished_run("healthy")
    damaged, d = finished_run("damaged")
    (d / "metrics" / "seg-000031.parquet").write_bytes(b"")
    (d / "metrics" / "seg-000032.parquet").write_bytes(b"PAR1 not a parquet file")

    at = page("runs")
    assert at.multiselect(key="runs_selected").value == [damaged, healthy]  # a chart that mixes both
    warnings = [w.value for w in at.warning]
    assert any("seg-000031.parquet (empty file (0 bytes))" in w for w in warnings), warnings
    assert any("seg-000032.parquet" in w and "unreadable" in w for w in warnings), warnings
    assert charts(at) == 2  # loss and throughput, each with both runs
    # each run's own latest step (not the largest of all runs)
    assert any(c.value.startswith("60 loss points · latest step per run: damaged · ") and c.value.count(": step 30") == 2
               for c in at.caption), [c.value for c in at.caption]

    at = page("run_detail", damaged)
    assert any("seg-000031.parquet" in w.value for w in at.warning) and charts(at) == 1
    at = page("run_detail", healthy)
    assert not at.warning and charts(at) == 1


def test_interrupted_and_diverged_runs_say_so(workspace):
    interrupted, d = create_run(resolve(RunConfig.from_dict({"name": "gone", "train": {"steps": 30}})).to_dict())
    write_status(d, {"status": "running", "pid": os.getpid(), "step": 12, "total_steps": 30})  # no lock: gone
    diverged, _ = finished_run("nan", status="diverged", error="loss became nan at step 13; lower train.lr")

    at = page("runs")
    assert not at.error
    statuses = dict(zip(at.dataframe[0].value["run id"], at.dataframe[0].value["status"]))
    assert statuses == {interrupted: "interrupted", diverged: "diverged"}  # words, no emoji (a box without a font)

    at = page("run_detail", interrupted)
    assert ":orange-badge[interrupted]" in at.markdown[0].value
    (warning,) = [w.value for w in at.warning]
    assert warning.startswith("Run interrupted: its worker process is gone") and "no complete checkpoint" in warning
    at = page("run_detail", diverged)
    assert ":violet-badge[diverged]" in at.markdown[0].value
    assert [e.value for e in at.error] == ["Run diverged: loss became nan at step 13; lower train.lr. "
                                           "It has no complete checkpoint."]


def test_worker_log_expander(workspace):
    background, d = finished_run("bg")
    (d / "worker.log").write_bytes(b"step 1\nTraceback (most recent call last):\nStorageError: boom \xff\n")
    foreground, _ = finished_run("fg")
    at = page("run_detail", background)
    (log,) = [e for e in at.expander if e.label == "Worker log"]
    assert "StorageError: boom \ufffd" in log.code[0].value  # undecodable bytes replaced, never an exception
    at = page("run_detail", foreground)
    (log,) = [e for e in at.expander if e.label == "Worker log"]
    assert "ran in the foreground" in log.caption[0].value


def test_full_disk_reason_in_the_error_box(workspace, monkeypatch):
    real = ws_mod._write_all

    def no_room_for_checkpoints(fd, data):  # a disk with room for everything but a 2 MB checkpoint
        if len(data) > 1_000_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data)

    monkeypatch.setattr(ws_mod, "_write_all", no_room_for_checkpoints)
    cfg = resolve(RunConfig.from_dict({"name": "full", "data": {"dataset": "digits"}, "train": {
        "steps": 6, "batch_size": 16, "eval_interval": 3, "checkpoint_interval": 3, "device": "cpu"}}))
    run_id, d = create_run(cfg.to_dict())
    assert execute_run(d) == "failed"
    at = page("run_detail", run_id)
    (box,) = [e.value for e in at.error]
    assert box.startswith("Run failed: no space left on device while writing checkpoint step 3 (")
    assert ":red-badge[failed]" in at.markdown[0].value
