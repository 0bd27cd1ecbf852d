"""Every page renders in Streamlit's AppTest on a fresh workspace; user mistakes become st.error.

AppTest runs the pages in this process, against the real engine (``workspace`` fixture sets
``$MASKLAB_WORKSPACE``); nothing is mocked.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from streamlit.elements.lib import policies
from streamlit.testing.v1 import AppTest

from engine.config import RunConfig
from engine.data import delete_dataset, import_source, list_datasets
from engine.runner.worker import execute_run
from engine.store import create_run, get_run
from engine.tasks import resolve
from engine.tasks.image.recipe import RECIPES

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"

PAGES = ["../pages/data.py", "../pages/models.py", "../pages/new_run.py", "../pages/mask_lab.py", "../pages/runs.py", "../pages/run_detail.py",
         "../pages/compare.py", "../pages/sweeps.py", "../pages/present.py"]


def open_page(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ENTRY), default_timeout=60).run()
    if page is not None:
        at.switch_page(page).run()
    return at


def captions(at: AppTest) -> list[str]:
    """Caption of every image on the page, in order ("" when none)."""
    return [img.caption for el in at.get("image") for img in el.proto.imgs]


def row_labels(at: AppTest) -> list[str]:
    """Bold one-line labels above image rows ("**Original**" -> "Original")."""
    return [m.value.strip("*") for m in at.markdown if m.value.startswith("**") and m.value.endswith("**")]


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_on_fresh_workspace(workspace, page):
    at = open_page(page)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.title[0].value in {"Data", "Models", "New run", "Mask lab", "Runs", "Run detail", "Compare runs", "Sweeps",
                                  "Presentation"}


def test_default_page_is_runs(workspace):
    at = open_page()
    assert not at.exception
    assert at.title[0].value == "Runs"
    assert any("No runs yet" in i.value for i in at.info)


def test_data_page_shows_digits(workspace):
    at = open_page("../pages/data.py")
    assert not at.exception
    assert at.selectbox(key="data_ds").value == "digits"
    caps = captions(at)
    assert len(caps) == 24
    assert [c.split(" · ")[1] for c in caps] == ["train"] * 12 + ["val"] * 12
    assert all(c.split(" · ")[0] in "0123456789" for c in caps)
    counts = at.dataframe[0].value
    assert list(counts.columns) == ["train", "val", "total"] and counts["total"].sum() == 1797


def test_data_page_says_how_to_get_a_missing_bundled_set(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("MASKLAB_FASHION_MNIST_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("MASKLAB_FORTUNES_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("MASKLAB_ASTERISK_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("MASKLAB_TUXPAINT_DIR", str(tmp_path / "empty"))
    at = open_page("../pages/data.py")
    assert not at.exception
    (note,) = [i.value for i in at.info if "fashion-mnist" in i.value]
    assert "dataset-fashion-mnist" in note  # the Debian package that provides it
    (note,) = [i.value for i in at.info if "fortunes" in i.value]
    assert "apt-get install fortunes" in note
    (note,) = [i.value for i in at.info if "asterisk-prompts" in i.value]
    assert "asterisk-core-sounds-en-wav" in note
    (note,) = [i.value for i in at.info if "tuxpaint-stamps" in i.value]
    assert "apt-get install tuxpaint-stamps-default" in note
    assert at.selectbox(key="data_ds").options == ["digits  (1,797 images, 8x8 px)"]


def preview_caption(at: AppTest) -> str:
    """The mask preview's caption (the one that counts masked patches or tokens)."""
    return next(c.value for c in at.caption if " masked" in c.value and "fixed validation" in c.value)


def test_new_run_shows_mask_preview_that_follows_widgets(workspace):
    at = open_page("../pages/new_run.py")
    assert not at.exception
    assert row_labels(at) == ["Original", "Masked input"]
    assert len(captions(at)) == 16  # 8 real validation images, original and masked
    assert sorted(captions(at)[:8]) == sorted(set(captions(at)[:8])) and captions(at)[8:] == [""] * 8  # 8 digits, 8 classes
    assert "12 of 16 patches masked" in preview_caption(at)  # digits 8x8, P=2, ratio 0.75
    # one 8x8 patch at ratio 0.75 would be all masked: the pre-flight refuses it, so it is not offered
    assert at.selectbox(key="nr_m_patch_8x8").options == ["1 px  →  8x8 = 64 patches", "2 px  →  4x4 = 16 patches",
                                                        "4 px  →  2x2 = 4 patches"]  # fmt: skip
    assert "8 px" in at.selectbox(key="nr_m_patch_8x8").help
    at.slider[0].set_value(0.5).run()
    assert "8 of 16 patches masked" in preview_caption(at)
    at.selectbox(key="nr_m_patch_8x8").set_value(1).run()
    assert "32 of 64 patches masked" in preview_caption(at)
    assert not at.exception and not at.error


