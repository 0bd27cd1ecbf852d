"""``python -m engine doctor [--repair]`` on real damage: what it reports, what it repairs, what it leaves."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.runner.doctor import check_workspace
from engine.runner.queue import enqueue
from engine.store import MetricsWriter, create_run, get_run, read_metrics, read_status, run_alive, write_status
from engine.store.metrics import metric_files
from engine.workspace import FORMAT

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "workspace-v1"
V1_DONE, V1_KILLED = "20261130-144851-2ef951", "20261130-144855-4f4c98"


def doctor(*args: str, ws: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "doctor", *args], cwd=REPO, capture_output=True, text=True,
                          env={**__import__("os").environ, "MASKLAB_WORKSPACE": str(ws)}, timeout=120)


def test_format_1_workspace_with_a_killed_run(tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(FIXTURE, ws)
    before = read_metrics([V1_DONE, V1_KILLED], max_points=None, workspace=ws)
    ws.joinpath("VERSION").unlink(missing_ok=True)  # read_metrics recorded the format: undo it to see doctor do it

    out = doctor(ws=ws)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith(f"[repairable] VERSION: format 1: record format {FORMAT}") for line in lines)
    assert any(line.startswith(f"[repairable] run {V1_KILLED}: its worker process is gone (status 'running'")
               for line in lines)
    assert any(f"run {V1_KILLED}: 2 uncompacted metrics file(s)" in line for line in lines)
    assert not any(V1_DONE in line for line in lines)  # a healthy completed run: nothing to say
    assert "doctor --repair" in lines[-1]
    assert read_status(ws / "runs" / V1_KILLED)["status"] == "running"  # checking changes nothing

    out = doctor("--repair", ws=ws)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sum(line.startswith("[repaired]") for line in out.stdout.splitlines()) == 3
    killed = ws / "runs" / V1_KILLED
    st = read_status(killed)
    assert st["status"] == "interrupted" and st["repaired_by"] == "doctor" and st["step"] == 10
    assert [p.name for p in metric_files(killed)] == ["part-000000-000001.parquet"]
    log = [json.loads(line) for line in (killed / "doctor.log").read_text().splitlines()]
    assert len(log) == 2 and "interrupted" in log[0]["repair"]
    after = read_metrics([V1_DONE, V1_KILLED], max_points=None, workspace=ws)
    assert after.drop(columns="wall_time").equals(before.drop(columns="wall_time"))  # no row lost or added
    assert (ws / "VERSION").read_text() == f"{FORMAT}\n"
    again = doctor(ws=ws)
    assert again.returncode == 0 and again.stdout.strip().endswith("everything is fine")


HOLD = textwrap.dedent("""
    import sys, time
    from engine.store.lock import RunLock
    RunLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(600)
