"""Portable runs (engine/store/portable.py): two real runs exported and imported into an empty
workspace read back the same everywhere (records, metrics, evaluations, samples, the Compare page's
tables and matrix); a second import is refused by name; damaged and hostile archives are refused with
nothing written; the Parquet inside is DuckDB's to read as it is."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from engine.access.policy import Identity
from engine.cli import main as cli
from engine.errors import PermissionDeniedError, RunActiveError
from engine.store import get_run, list_runs, load_samples, read_metrics, write_status
from engine.store.evaluations import latest_evaluation
from engine.store.paths import run_dir
from engine.store.portable import MANIFEST, PortableRunsError, export_runs, import_runs, read_provenance
from tests.app.test_pages_apptest import ENTRY


@pytest.fixture
def two_runs(shared_runs, tmp_path, monkeypatch):
    ws, ids = shared_runs.copy("image_mae", "simmim", dest=tmp_path / "source")
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    return ws, [ids["image_mae"], ids["simmim"]]


def _files(ws: Path) -> list[str]:
    return sorted(str(p.relative_to(ws)) for p in ws.rglob("*") if "audit" not in p.parts)


def _compare(ws: Path, ids: list[str], monkeypatch) -> tuple[list, dict]:
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    at.switch_page("../pages/compare.py")
    at.query_params["runs"] = ",".join(ids)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (m,) = [e for e in at.get("bidi_component") if e.proto.component_name == "masklab_recon_matrix"]
    tables = [t.value for t in at.table] + [at.dataframe[0].value]
    return tables, json.loads(m.proto.json)


def test_two_runs_move_to_an_empty_workspace_and_read_back_the_same(two_runs, tmp_path, monkeypatch):
    src, ids = two_runs
    data = export_runs(ids, "latest", src)
    archive = tmp_path / "two.zip"
    archive.write_bytes(data)
    dest = tmp_path / "dest"
    report = import_runs(archive, dest)
    assert sorted(report.imported) == sorted(ids) and not report.refused
    for run_id in ids:
        a, b = get_run(run_id, src), get_run(run_id, dest)
        assert (a.config, a.status, a.step, a.latest) == (b.config, b.status, b.step, b.latest)
        ma, mb = read_metrics([run_id], workspace=src), read_metrics([run_id], workspace=dest)
        pd.testing.assert_frame_equal(ma.reset_index(drop=True), mb.reset_index(drop=True))
        assert latest_evaluation(run_id, src) == latest_evaluation(run_id, dest)
        sa, sb = load_samples(run_id, workspace=src), load_samples(run_id, workspace=dest)
        assert sa.step == sb.step and all(np.array_equal(sa[k], sb[k]) for k in sa.arrays)
        prov = read_provenance(run_dir(run_id, dest))
        assert prov["archive"] == "two.zip" and prov["archive_sha256"] == hashlib.sha256(data).hexdigest()
        assert prov["exported_from"]["workspace"] == str(src) and prov["checkpoints"] == "latest"
        assert len(list((run_dir(run_id, dest) / "checkpoints").iterdir())) == 1
    before, after = _compare(src, ids, monkeypatch), _compare(dest, ids, monkeypatch)
    for t0, t1 in zip(before[0], after[0], strict=True):
        pd.testing.assert_frame_equal(t0, t1)
    assert before[1]["columns"] == after[1]["columns"]  # the same images, cell by cell

    # again: refused by name, nothing overwritten
    stamp = (run_dir(ids[0], dest) / "status.json").stat().st_mtime_ns
    again = import_runs(archive, dest)
    assert not again.imported and sorted(r for r, _ in again.refused) == sorted(ids)
    assert all("already in this workspace" in why for _, why in again.refused)
    assert (run_dir(ids[0], dest) / "status.json").stat().st_mtime_ns == stamp

    # the metrics inside are the store's Parquet, for DuckDB as they are
    with zipfile.ZipFile(archive) as z:
        z.extractall(tmp_path / "unzipped")
    n = duckdb.sql(f"select count(*) from read_parquet('{tmp_path}/unzipped/runs/*/metrics/*.parquet')").fetchall()[0][0]
    assert n == len(read_metrics(ids, workspace=src, max_points=None))


def test_the_command_line_exports_without_checkpoints_and_imports(two_runs, tmp_path, monkeypatch, capsys):
    src, ids = two_runs
    out = tmp_path / "x.zip"
    assert cli(["export-runs", *ids, str(out), "--checkpoints", "none"]) == 0
    with zipfile.ZipFile(out) as z:
        assert not [n for n in z.namelist() if "/checkpoints/" in n]
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(tmp_path / "other"))
    assert cli(["import-runs", str(out)]) == 0
    assert sorted(r.run_id for r in list_runs(tmp_path / "other")) == sorted(ids)
    assert cli(["import-runs", str(out)]) == 1  # every run refused
    assert "already in this workspace" in capsys.readouterr().err


def test_an_active_run_is_not_exported(two_runs):
    src, ids = two_runs
    d = run_dir(ids[0], src)
    write_status(d, {**json.loads((d / "status.json").read_text()), "status": "running"})
    with pytest.raises(RunActiveError, match="running"):
        export_runs(ids, "none", src)


def _hostile(tmp_path: Path, good: bytes, name: str, edit) -> Path:
    """A copy of the export ``good`` changed by ``edit(members, manifest)`` (members: name -> bytes)."""
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    manifest = json.loads(members.pop(MANIFEST))
    edit(members, manifest)
    path = tmp_path / name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data in members.items():
            z.writestr(n, data)
        z.writestr(MANIFEST, json.dumps(manifest))
    return path


def _listed(manifest: dict, name: str, data: bytes) -> None:
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _traversal(members, manifest):
    members["runs/x/../../../evil.json"] = b"{}"
    _listed(manifest, "runs/x/../../../evil.json", b"{}")


def _oversized(members, manifest):
    name = next(n for n in members if n.endswith("config.json"))
    members[name] = b" " * (17 * 2**20) + b"{}"  # over the 16 MB a JSON member may have (and a bomb)
    _listed(manifest, name, members[name])


def _not_parquet(members, manifest):
    name = next(n for n in members if n.endswith(".parquet"))
    members[name] = b"not a parquet file"
    _listed(manifest, name, members[name])


def _unlisted(members, manifest):
    run = next(n for n in members if n.endswith("config.json")).split("/")[1]
    members[f"runs/{run}/samples/recon-0009999.npz"] = b"x"


def _changed(members, manifest):
    name = next(n for n in members if n.endswith("status.json"))
    members[name] = members[name].replace(b"completed", b"completes")  # same size, other bytes


def _pickle(members, manifest):
    name = next(n for n in members if "/samples/" in n)
    buf = io.BytesIO()
    np.savez(buf, images=np.array([object()], dtype=object))  # needs a pickle to load
    members[name] = buf.getvalue()
    _listed(manifest, name, members[name])


@pytest.mark.parametrize("edit,why", [
    (_traversal, "is not a file of the masklab runs layout"),
    (_oversized, "over the 16,777,216 a .json file may have"),
    (_not_parquet, "is not a readable .parquet file"),
    (_unlisted, "is not listed in masklab-runs.json"),
    (_changed, "does not match its SHA-256"),
    (_pickle, "unreadable reconstruction samples"),
])
def test_a_damaged_or_hostile_archive_is_refused_with_nothing_written(two_runs, tmp_path, edit, why):
    src, ids = two_runs
    bad = _hostile(tmp_path, export_runs(ids[:1], "none", src), "bad.zip", edit)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(PortableRunsError, match=why) as e:
        import_runs(bad, dest)
    assert str(e.value).startswith("bad.zip: ") and str(e.value).endswith("nothing imported")
    assert _files(dest) == ["VERSION", "runs"]  # no run, no scratch folder left behind
    assert not (tmp_path / "evil.json").exists()


def test_a_re_zipped_export_with_folder_entries_imports(two_runs, tmp_path):
    src, ids = two_runs

    def folders(members, manifest):
        for run_id in ids[:1]:
            members[f"runs/{run_id}/"] = b""  # zip -r writes an entry per folder

    again = _hostile(tmp_path, export_runs(ids[:1], "none", src), "rezipped.zip", folders)
    assert import_runs(again, tmp_path / "dest").imported == ids[:1]


def test_not_a_zip_and_a_zip_of_something_else_are_refused(tmp_path):
    (tmp_path / "notes.zip").write_text("hello")
    with pytest.raises(PortableRunsError, match="notes.zip: not a zip archive"):
        import_runs(tmp_path / "notes.zip", tmp_path / "ws")
    with zipfile.ZipFile(tmp_path / "photos.zip", "w") as z:
        z.writestr("cat.png", b"\x89PNG")
    with pytest.raises(PortableRunsError, match="photos.zip: no masklab-runs.json"):
        import_runs(tmp_path / "photos.zip", tmp_path / "ws")


def test_a_viewer_may_not_import_runs(two_runs, tmp_path):
    src, ids = two_runs
    (tmp_path / "a.zip").write_bytes(export_runs(ids, "none", src))
    with pytest.raises(PermissionDeniedError, match="may not import runs"):
        import_runs(tmp_path / "a.zip", tmp_path / "ws", actor=Identity("vera", "viewer", "password"))
    assert not list((tmp_path / "ws").rglob("config.json"))
