"""The workspace: durable atomic writes and their errors, format versions, a format-1 workspace opened
by today's code (tests/fixtures/workspace-v1, written by masklab before workspace versions)."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest

import engine.workspace as ws_mod
from engine.errors import FormatVersionError, StorageError
from engine.store import (
    create_run,
    get_run,
    latest_complete_checkpoint,
    list_runs,
    load_checkpoint_state,
    load_samples,
    load_weights,
    read_metrics,
    write_status,
)
from engine.workspace import FORMAT, atomic_write_bytes, atomic_write_json, migrate_to_3, workspace_root

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "workspace-v1"
V1_DONE, V1_KILLED = "20261130-144851-2ef951", "20261130-144855-4f4c98"


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append(("fsync", "dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file"))
        return real_fsync(fd)

    def replace(a, b):
        calls.append(("replace", Path(b).name))
        return real_replace(a, b)

    monkeypatch.setattr(ws_mod.os, "fsync", fsync)
    monkeypatch.setattr(ws_mod.os, "replace", replace)
    atomic_write_json(tmp_path / "a" / "status.json", {"x": 1})
    assert calls == [("fsync", "file"), ("replace", "status.json"), ("fsync", "dir")]
    assert (tmp_path / "a" / "status.json").read_text() == '{\n  "x": 1\n}\n'


@pytest.mark.parametrize("err, cause", [(errno.ENOSPC, "no space left on device"),
                                        (errno.EDQUOT, "disk quota exceeded"),
                                        (errno.EROFS, "read-only file system"),
                                        (errno.EIO, "input/output error")])
def test_a_failed_write_keeps_the_old_file_leaves_no_temp_and_names_cause_and_what(tmp_path, monkeypatch, err, cause):
    target = tmp_path / "status.json"
    target.write_text("old")
    written = []

    def failing(fd, data):  # the disk accepts a few bytes, then fails
        os.write(fd, bytes(data)[:3])
        written.append(fd)
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(ws_mod, "_write_all", failing)
    with pytest.raises(StorageError) as info:
        atomic_write_bytes(target, b"new content", what="the status of run r1")
    assert str(info.value) == f"{cause} while writing the status of run r1 ({target})"
    assert info.value.errno == err and isinstance(info.value, OSError) and written
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_new_workspace_records_its_format(tmp_path):
    root = workspace_root(tmp_path / "ws")
    assert (root / "VERSION").read_text() == f"{FORMAT}\n"


@pytest.mark.parametrize("content, needle", [(f"{FORMAT + 1}\n", f"format {FORMAT + 1}, written by a newer masklab"),
                                             ("99", "format 99"),
                                             ("garbage", "expected the workspace format (an integer)")])
def test_a_newer_or_unreadable_workspace_is_refused_not_half_read(tmp_path, content, needle):
    root = tmp_path / "ws"
    shutil.copytree(FIXTURE, root)
    (root / "VERSION").write_text(content)
    with pytest.raises(FormatVersionError, match=re.escape(needle)):
        list_runs(root)
    with pytest.raises(FormatVersionError):
        workspace_root(root)
    assert (root / "VERSION").read_text() == content  # left as it was


def test_a_newer_run_folder_is_refused_by_get_run_and_left_out_of_the_list(workspace):
    run_id, d = create_run({"train": {"steps": 3}})
    status = (d / "status.json").read_text().replace(f'"format": {FORMAT}', '"format": 7')
    (d / "status.json").write_text(status)
    with pytest.raises(FormatVersionError, match="format 7"):
        get_run(run_id)
    assert list_runs() == []
    write_status(d, {"status": "completed"})
    assert [r.run_id for r in list_runs()] == [run_id]


@pytest.fixture
def v1(tmp_path) -> Path:
    """A copy of the format-1 fixture workspace (the repository copy is never written)."""
    root = tmp_path / "ws-v1"
    shutil.copytree(FIXTURE, root)
    return root


def test_fixture_is_small_and_has_no_version_file():
    size = sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file())
    assert size < 200_000 and not (FIXTURE / "VERSION").exists()
    assert not list(FIXTURE.rglob("data.npz"))  # dataset meta only, no data


def test_format_1_workspace_opens_and_reads_whole(v1):
    runs = {r.run_id: r for r in list_runs(v1)}
    assert (v1 / "VERSION").read_text() == f"{FORMAT}\n"  # migrated: format 1 is read as it is
    assert set(runs) == {V1_DONE, V1_KILLED}
    done, killed = runs[V1_DONE], runs[V1_KILLED]
    assert done.status == "completed" and done.step == 30 and done.name == "v1-fixture" and not done.warnings
    assert 0 < done.latest["val_loss"] < 1
    # killed with os._exit at step 12: no lock file ever existed (format 1), so it is interrupted, and
    # its stored pid (long dead, maybe reused by now) plays no part
    assert killed.status == "interrupted" and "worker process is gone" in killed.error
    assert get_run(V1_DONE, v1).config["model"]["preset"] == "micro"

    df = read_metrics([V1_DONE, V1_KILLED], max_points=None, workspace=v1)
    assert df.attrs["warnings"] == []
    loss = df[df.key == "loss"]
    assert loss[loss.run_id == V1_DONE].step.tolist() == list(range(1, 31))
    assert loss[loss.run_id == V1_KILLED].step.tolist() == list(range(1, 11))  # flushed at the step-10 eval
    assert df[(df.key == "val_loss") & (df.run_id == V1_DONE)].step.tolist() == [0, 10, 20, 30]

    s = load_samples(V1_DONE, workspace=v1)
    assert s.step == 30 and s.kind == "image" and s.meta["patch_size"] == 2
    assert s["images"].shape == (2, 1, 8, 8) and s["mask"].shape == (2, 4, 4)
    assert load_samples(V1_KILLED, workspace=v1).step == 10

    ckpt = latest_complete_checkpoint(v1 / "runs" / V1_DONE)
    assert ckpt.name == "step-0000030"
    state = load_checkpoint_state(ckpt)  # format 1 state.pt already loads with weights_only=True
    assert state["step"] == 30 and state["config"]["name"] == "v1-fixture"
    assert set(state["rng"]) == {"g_mask", "g_data"} and "state" in state["optimizer"]
    assert any(k.startswith("decoder") for k in load_weights(ckpt))
    assert latest_complete_checkpoint(v1 / "runs" / V1_KILLED) is None


def test_format_3_renames_paired_runs_on_audio_and_drops_text_source_from_image_pairs(tmp_path):
    """The format-3 migration, on hand-written format-2 run folders: a ``paired`` run on audio data
    (told by ``data.audio``, by the dataset's ``meta.json`` or by the run's ``task.json``) becomes
    ``paired_audio`` in its config and history; a ``paired`` run on image-text pairs keeps its task and
    loses ``task_params.text_source``; other runs and damaged folders are left as they are; a second
    pass changes nothing. (tests/engine/test_paired_audio.py resumes and evaluates such a run.)"""
    root = tmp_path / "ws"

    def put(path: Path, obj) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, obj)

    for name, modality in (("clips", "audio"), ("pairs", "paired")):
        put(root / "datasets" / name / "meta.json", {"name": name, "modality": modality})
    params = {"text_ratio": 0.15, "text_source": "digit_word"}
    runs = {
        "a-audio-field": {"task": "paired", "data": {"dataset": "gone", "audio": {"n_mels": 32}}, "task_params": params},
        "b-audio-meta": {"task": "paired", "data": {"dataset": "clips"}, "task_params": params},
        "c-audio-task-json": {"task": "paired", "data": {"dataset": "gone"}, "task_params": params},
        "d-image-pairs": {"task": "paired", "data": {"dataset": "pairs"}, "task_params": {**params, "text_source": "text"}},
        "e-image-mim": {"task": "image_mim", "data": {"dataset": "clips"}, "task_params": {}},
    }
    for run_id, cfg in runs.items():
        put(root / "runs" / run_id / "config.json", cfg)
    put(root / "runs" / "c-audio-task-json" / "task.json", {"stream": "audio"})
    put(root / "runs" / "b-audio-meta" / "config_history.json",
                      [{"step": 0, "config": runs["b-audio-meta"], "changed": {}}, {"step": 4, "config": runs["b-audio-meta"],
                                                                                   "changed": {"train.lr": [1, 2]}}])
    (root / "runs" / "f-damaged").mkdir()
    (root / "runs" / "f-damaged" / "config.json").write_text("{not json")
    (root / "VERSION").write_text("2\n")

    workspace_root(root)
    assert (root / "VERSION").read_text() == f"{FORMAT}\n"
    cfg = {r: json.loads((root / "runs" / r / "config.json").read_text()) for r in runs}
    for r in ("a-audio-field", "b-audio-meta", "c-audio-task-json"):
        assert cfg[r] == {**runs[r], "task": "paired_audio"}, r
    history = json.loads((root / "runs" / "b-audio-meta" / "config_history.json").read_text())
    assert [e["config"]["task"] for e in history] == ["paired_audio"] * 2 and history[1]["changed"] == {"train.lr": [1, 2]}
    assert cfg["d-image-pairs"] == {**runs["d-image-pairs"], "task_params": {"text_ratio": 0.15}}
    assert cfg["e-image-mim"] == runs["e-image-mim"]
    assert (root / "runs" / "f-damaged" / "config.json").read_text() == "{not json"
    assert migrate_to_3(root) == []  # idempotent