""")


def test_temporary_files_only_of_dead_writers_are_removed(workspace):
    dead, dd = create_run({"train": {"steps": 5}})
    live, ld = create_run({"train": {"steps": 5}})
    for d in (dd, ld):
        write_status(d, {"status": "running", "pid": 1, "step": 2, "total_steps": 5})
        (d / ".status.json.4242-abcdef.tmp").write_text("{")
        (d / "checkpoints" / ".tmp-step-0000010-4242").mkdir(parents=True)
        (d / "checkpoints" / ".tmp-step-0000010-4242" / "model.safetensors").write_bytes(b"x" * 1000)
        (d / ".reserve.tmp").write_bytes(bytes(64))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(ld)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        report = check_workspace(workspace, repair=True)
        repaired = [f.message for f in report.findings if f.where == f"run {dead}" and f.state == "repaired"]
        assert any(m.startswith("removed 3 temporary file(s) of a dead writer") for m in repaired), repaired
        assert not any(live in f.where for f in report.findings)  # a live run is its worker's business
        assert sorted(p.name for p in dd.rglob("*")) == ["checkpoints", "config.json", "doctor.log", "lock",
                                                         "status.json"]
        assert (ld / ".reserve.tmp").exists() and (ld / "checkpoints" / ".tmp-step-0000010-4242").exists()
        assert get_run(dead).status == "interrupted" and read_status(dd)["status"] == "interrupted"
        assert get_run(live).status == "running" and read_status(ld)["status"] == "running"
    finally:
        holder.kill()
        holder.wait()
    assert not run_alive(dd)  # doctor let go of the lock it repaired under


def _run_with_segments(n: int = 10):
    run_id, d = create_run({"train": {"steps": n}})
    w = MetricsWriter(d, run_id, flush_interval=0, compact_every=1000)
    for s in range(n):
        w.log(s, {"loss": float(s)})
    w.close(compact=False)
    return run_id, d


def test_damaged_files_are_moved_to_quarantine(workspace):
    run_id, d = _run_with_segments()
    write_status(d, {"status": "completed", "step": 10, "total_steps": 10})
    (d / "metrics" / "seg-000004.parquet").write_bytes(b"")
    (d / "metrics" / "seg-000007.parquet").write_bytes(b"garbage, not parquet")
    (d / "samples").mkdir()
    (d / "samples" / "recon-0000010.npz").write_bytes(b"PK\x03\x04 cut short")
    (d / "checkpoints" / "step-0000010").mkdir(parents=True)
    (d / "checkpoints" / "step-0000010" / "model.safetensors").write_bytes(b"\x10\x00")

    df = read_metrics([run_id], max_points=None)
    assert len(df) == 8 and len(df.attrs["warnings"]) == 2
    report = check_workspace(workspace, repair=True)
    messages = [f.message for f in report.findings if f.state == "repaired"]
    assert sum("unreadable metrics file" in m for m in messages) == 2
    assert any("checkpoint step-0000010 is incomplete or damaged" in m for m in messages)
    assert any("unreadable samples recon-0000010.npz" in m for m in messages)
    assert any("uncompacted metrics" in m for m in messages)
    q = d / "quarantine"
    assert sorted(p.relative_to(q).as_posix() for p in q.rglob("*") if p.is_file()) == [
        "checkpoints/step-0000010/model.safetensors", "metrics/seg-000004.parquet", "metrics/seg-000007.parquet",
        "samples/recon-0000010.npz"]
    df = read_metrics([run_id], max_points=None)
    assert df.step.tolist() == [0, 1, 2, 3, 5, 6, 8, 9] and df.attrs["warnings"] == []  # compacted around the gap
    assert report.unresolved == []


def test_a_quarantined_gap_is_reported_by_readers_without_retrying(workspace):
    run_id, d = _run_with_segments()
    (d / "quarantine" / "metrics").mkdir(parents=True)
    (d / "metrics" / "seg-000004.parquet").rename(d / "quarantine" / "metrics" / "seg-000004.parquet")
    df = read_metrics([run_id], max_points=None)
    assert df.step.tolist() == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert df.attrs["warnings"] == [f"{run_id}: the metrics of segment 4 are missing (moved to quarantine/)"]


def test_what_doctor_cannot_repair_is_reported(workspace):
    run_id, d = create_run({"train": {"steps": 5}})
    (d / "config.json").write_text("{not json")
    other, od = create_run({"train": {"steps": 5}})
    (od / "status.json").write_text("\0\0\0")
    assert get_run(other).status == "interrupted" and "status.json is unreadable" in get_run(other).warnings[0]
    report = check_workspace(workspace, repair=True)
    (problem,) = report.unresolved
    assert problem.where == f"run {run_id}" and "config.json is unreadable" in problem.message
    assert (od / "quarantine" / "status.json").read_bytes() == b"\0\0\0"
    assert get_run(other).status == "interrupted" and not get_run(other).warnings


def test_a_newer_workspace_is_left_alone(workspace):
    run_id, d = create_run({"train": {"steps": 5}})
    (d / ".status.json.1-aaaaaa.tmp").write_text("x")
    (workspace / "VERSION").write_text(f"{FORMAT + 1}\n")
    report = check_workspace(workspace, repair=True)
    assert [(f.state, f.where) for f in report.findings] == [("problem", "VERSION")]
    assert "newer" in report.findings[0].message
    assert (d / ".status.json.1-aaaaaa.tmp").exists()


@pytest.mark.parametrize("repair", [False, True])
def test_dead_queue_tickets(workspace, repair):
    run_id, d = create_run({"train": {"steps": 5}})
    write_status(d, {"status": "queued", "pid": 1})  # a worker took it, then died
    ticket = enqueue(workspace, d)
    report = check_workspace(workspace, repair=repair)
    assert any(f.where == "queue" and "1 queue ticket" in f.message for f in report.findings)
    assert ticket.exists() is not repair
