"""The Presentation page in AppTest on real runs: a digits MAE run (evaluated: probe and kNN) and
an MLM run on real TREC questions (tests/runs.py: trained through the worker's code path), then the
real page rendered alone and side by side, read only."""

from __future__ import annotations

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from app.components.quality import predictor_name
from engine.store import get_run, load_samples
from engine.store.evaluations import latest_evaluation
from tests.app.test_pages_apptest import ENTRY
from tests.runs import SPECS, import_dataset
from tests.stamps import completed_run

PAGE = "../pages/present.py"
#: Labels of every control that writes (runs, evaluations, datasets, users) anywhere in the dashboard.
WRITE_LABELS = {"Cancel", "Resume", "Launch", "Evaluate", "Delete run", "Delete dataset", "Import", "Download CSV",
                "Download HTML report"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_runs, shared_data):
    """``(image_run, text_run)`` in a workspace of their own: a copy of the session's 20-step digits
    MAE run (evaluated at the end: probe, kNN on 300 rows) and the shared MLM recipe on the first 400
    TREC questions (6 steps), trained here without an evaluation."""
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path_factory.mktemp("present") / "workspace")
    import_dataset("trec400", ws, shared_data)
    text_run = completed_run(SPECS["text_mlm"][1], ws, evaluate=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(ws))
        yield ids["image_mae"], text_run


def present(**params: str) -> AppTest:
    """The Presentation page opened by a link with ``params`` (``run=`` / ``runs=``)."""
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.run().switch_page(PAGE)
    at.query_params.clear()  # a link replaces the whole query string (the Runs page kept its own there)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def assert_read_only(at: AppTest) -> None:
    """No button, download, form or choice widget on the page: nothing to click that changes anything."""
    labels = {b.label for b in at.button} | {b.label for b in at.get("download_button")}
    assert not labels & WRITE_LABELS, labels
    assert not at.get("form_submit_button") and not at.selectbox and not at.multiselect and not at.text_input
    assert not at.number_input and not at.sidebar.selectbox and not at.sidebar.multiselect


def metrics(at: AppTest) -> dict[str, tuple[str, str]]:
    return {m.label: (m.value, m.delta) for m in at.metric}


def test_one_image_run_numbers_next_to_baselines_and_reconstructions(runs):
    image_run, _ = runs
    at = present(run=image_run)
    rec, ev = get_run(image_run), latest_evaluation(image_run)
    assert not at.error, [e.value for e in at.error]
    assert at.title[0].value == "digits-mae"
    tiles = metrics(at)
    base = {k.split("/")[1]: v for k, v in rec.latest.items() if k.count("/") == 1}
    best = min(base, key=base.get)
    val = tiles["val loss (MSE (masked units)) @ step 20"]
    assert val == (f"{rec.latest['val_loss']:.4f}", f"{rec.latest['val_loss'] - base[best]:+.4f} vs baseline")
    assert tiles[f"Best trivial baseline: {predictor_name(best)}"][0] == f"{base[best]:.4f}"
    probe = tiles["Linear probe accuracy @ step 20"]
    rep = ev.representation
    assert probe[0] == f"{rep['trained']['probe_acc']:.1%}"
    assert probe[1] == f"{(rep['trained']['probe_acc'] - rep['random_init']['probe_acc']) * 100:+.1f} points vs random init"
    assert tiles["kNN accuracy (k=20) @ step 20"][0] == f"{rep['trained']['knn_acc']:.1%}"
    ft = ev.downstream
    assert tiles["Fine-tune accuracy @ step 20"] == (
        f"{ft['trained']['finetune_acc']:.1%}",
        f"{(ft['trained']['finetune_acc'] - ft['random_init']['finetune_acc']) * 100:+.1f} points vs random init")
    table = next(d.value for d in at.dataframe if "predictor" in d.value.columns)
    assert list(table.predictor) == ["this run (step 20)", "biharmonic inpainting", "kNN average (k=10)",
                                    "training mean image", "visible-pixel mean"]
    # the image view's reconstructions, large, each captioned with its class and masked-patch MSE
    s = load_samples(image_run)
    classes = [s.meta["class_names"][int(y)] for y in s["labels"]]
    caps = [img.caption for el in at.get("image") for img in el.proto.imgs]
    assert [c.split(" · ")[0] for c in caps[:8]] == classes and all(" · MSE 0." in c for c in caps[:8])
    assert "Reconstructions" in [h.value for h in at.subheader]
    assert_read_only(at)


