"""The Models page (issue 32): import a checkpoint from a path, read what was imported, show it on a
dataset; the view run then reads as pretrained on Runs and Run detail. AppTest on the real engine,
store and worker; the checkpoint is made by transformers (tests/pretrained_image_checkpoints.py)."""

from __future__ import annotations

import pytest

from engine.pretrained.store import list_pretrained
from engine.store import get_run
from tests.app.pages import open_with
from tests.engine.procs import wait_until
from tests.pretrained_image_checkpoints import hf_model, save_hf_folder


@pytest.fixture(autouse=True)
def _normal_mode(monkeypatch):
    monkeypatch.delenv("MASKLAB_MODE", raising=False)


def test_import_show_and_read_it_as_pretrained(workspace, tmp_path):
    folder = save_hf_folder(hf_model(seed=1, image_size=64, patch_size=16, num_hidden_layers=3, norm_pix_loss=True),
                            tmp_path / "normpix-mae")
    at = open_with("../pages/models.py", {})
    assert any("No model imported yet" in i.value for i in at.info)
    at.radio(key="models_how").set_value("Path on this machine or Hub id").run()
    at.text_input(key="models_path").input(str(folder))
    at.text_input(key="models_name").input("npx").run()
    at.button(key="models_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert [m.name for m in list_pretrained(workspace)] == ["npx"]
    assert any("Imported **npx**" in s.value for s in at.success)
    facts = dict(at.dataframe[0].value.values.tolist())
    assert facts["architecture"] == "mae_vit" and str(folder) in facts["source"]
    assert facts["target"].startswith("per-patch normalised pixels")
    assert at.selectbox(key="models_ds").value == "digits"  # the image datasets only

    at.button(key="models_show").click().run()
    run_id = at.session_state["models_shown"]
    wait_until(lambda: get_run(run_id, workspace).status in ("completed", "failed"), 120, "the view run to end")
    assert get_run(run_id, workspace).status == "completed", get_run(run_id, workspace).error

    runs = open_with("../pages/runs.py", {})
    row = next(r for r in runs.dataframe[0].value.to_dict("records") if r["run"].endswith(run_id[-6:]))
    assert "pretrained npx (normpix-mae)" in row["recipe"] and row["step"] == "0 / 0"

    detail = open_with("../pages/run_detail.py", {"run": run_id})
    info = " ".join(i.value for i in detail.info)
    assert "starts from the imported model **npx**" in info and "not trained here (0 steps)" in info
    assert "resized from 8x8 to 64x64" in info and "grey channel repeated to RGB" in info
    assert any("de-normalised with each hidden patch's true mean and std" in c.value for c in detail.caption)