def _refused(at: AppTest):
    """The first table of refused files (file, reason): a wrapping table, or a data frame when long."""
    for t in at.table:
        if list(t.value.columns) == ["reason"]:
            return t.value.reset_index()
    return next(d.value for d in at.dataframe if list(d.value.columns) == ["file", "reason"])


def import_and_wait(at: AppTest, timeout: float = 120) -> AppTest:
    """Click Import, then rerun the page until its background import (engine.data.jobs) has ended."""
    at.button(key="data_import").click().run()
    end = time.time() + timeout
    while "data_job" in at.session_state and time.time() < end:
        time.sleep(0.3)
        at.run()
    assert "data_job" not in at.session_state, "the import did not end"
    return at


def test_upload_zip_shows_plan_then_report_and_new_dataset(workspace, stamps_zip, caplog, monkeypatch):
    # Streamlit warns (once per process, on its own non-propagating logger) about a widget given both
    # a default and a value set through session state: the import's selection of its new dataset.
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)
    monkeypatch.setattr(policies._LOGGER, "handlers", [*policies._LOGGER.handlers, caplog.handler])
    at = open_page("../pages/data.py")
    at.file_uploader[0].upload("my stamps.zip", stamps_zip, "application/zip").run()
    assert not at.exception, [e.value for e in at.exception]
    # before the import: what it would take, from the archive's directory alone
    assert any("image (image zip) · 37 image files to import · 3 classes" in m.value for m in at.markdown)
    at.text_input(key="data_new_name").input("stamps").run()
    import_and_wait(at)
    assert not at.exception, [e.value for e in at.exception]
    # one refused file: a warning banner (not green), naming the count
    assert any("Imported 36 images" in w.value and "1 refused" in w.value for w in at.warning), [w.value for w in at.warning]
    assert not at.success
    rejected = _refused(at)
    assert list(rejected["file"]) == ["stamps/food/broken.png"] and rejected["reason"].str.len().min() > 0
    assert at.selectbox(key="data_ds").value == "stamps"
    assert not [r.getMessage() for r in caplog.records if "created with a default value" in r.getMessage()]
    caps = captions(at)
    assert len(caps) == 24 and {c.split(" · ")[0] for c in caps} <= {"animals", "food", "vehicles"}
    # a broken file afterwards shows its error alone, not the earlier report under it
    at.file_uploader[0].upload("broken.zip", b"this is not a zip archive", "application/zip").run()
    assert at.error and at.error[0].value.startswith("broken.zip: named .zip but not a zip archive")
    assert not any("Imported" in w.value for w in at.warning)


def test_an_image_lost_on_the_colour_under_transparency_is_a_warning_in_the_report(workspace, stamps_zip, shared_data):
    """The Tux Paint lightning bolt is white with transparency: over the default white fill next to
    nothing of it stays visible, and the report says so in a warning, with the fix."""
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(stamps_zip)) as src, zipfile.ZipFile(buf, "w") as z:
        for item in src.infolist():
            z.writestr(item, src.read(item))
        z.write(shared_data / "tuxpaint-stamps" / "images" / "naturalforces__lightningbolt.png", "stamps/animals/bolt.png")
    at = open_page("../pages/data.py")
    at.file_uploader[0].upload("stamps.zip", buf.getvalue(), "application/zip").run()
    at.text_input(key="data_new_name").input("bolts").run()
    import_and_wait(at)
    assert not at.exception, [e.value for e in at.exception]
    lost = [w.value for w in at.warning if "next to nothing visible" in w.value]
    assert lost == ["1 image (stamps/animals/bolt.png): transparent image with next to nothing visible on the colour under transparency (its "
                    "visible pixels match it): import again with another colour under transparency, e.g. gray."], \
        [w.value for w in at.warning]


