"""A fork in the dashboard (issue 33, point 1): Run detail names its parent and the checkpoint it took
and links to both; Compare shows it beside its parent, with the parent's figure as its reference.
AppTest on a copy of the session's shared digits MAE and a 2-step fork of it trained in-process."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from engine.pretrained.importers import import_model
from engine.pretrained.manage import view_config
from engine.store import get_run
from tests.app.pages import open_with
from tests.pretrained_image_checkpoints import hf_model, save_hf_folder
from tests.runs import SPECS
from tests.stamps import completed_run


@pytest.fixture(autouse=True)
def _normal_mode(monkeypatch):
    monkeypatch.delenv("MASKLAB_MODE", raising=False)


def test_run_detail_and_compare_show_a_fork_with_its_parent(shared_runs, tmp_path, monkeypatch):
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "workspace")
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    parent = ids["image_mae"]
    pcfg = get_run(parent, ws).config
    cfg = {**SPECS["image_mae"][1], "name": "the fork", "evaluation": {"auto": False},
           "model": {**pcfg["model"], "init_from": parent},
           "train": {**SPECS["image_mae"][1]["train"], "steps": 2, "eval_interval": 2, "checkpoint_interval": 2}}
    fork = completed_run(cfg, ws, evaluate=False)

    detail = open_with("../pages/run_detail.py", {"run": fork})
    info = " ".join(i.value for i in detail.info)
    assert f"Fork of run **{parent}** at its step 20 checkpoint" in info and "then trained 2 steps" in info
    assert any(b.proto.label.startswith("Download for transformers (step 2") for b in detail.get("download_button"))
    links = {(p.proto.label, p.proto.page) for p in detail.get("page_link")}
    assert any(label == "Compare with the parent" for label, _ in links)

    compare = open_with("../pages/compare.py", {"runs": f"{fork},{parent}"})
    assert any(h.value == "Forks beside their parents" for h in compare.subheader)
    table = next(t.value for t in compare.table if "parent (reference)" in t.value.columns)
    row = table.iloc[0]
    assert row["parent"].endswith(parent[-6:]) and row["figure"] == "val_loss"
    assert row["fork at step 0"] == row["parent (reference)"]  # the same masks and data: the parent's loss
    assert row["fork latest"].endswith("@ 2")
    results = compare.dataframe[0].value  # configs and results: the differing fields are columns
    assert parent in results["model.init_from"].tolist()

    # the parent's Run detail forks it through New run: the form keeps model.init_from
    link = next(p.proto for p in open_with("../pages/run_detail.py", {"run": parent}).get("page_link")
                if p.proto.label == "Fork this run in New run")
    params = dict(parse_qsl(link.query_string))
    assert params["model.init_from"] == parent
    new = open_with("../pages/new_run.py", params)
    assert any(f"Starts from **{parent}**" in i.value for i in new.info)
    launch = next(b for b in new.button if b.label == "Launch")
    assert not launch.disabled  # the pre-flight took the fork



def test_new_run_forks_a_run_on_an_imported_architecture(workspace, tmp_path):
    """A run on an imported MAE (32x32 RGB, patch 8; digits fitted to it): its fork through New run
    takes the patch size the model fixes, not the form's (the form offers digits' own patch sizes)."""
    import_model(str(save_hf_folder(hf_model(seed=0), tmp_path / "mae32")), "mae32", workspace=workspace)
    view = completed_run(view_config("mae32", "digits", workspace), workspace, evaluate=False)
    link = next(p.proto for p in open_with("../pages/run_detail.py", {"run": view}).get("page_link")
                if p.proto.label == "Fork this run in New run")
    new = open_with("../pages/new_run.py", dict(parse_qsl(link.query_string)))
    info = " ".join(i.value for i in new.info)
    assert f"Starts from **{view}**" in info and "model.patch_size = 8" in info
    assert not next(b for b in new.button if b.label == "Launch").disabled
    assert new.query_params["model.patch_size"] in ("8", ["8"])
    # the mask preview draws digits as the run fits them, at the model's 32x32 input, 4x4 patches of 8
    assert "Shown at the model's input, 32x32 pixels, as the run fits this dataset's images." in [c.value for c in new.caption]
    assert not [e.value for e in new.error if "does not divide" in e.value]
