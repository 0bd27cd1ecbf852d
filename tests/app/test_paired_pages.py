"""The paired (image + caption) pages in AppTest on the real engine (issue 11): Data (pairs shown
together), New run and Mask lab (both masks of the run on real pairs), Run detail (the joint
reconstruction, the caption from the image alone, the retrieval box in both directions), Compare.
Real Tux Paint stamps and a real 2-step run through the worker. A fresh AppTest is a fresh browser
session: the URL carries the state, as a reload or a link does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from app.modalities.paired import _preview
from app.modalities.text import detok
from engine.config import RunConfig
from engine.data import load_dataset
from engine.store import get_run, load_samples
from engine.tasks import resolve
from tests.app.pages import captions, figure_columns, n_images, open_with, page_html
from tests.stamps import completed_run

NUM_VIS = 4
CFG = {"task": "paired", "data": {"dataset": "pairs", "tokenizer": {"vocab_size": 300, "max_len": 24}},
       "model": {"preset": "tiny"},
       "train": {"steps": 2, "batch_size": 8, "eval_interval": 2, "checkpoint_interval": 2, "num_vis": NUM_VIS,
                 "warmup_steps": 0}}


@pytest.fixture(scope="module")
def paired_ws(tmp_path_factory, shared_runs) -> tuple[Path, str]:
    """The module's copy of the session's paired workspace (tests/runs.py; its tests add runs to it):
    ``pairs``, 36 real Tux Paint stamps with their captions (12 of each of three categories, 16x16, a
    quarter in val), and a completed 2-step ``paired`` run on it with a checkpoint."""
    ws, ids = shared_runs.copy("paired_image_text", dest=tmp_path_factory.mktemp("paired-pages") / "workspace")
    return ws, ids["paired_image_text"]


@pytest.fixture
def env(paired_ws, monkeypatch) -> tuple[Path, str]:
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(paired_ws[0]))
    return paired_ws


def test_data_page_shows_each_image_with_its_caption(env):
    at = open_with("../pages/data.py", {"dataset": "pairs"})
    assert "pairs  (36 pairs, 16x16 px)" in at.selectbox(key="data_ds").options
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Train pairs"] == "27" and metrics["Val pairs"] == "9" and metrics["Classes"] == "3"
    texts = set(load_dataset("pairs").texts())
    caps = captions(at)
    assert len(caps) == 12  # six train and six val pairs, class by class
    for c in caps:  # “the pair's own caption” · class · split
        caption, cls, split = c.rsplit(" · ", 2)
        assert caption.strip("“”") in texts and cls in ("animals", "food", "vehicles") and split in ("train", "val")
    assert sorted(c.rsplit(" · ", 1)[1] for c in caps) == ["train"] * 6 + ["val"] * 6
    assert any(h.value == "Pairs per class and split" for h in at.subheader)
    assert any(h.value == "Length" for h in at.subheader)
    at.radio(key="data_len_pairs").set_value("characters").run()
    assert not at.exception and at.radio(key="data_len_pairs").value == "characters"


def test_new_run_previews_the_runs_own_masks_of_both_modalities(env):
    ws, run_id = env
    at = open_with("../pages/new_run.py", {"dataset": "pairs", "task": "paired", "task_params.text_ratio": "0.3",
                                           "data.tokenizer.vocab_size": "300", "data.tokenizer.max_len": "24",
                                           "train.num_vis": "4"})
    cap = next(c.value for c in at.caption if "fixed validation pairs" in c.value)
    assert "image random at 0.75" in cap and "caption random at 0.3" in cap
    assert n_images(at) == 2 * 8  # 8 of the 9 val pairs: original and masked
    assert page_html(at).count("background:#ffd54f") >= 8  # every caption hides one token at least
    # the launch button is ready: the config passes the launcher's pre-flight
    assert not next(b for b in at.button if b.label == "Launch").disabled
    url = {k: (v[0] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}
    assert url["task_params.text_ratio"] == "0.3" and url["model.arch"] == "flava"


def test_preview_shows_the_masks_the_run_used_for_its_samples(env):
    """The same config as the fixture's run: the first pairs of the preview carry the run's masks."""
    ws, run_id = env
    s = load_samples(run_id, workspace=ws)
    cfg = resolve(RunConfig.from_dict(get_run(run_id, ws).config))
    pv = _preview.__wrapped__(cfg.model_dump_json(), "", NUM_VIS)
    assert np.array_equal(pv.image_mask, s["mask"]) and np.array_equal(pv.text_mask, s["text_mask"])
    assert pv.captions == s.meta["captions"]


def test_mask_lab_draws_both_masks_and_image_statistics(env):
    at = open_with("../pages/mask_lab.py", {"dataset": "pairs", "masking.strategy": "block", "masking.ratio": "0.5",
                                            "task_params.text_strategy": "span", "n": "16"})
    assert at.selectbox(key="ml_img_strategy").value == "block" and at.selectbox(key="ml_txt_strategy").value == "span"
    cap = next(c.value for c in at.caption if "fixed validation pairs" in c.value)
    assert "image block at 0.5" in cap
    # the caption's count is the first caption's, as the image's is the first image's (not a sum)
    hidden, of = map(int, re.search(r"caption span at 0.15 \((\d+) of (\d+) tokens in the first caption", cap).groups())
    assert 1 <= hidden <= of <= 12, cap
    assert any(h.value == "Statistics of the image masks" for h in at.subheader)
    assert any("masks of 4x4 patches (4x4 px each) drawn over real train images" in c.value for c in at.caption)
    assert any(h.value == "Statistics of the caption masks" for h in at.subheader)
    assert any(c.value.startswith("16 caption masks over real train captions") for c in at.caption)
    image, caption = [float(m.value) for m in at.metric if m.label == "Mean mask ratio"]
    assert abs(image - 0.5) < 0.1  # block masks at 0.5 of a 4x4 grid
    assert caption >= 0.15  # span masks at text_ratio 0.15, one token at least in a short caption
    url = {k: (v[0] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}
    assert url["task_params.text_strategy"] == "span" and url["model.patch_size"] == "4"  # "Use in New run" carries them


def test_run_detail_shows_the_joint_reconstruction_and_answers_retrieval(env):
    ws, run_id = env
    at = open_with("../pages/run_detail.py", {"run": run_id})
    assert any(h.value == "Joint reconstructions of validation pairs" for h in at.subheader)
    assert {"pixel MSE ↓", "text→image R@5 ↑", "image→text R@5 ↑"} <= figure_columns(at), figure_columns(at)
    assert "caption accuracy @ step 2" in [m.label for m in at.metric], [m.label for m in at.metric]
    body = page_html(at)
    for label in ("masked · reconstruction · original", "masked caption", "model's tokens",
                  "caption from the image alone"):
        assert body.count(label) == NUM_VIS, label
    s = load_samples(run_id, workspace=ws)
    assert any(c.value.startswith(f"Step 2 · {NUM_VIS} fixed validation pairs") and
               f"of {int(s['text_mask'].sum())} hidden tokens right" in c.value for c in at.caption)
    # the retrieval box: a caption of a validation pair finds images, ✓ where the caption is its own
    assert any(h.value == "Retrieval" for h in at.subheader)
    box = at.text_input(key=f"ret_text_{run_id}")
    assert box.value == s.meta["captions"][0]
    found = [c for c in captions(at) if c[:1].isdigit()]
    assert len(found) == 5 and [c.split(".")[0] for c in found] == ["1", "2", "3", "4", "5"]
    box.set_value("A red car.").run()
    assert not at.error and len([c for c in captions(at) if c[:1].isdigit()]) == 5
    # and the reverse: a validation image finds captions, its own marked
    at.selectbox(key=f"ret_img_{run_id}").set_value(2).run()
    table = at.dataframe[-1].value
    assert list(table["rank"]) == [1, 2, 3, 4, 5] and set(table["own"]) <= {"✓", ""}
    assert table["similarity"].is_monotonic_decreasing
    own = next(c.value for c in at.caption if c.value.startswith("Its own caption ranks"))
    rank = int(own.split()[4])
    assert 1 <= rank <= 9 and ((rank <= 5) == ("✓" in set(table["own"])))


def test_compare_shows_the_runs_reconstructions_and_captions_from_the_image(env):
    ws, run_id = env
    other = completed_run({**CFG, "name": "other", "train": {**CFG["train"], "seed": 1}}, ws)
    at = open_with("../pages/compare.py", {"runs": f"{run_id},{other}"})
    table = next(d.value for d in at.dataframe if "caption" in d.value.columns)
    ours = load_samples(run_id, workspace=ws)
    assert len(table) == NUM_VIS and len([c for c in table.columns if "from the image (step 2)" in c]) == 2

    mine = next(c for c in table.columns if run_id[-6:] in c or c.startswith(f"{run_id} "))
    assert list(table[mine]) == [detok(t) for t in ours["caption_from_image"]]
    assert list(table["caption"]) == [detok(t) for t in ours["tokens"]]
    # the image half as image runs are compared: the originals, then each run's masked input and reconstruction
    assert n_images(at) == 1 + 2 * 2


def test_presentation_shows_the_joint_reconstruction(env):
    ws, run_id = env
    at = open_with("../pages/present.py", {"run": run_id})
    assert any(h.value == "Joint reconstructions of validation pairs" for h in at.subheader)
    assert page_html(at).count("caption from the image alone") == NUM_VIS


def test_new_run_sets_the_objective_weights_and_keeps_them_in_the_url(env):
    at = open_with("../pages/new_run.py", {"dataset": "pairs", "task": "paired", "data.tokenizer.vocab_size": "300",
                                           "data.tokenizer.max_len": "24"})
    assert [n.value for n in at.number_input if n.key.startswith("nr_m_w_")] == [1.0, 0.5, 0.5]  # DEFAULT_TERMS: the measured recipe
    at.number_input(key="nr_m_w_contrastive").set_value(0.0).run()
    at.number_input(key="nr_m_w_mse").set_value(2.0).run()
    assert not at.exception and not next(b for b in at.button if b.label == "Launch").disabled
    url = {k: (v[0] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}
    reopened = open_with("../pages/new_run.py", url)  # a reload: the weights come back from the URL
    assert [n.value for n in reopened.number_input if n.key.startswith("nr_m_w_")] == [2.0, 0.5, 0.0]
    terms = resolve(RunConfig.from_dict({"task": "paired", "data": {"dataset": "pairs"},
                                 "objective": {"terms": json.loads(url["objective.terms"])}})).objective.terms
    assert [(t.loss, t.weight) for t in terms] == [("mse", 2.0), ("cross_entropy", 0.5)]  # 0 leaves InfoNCE out
    for name in ("mse", "cross_entropy"):
        reopened.number_input(key=f"nr_m_w_{name}").set_value(0.0).run()
    assert any("Every objective weight is 0" in e.value for e in reopened.error)
    assert next(b for b in reopened.button if b.label == "Launch").disabled


def test_new_run_offers_both_archs_and_keeps_the_choice_in_the_url(env):
    at = open_with("../pages/new_run.py", {"dataset": "pairs", "task": "paired", "data.tokenizer.vocab_size": "300",
                                           "data.tokenizer.max_len": "24"})
    arch = at.selectbox(key="nr_m_arch")
    assert arch.value == "flava" and arch.options[1].startswith("M3AE")  # the measured recipe's arch first
    preset = at.selectbox(key="nr_m_preset_flava")
    assert preset.value == "tiny" and preset.options[0] == "tiny  (width 128, depth 2 image + 2 text + 1 fusion)"
    assert not next(b for b in at.button if b.label == "Launch").disabled  # passes the launcher's pre-flight
    arch.set_value("m3ae").run()
    assert not at.exception and at.selectbox(key="nr_m_preset_m3ae").value == "tiny"
    assert not next(b for b in at.button if b.label == "Launch").disabled
    url = {k: (v[0] if isinstance(v, list) else v) for k, v in dict(at.query_params).items()}
    assert url["model.arch"] == "m3ae"
    assert open_with("../pages/new_run.py", url).selectbox(key="nr_m_arch").value == "m3ae"  # a reload keeps it


def test_run_detail_answers_retrieval_with_a_flava_checkpoint(env):
    ws, _ = env
    run_id = completed_run({**CFG, "name": "flava", "model": {"arch": "flava", "preset": "tiny"}}, ws)
    at = open_with("../pages/run_detail.py", {"run": run_id})
    assert page_html(at).count("caption from the image alone") == NUM_VIS
    assert len([c for c in captions(at) if c[:1].isdigit()]) == 5  # the nearest validation images of a caption
    at.selectbox(key=f"ret_img_{run_id}").set_value(1).run()
    assert not at.exception and list(at.dataframe[-1].value["rank"]) == [1, 2, 3, 4, 5]
