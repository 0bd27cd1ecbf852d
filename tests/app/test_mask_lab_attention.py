"""Mask lab's attention-guided masking (AttMask) in AppTest: "Attention from" lists the session's
shared digits MAE run, draws its checkpoint's class-token attention beside the masks it gives, keeps
the choice in the URL, offers random scores, and says in words (no traceback) when a checkpoint is
missing or damaged.

The shared run (tests/runs.py: 20 steps of the tiny MAE on digits, 2 px patches, a checkpoint at
step 20) is read as it is; the tests that break a checkpoint break a copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from app.components.datasets import dataset_view
from engine.config import RunConfig
from engine.data import list_datasets
from engine.eval.inference import checkpoint_path, load_model
from engine.masking import preview_masks
from engine.methods.attention import cls_attention
from engine.store import get_run
from tests.app.test_url_state import open_with, url

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"
LAB = "../pages/mask_lab.py"
QUERY = {"dataset": "digits", "masking.strategy": "attention", "masking.ratio": "0.25"}


@pytest.fixture(scope="module")
def image_run(shared_runs):
    """The shared digits MAE run, its workspace ``$MASKLAB_WORKSPACE`` for the module's tests."""
    run = shared_runs.get("image_mae")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(run.workspace))
        yield run


def open_lab(params: dict[str, str]) -> AppTest:
    return open_with(LAB, params)


def image_captions(at: AppTest) -> list[str]:
    return [img.caption for el in at.get("image") for img in el.proto.imgs]


def attention_select(at: AppTest):
    return next(s for s in at.selectbox if s.label == "Attention from")


def test_attention_from_the_run_beside_its_masks_and_random_scores(image_run):
    at = open_lab(QUERY)
    assert not at.error, [e.value for e in at.error]
    sel = attention_select(at)
    assert sel.value == image_run.run_id  # the newest matching run, by default
    assert sel.options[-1] == "random scores (no checkpoint)" and any(image_run.run_id in o for o in sel.options)
    assert url(at)["lab_attention"] == image_run.run_id
    caps = image_captions(at)
    assert len(caps) == 24 and caps[1:3] == ["attention", "masked"] and caps[0].startswith("image · ")
    note = next(c.value for c in at.caption if "class token's attention" in c.value)
    assert f"run {image_run.run_id} (checkpoint of step 20" in note and "the 4 most attended of 16 patches" in note
    assert any(f"The attention of run {image_run.run_id}" in c.value for c in at.caption)  # the statistics too

    # The masks shown are preview_masks ranking that checkpoint's attention: the first image's
    # extreme shares in the caption are the model's own figures.
    cfg = RunConfig.from_dict({"data": {"dataset": "digits"}, "masking": {"strategy": "attention", "ratio": 0.25},
                               "model": {"patch_size": 2}})
    info = next(d for d in list_datasets() if d.name == "digits")
    images = torch.from_numpy(dataset_view(str(image_run.workspace), "digits", info.created_at).preview)
    att = cls_attention(load_model(image_run.run_id).model, images)
    assert f"get {float(att[0].min()):.1%} to {float(att[0].max()):.1%} of its attention" in note
    masks = preview_masks(cfg, (1, 8, 8), len(images), images=images, attention=att)
    assert (masks.flatten(1).sum(1) == 4).all()
    assert torch.equal(masks.flatten(1), att >= att.topk(4, dim=1).values[:, -1:])  # the 4 most attended

    sel.set_value("random").run()
    assert not at.exception and not at.error
    assert url(at)["lab_attention"] == "random" and len(image_captions(at)) == 16
    assert any("from no checkpoint here, so these masks rank random scores" in c.value for c in at.caption)
    assert any("The attention: random scores (no checkpoint)" in c.value for c in at.caption)

    at.selectbox(key="ml_strategy").set_value("random").run()  # another strategy: the choice leaves the URL
    assert "lab_attention" not in url(at) and not at.error


def test_the_choice_comes_back_from_the_url(image_run):
    at = open_lab({**QUERY, "lab_attention": "random"})
    assert attention_select(at).value == "random" and len(image_captions(at)) == 16
    at = open_lab({**QUERY, "lab_attention": "no-such-run"})  # a hand-edited link: the default instead
    assert attention_select(at).value == image_run.run_id and not at.error


@pytest.mark.parametrize("damage", ["garbled", "no checkpoint"])
def test_a_damaged_or_missing_checkpoint_is_an_error_in_words(shared_runs, tmp_path, monkeypatch, damage):
    ws, ids = shared_runs.copy("image_mae", dest=tmp_path / "workspace")
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    run_id = ids["image_mae"]
    ckpt = checkpoint_path(run_id, workspace=ws)
    if damage == "garbled":  # the same size and a whole header: complete, but its hash no longer matches
        weights = ckpt / "model.safetensors"
        data = bytearray(weights.read_bytes())
        data[-64:] = b"\xff" * 64
        weights.write_bytes(bytes(data))
    else:
        shutil.rmtree(ckpt)
    assert get_run(run_id, ws).status == "completed"
    at = open_lab({**QUERY, "lab_attention": run_id})
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith(f"Cannot show the attention of run {run_id}: "), errors
    assert ("keeps no complete checkpoint" if damage == "no checkpoint" else "model.safetensors") in errors[0]
    assert len(image_captions(at)) == 16  # the random-score preview instead
    assert any("from no checkpoint here" in c.value for c in at.caption)