def test_one_text_run_shows_top1_next_to_its_baseline_and_its_predictions(runs):
    _, text_run = runs
    at = present(run=text_run)
    rec = get_run(text_run)
    assert not at.error, [e.value for e in at.error]
    assert at.title[0].value == "trec-mlm"
    tiles = metrics(at)
    best = max(("unigram_top1", "position_top1", "bigram_top1"), key=lambda k: rec.latest[f"baseline/{k}"])
    assert tiles["top-1 @ step 6"][0] == f"{rec.latest['val_top1']:.1%}"
    assert tiles[f"Best trivial baseline: {predictor_name(best)}"][0] == f"{rec.latest[f'baseline/{best}']:.1%}"
    assert not any(k.startswith("Linear probe") for k in tiles)  # no evaluation: said in words instead
    assert any("No evaluation of this run yet" in c.value for c in at.caption)
    preds = next(d.value for d in at.dataframe if "hidden token" in d.value.columns)
    s = load_samples(text_run)
    assert len(preds) == int(s["mask"].sum())  # one row per masked token of the fixed validation texts
    assert "Predictions on validation texts" in [h.value for h in at.subheader]
    assert_read_only(at)


def test_two_runs_side_by_side(runs):
    image_run, text_run = runs
    at = present(runs=f"{image_run},{text_run}")
    assert not at.error, [e.value for e in at.error]
    assert at.title[0].value == "2 runs compared"
    table = at.table[0].value
    assert list(table.index) == [f"digits-mae · {image_run[-6:]}", f"trec-mlm · {text_run[-6:]}"]
    assert list(table["figure"]) == ["val loss (MSE (masked units))", "top-1"]
    ev = latest_evaluation(image_run)
    assert list(table["linear probe"]) == [f"{ev.representation['trained']['probe_acc']:.1%}", "no evaluation"]
    ft = ev.downstream
    assert list(table["fine-tune (random init)"]) == [
        f"{ft['trained']['finetune_acc']:.1%} ({ft['random_init']['finetune_acc']:.1%})", "–"]
    caps = [img.caption for el in at.get("image") for img in el.proto.imgs]
    assert caps == ["original", f"digits-mae · {image_run[-6:]} · masked (step 20)",
                    f"digits-mae · {image_run[-6:]} · reconstruction (step 20)"]
    assert any(f"trec-mlm · {text_run[-6:]} (step 6)" in d.value.columns for d in at.dataframe)
    assert_read_only(at)
    assert not at.slider and not at.select_slider  # the compare views have no step slider


def test_unknown_run_id_is_said_in_plain_words(runs):
    image_run, _ = runs
    at = present(run="20990101-000000-nope00")
    assert [e.value for e in at.error] == ["No run '20990101-000000-nope00' in this workspace: the link may be "
                                           "mistyped, or the run was deleted."]
    assert not at.title and not at.metric
    at = present(runs=f"nope,{image_run}")  # the known one is still shown
    assert len(at.error) == 1 and "No run 'nope'" in at.error[0].value
    assert at.title[0].value == "digits-mae"


def test_links_from_run_detail_and_compare(runs):
    image_run, text_run = runs
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.run().switch_page("../pages/run_detail.py")
    at.query_params.clear()
    at.query_params["run"] = image_run
    at.run()
    (link,) = [p for p in at.get("page_link") if p.proto.label == "Presentation view"]
    assert link.proto.page.endswith("present") and link.proto.query_string == f"run={image_run}"
    at.switch_page("../pages/compare.py")
    at.query_params.clear()
    at.query_params["runs"] = f"{image_run},{text_run}"
    at.run()
    (link,) = [p for p in at.get("page_link") if p.proto.label == "Presentation view"]
    assert link.proto.query_string == f"runs={text_run}%2C{image_run}"  # Compare's order: newest first


def test_demo_mode_opens_the_page(runs, monkeypatch):
    image_run, _ = runs
    monkeypatch.setenv("MASKLAB_MODE", "demo")
    try:
        at = present(run=image_run)
        assert at.title[0].value == "digits-mae" and not at.error
        assert "Demo: read-only" in [c.value for c in at.sidebar.caption]
        assert_read_only(at)
    finally:
        st_config.set_option("server.maxUploadSize", 200)  # demo mode set it to 0 in this process