def test_bad_upload_is_an_error_not_an_exception(workspace):
    at = open_page("../pages/data.py")
    at.file_uploader[0].upload("broken.zip", b"this is not a zip archive", "application/zip").run()
    assert not at.exception
    assert at.error and at.error[0].value.startswith("broken.zip: named .zip but not a zip archive")  # no temp path
    assert at.selectbox(key="data_ds").value == "digits"  # the page goes on


def test_reserved_dataset_name_is_an_error(workspace, stamps_zip):
    at = open_page("../pages/data.py")
    at.file_uploader[0].upload("s.zip", stamps_zip, "application/zip").run()
    at.text_input(key="data_new_name").input("digits").run()
    at.button(key="data_import").click().run()
    assert not at.exception
    assert any("reserved" in e.value for e in at.error)


def test_upload_csv_detects_columns_then_imports_text(workspace, shared_data):
    """A table: the detected roles are shown and can be changed before the import."""
    rows = (shared_data / "trec" / "train.tsv").read_text(encoding="utf-8").splitlines()[:201]
    at = open_page("../pages/data.py")
    at.file_uploader[0].upload("questions.tsv", "\n".join(rows).encode(), "text/tab-separated-values").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key=next(s.key for s in at.selectbox if s.key.endswith("_text"))).value == "(detect)"
    label = next(s for s in at.selectbox if s.key.endswith("_label"))
    label.set_value("fine_label").run()  # 50 fine classes instead of the 6 coarse ones
    assert any("texts to import" in m.value and "classes" in m.value and " 6 classes" not in m.value for m in at.markdown)
    at.text_input(key="data_new_name").input("questions").run()
    import_and_wait(at)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.selectbox(key="data_ds").value == "questions"
    assert any("Imported all 200 texts" in s.value for s in at.success) or any("Imported" in w.value for w in at.warning)


def test_run_detail_unknown_run_id_is_an_error(workspace):
    run_id, _ = create_run(resolve(RunConfig.from_dict({"name": "queued-only"})).to_dict())
    at = AppTest.from_file(str(ENTRY), default_timeout=60)
    at.query_params["run"] = "no-such-run"
    at.run().switch_page("../pages/run_detail.py")
    at.query_params["run"] = "no-such-run"
    at.run()
    assert not at.exception
    assert any("no-such-run" in e.value for e in at.error)
    assert at.selectbox[0].value == run_id  # falls back to the most recent run
    assert any("No reconstructions yet" in i.value for i in at.info)


def test_launch_from_new_run_page(workspace):
    at = open_page("../pages/new_run.py")
    def field(label):
        return next(n for n in at.number_input if n.label == label)

    field("Steps").set_value(6)
    field("Batch size").set_value(32)
    field("Eval interval (steps)").set_value(3)
    at.text_input[0].input("apptest-launch")
    at.run()
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (ok,) = at.success
    run_id = ok.value.split("**")[1]
    rec = get_run(run_id)
    assert rec.name == "apptest-launch" and rec.config["train"]["steps"] == 6
    deadline = time.time() + 90
    while get_run(run_id).is_active and time.time() < deadline:
        time.sleep(0.5)
    assert get_run(run_id).status == "completed", get_run(run_id).error
    at = open_page("../pages/run_detail.py")
    assert not at.exception
    assert row_labels(at) == ["Reconstruction + visible patches", "Original", "Masked input",
                              "Prediction at masked patches (grey: visible, not scored)",
                              "Squared error at masked patches (black 0 → yellow ≥ 0.25)"]
    assert len(captions(at)) == 8 + 4 * 8 + 4  # main view, four rows, the masking box
    # device, size and the checkpoint's weights, each figure with its step
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Step of 6"] == "6" and metrics["Device"] == "cpu" and metrics["Parameters"] != "–"
    assert metrics["loss @ step 6"] != "–" and metrics["val loss @ step 6"] != "–"
    (download,) = [b for b in at.get("download_button") if "checkpoint" in b.proto.label]
    assert download.proto.label.startswith("Download checkpoint (step 6, ")


#: Files in the cancelled import: the first progress shows about 2,600 read, far from the end.
N_FILES = 20_000


