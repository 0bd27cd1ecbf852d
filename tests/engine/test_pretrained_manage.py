"""The Models page's writes (engine.pretrained.manage): an upload laid out as the importer reads it,
with the data import's refusal rules; import, show and delete checked against the actor's role and
audited; ``python -m engine models show``."""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

import pytest

from engine.access.audit import read_audit
from engine.access.policy import Identity
from engine.cli import main as cli_main
from engine.errors import ConfigError, PermissionDeniedError
from engine.pretrained.export import export_zip
from engine.pretrained.manage import delete_pretrained, import_path, import_upload, show_pretrained, stage_upload
from engine.pretrained.store import PretrainedError, get_pretrained, list_pretrained, models_root
from engine.runner.launcher import cancel
from engine.store import get_run, list_runs
from tests.engine.procs import wait_until
from tests.pretrained_image_checkpoints import hf_model, save_hf_folder

VIEWER, EDITOR, ADMIN = (Identity("vera", "viewer", "password"), Identity("ed", "editor", "password"),
                         Identity("ada", "admin", "password"))  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A tiny ViTMAEForPreTraining ``save_pretrained`` folder (32x32, patch 8), made by transformers."""
    return save_hf_folder(hf_model(seed=0), tmp_path_factory.mktemp("mae") / "plain")


def folder_files(folder: Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(folder.iterdir())]


def zipped(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_upload_layouts(folder, tmp_path):
    files = folder_files(folder)
    # the folder's files as they are
    (tmp_path / "a").mkdir()
    path, skipped = stage_upload(files, tmp_path / "a")
    assert path.is_dir() and sorted(p.name for p in path.iterdir()) == sorted(n for n, _ in files) and skipped == []
    # the folder's files with a README beside them: skipped and listed
    (tmp_path / "a2").mkdir()
    path, skipped = stage_upload(files + [("README.md", b"hi")], tmp_path / "a2")
    assert sorted(p.name for p in path.iterdir()) == sorted(n for n, _ in files)
    assert skipped == ["README.md: not a file of a checkpoint masklab reads"]
    # a .zip of the folder, with a README and a .bin beside it: skipped and listed
    (tmp_path / "b").mkdir()
    z = zipped({f"vit-mae/{n}": d for n, d in files} | {"vit-mae/README.md": b"hi", "vit-mae/pytorch_model.bin": b"x"})
    path, skipped = stage_upload([("vit-mae.zip", z)], tmp_path / "b")
    assert sorted(p.name for p in path.iterdir()) == sorted(n for n, _ in files)
    assert sorted(s.split(":")[0] for s in skipped) == ["vit-mae/README.md", "vit-mae/pytorch_model.bin"]
    # one .pth, alone or zipped
    (tmp_path / "c").mkdir()
    path, _ = stage_upload([("mae_pretrain.pth", b"data")], tmp_path / "c")
    assert path.name == "mae_pretrain.pth" and path.read_bytes() == b"data"
    (tmp_path / "d").mkdir()
    path, _ = stage_upload([("m.zip", zipped({"ckpt/mae.pth": b"data"}))], tmp_path / "d")
    assert path.name == "mae.pth" and path.read_bytes() == b"data"


@pytest.mark.parametrize("case, upload, words", [
    ("nothing", [], "no file uploaded"),
    ("a .pth among files", [("config.json", b"{}"), ("mae.pth", b"x")], "mae.pth: upload a .pth or a .zip alone"),
    ("no config", [("model.safetensors", b"x")], "no config.json"),
    ("leaves the archive", [("m.zip", zipped({"../config.json": b"{}"}))], "leaves the archive"),
    ("two checkpoints", [("m.zip", zipped({"a/config.json": b"{}", "b/config.json": b"{}"}))], "more than one checkpoint"),
    ("not a zip", [("m.zip", b"PK but not really")], "not a zip archive"),
])
def test_upload_refusals_name_the_file(tmp_path, case, upload, words):
    with pytest.raises(PretrainedError, match=words):
        stage_upload(upload, tmp_path)


def test_import_upload_and_path_are_checked_and_audited(folder, workspace):
    files = folder_files(folder)
    with pytest.raises(PermissionDeniedError):
        import_upload(files, "mine", workspace=workspace, actor=VIEWER)
    assert list_pretrained(workspace) == []
    info, skipped = import_upload(files, "mine", workspace=workspace, actor=EDITOR)
    assert info.name == "mine" and skipped == [] and get_pretrained("mine", workspace).arch == "mae_vit"
    assert info.source["path"] == "upload: " + ", ".join(n for n, _ in files)  # not the scratch copy
    assert not [p for p in models_root(workspace).iterdir() if p.name.startswith(".upload")]  # the scratch copy went
    with pytest.raises(PretrainedError, match="already imported"):
        import_path(str(folder), "mine", workspace=workspace, actor=EDITOR)
    entries = read_audit(workspace, actor=ADMIN)
    assert [(e.action, e.outcome, e.user) for e in entries if e.action == "model.import"] == [
        ("model.import", "failed", "ed"), ("model.import", "ok", "ed"), ("model.import", "refused", "vera")]


def test_show_submits_a_view_run_and_delete_needs_an_admin(folder, workspace):
    """``models show`` (the CLI is the local admin) submits the 0-step run of view_config; the run
    itself, and that it outlives the import, are tests/engine/test_pretrained_runs.py's."""
    import_path(str(folder), "mine", workspace=workspace, actor=EDITOR)
    with pytest.raises(ConfigError, match="model.init_from"):
        show_pretrained("nope", "digits", workspace, actor=EDITOR)
    with pytest.raises(PermissionDeniedError):
        show_pretrained("mine", "digits", workspace, actor=VIEWER)
    assert cli_main(["models", "show", "mine", "--dataset", "digits"]) == 0
    (rec,) = list_runs(workspace)
    cancel(rec.run_id, workspace)  # its training is not this test's
    cfg = rec.config
    assert cfg["model"]["init_from"] == "mine" and cfg["model"]["patch_size"] == 8 and cfg["train"]["steps"] == 0
    assert cfg["data"]["dataset"] == "digits" and cfg["task"] == "image_mim"
    with pytest.raises(PermissionDeniedError):
        delete_pretrained("mine", workspace, actor=EDITOR)
    delete_pretrained("mine", workspace, actor=ADMIN)
    assert list_pretrained(workspace) == [] and not list(models_root(workspace).iterdir())
    with pytest.raises(PretrainedError, match="no imported model named 'mine'"):
        delete_pretrained("mine", workspace, actor=ADMIN)
    wait_until(lambda: not get_run(rec.run_id, workspace).is_active, 60, "the cancelled run to end")


def test_export_zip_is_the_export_folder(folder, workspace):
    import_path(str(folder), "mine", workspace=workspace, actor=EDITOR)
    with zipfile.ZipFile(io.BytesIO(export_zip("mine", workspace=workspace))) as z:
        names = set(z.namelist())
        assert {"config.json", "model.safetensors", "preprocessor_config.json"} <= names
    assert not list(Path(tempfile.gettempdir()).glob("masklab-export-*"))