@pytest.mark.slow
def test_an_import_runs_in_the_background_with_progress_and_cancel(workspace):
    """The Data page starts the import in another process, shows its progress and cancels it. CI
    tier (an import of 20,000 files, long enough to cancel: 6 to 8 s); the default suite imports
    from the page in test_upload_zip_shows_plan_then_report_and_new_dataset and cancels an import
    job in tests/engine/test_import_jobs.py."""
    # Enough files that the import is still reading when Cancel lands: with 6,000 files it sometimes
    # finished first on an idle machine. Small images keep building the zip cheap; the import's cost
    # is per file.
    rng, buf = np.random.default_rng(0), io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for i in range(N_FILES):
            png = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(png, "PNG", compress_level=0)
            z.writestr(f"{'ab'[i % 2]}/{i:05d}.png", png.getvalue())
    at = open_page("../pages/data.py")
    at.file_uploader[0].upload("many.zip", buf.getvalue(), "application/zip").run()
    at.text_input(key="data_new_name").input("many").run()
    at.button(key="data_import").click().run()
    end = time.time() + 120
    while time.time() < end and not any(f" / {N_FILES:,} files read" in p.proto.text and not p.proto.text.startswith(
            "Importing many.zip: 0 ") for p in at.get("progress")):  # fmt: skip
        time.sleep(0.3)
        at.run()
    assert at.title[0].value == "Data" and at.button(key="data_import").disabled  # one import at a time
    next(b for b in at.button if b.label == "Cancel import").click().run()
    while "data_job" in at.session_state and time.time() < end:
        time.sleep(0.3)
        at.run()
    assert [i.value for i in at.info if "cancelled" in i.value] == ["Import of many.zip cancelled; nothing was registered."]
    assert "many" not in {i.name for i in list_datasets()}


def test_new_run_proposes_the_datasets_measured_recipe(workspace):
    """The digits recipe (engine.tasks.image.RECIPES, the same as configs/mae-digits.yaml) is what
    the training fields hold and what the resolved config would train, not TrainConfig's defaults."""
    recipe = RECIPES[(8, 8)]["train"]
    at = open_page("../pages/new_run.py")
    assert not at.exception
    fields = {k: at.number_input(key=f"nr_{k}_image_mim").value for k in ("steps", "batch", "lr", "eval")}
    assert fields == {"steps": recipe["steps"], "batch": recipe["batch_size"], "lr": recipe["lr"],
                      "eval": recipe["eval_interval"]}
    train = json.loads(at.json[-1].proto.body)["train"]  # the "Resolved config" a launch would save
    assert {k: train[k] for k in recipe} == recipe
    at.number_input(key="nr_steps_image_mim").set_value(500).run()  # a shorter run: intervals follow it
    train = json.loads(at.json[-1].proto.body)["train"]
    assert (train["steps"], train["checkpoint_interval"], train["warmup_steps"]) == (500, 500, 50)


def test_a_run_stays_viewable_after_its_dataset_is_deleted(workspace, tmp_path):
    """Deleting the dataset a saved run trained on keeps the run's results: Run detail (figures,
    reconstructions) and Compare render without an error."""
    rng = np.random.default_rng(0)
    for i in range(40):
        (tmp_path / "src" / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(tmp_path / "src" / "ab"[i % 2] / f"{i}.png")
    import_source(tmp_path / "src", "small")
    cfg = {"name": "on-small", "data": {"dataset": "small"}, "model": {"preset": "tiny", "patch_size": 2},
           "evaluation": {"auto": True, "max_rows": 40, "tsne_max_rows": 0, "finetune_epochs": 0},
           "train": {"steps": 4, "batch_size": 8, "eval_interval": 2, "checkpoint_interval": 4, "warmup_steps": 1,
                     "num_threads": 1}}
    ids = []
    for seed in (0, 1):
        run_id, d = create_run(resolve(RunConfig.from_dict({**cfg, "train": {**cfg["train"], "seed": seed}})).to_dict())
        assert execute_run(d) == "completed"
        ids.append(run_id)
    delete_dataset("small")
    assert "small" not in {i.name for i in list_datasets()}

    at = open_page("../pages/run_detail.py")
    assert not at.exception, at.exception
    assert at.selectbox[0].value == run_id
    assert "Original" in row_labels(at) and len(captions(at)) >= 8  # the saved reconstructions
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Step of 4"] == "4" and metrics["val loss @ step 4"] != "–"
    at = AppTest.from_file(str(ENTRY), default_timeout=60).run()
    at.switch_page("../pages/compare.py")
    at.query_params["runs"] = ",".join(ids)
    at.run()
    assert not at.exception, at.exception
    assert "Curves" in [h.value for h in at.header] and not at.error
    assert [get_run(i).status for i in ids] == ["completed", "completed"]
