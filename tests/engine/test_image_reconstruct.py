"""Interactive image inference: a kept checkpoint of a real run reconstructs an image under any mask."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.config import RunConfig
from engine.eval.inference import load_model
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, load_samples
from engine.tasks import resolve
from engine.tasks.image.inference import reconstruct


@pytest.fixture
def loaded(workspace):
    cfg = resolve(RunConfig.from_dict({"train": {"steps": 3, "batch_size": 16, "eval_interval": 3, "checkpoint_interval": 3,
                                         "device": "cpu"}}))
    run_id, d = create_run(cfg.to_dict())
    assert execute_run(d) == "completed", get_run(run_id).error
    return load_model(run_id), load_samples(run_id)


def test_reconstruct_matches_the_run_samples_and_pastes_visible_patches(loaded):
    model, sample = loaded
    img, mask = sample["images"][0], sample["mask"][0]  # [1, 8, 8], [4, 4]
    out = reconstruct(model, img, mask)
    assert set(out) == {"pred_img", "pasted"} and out["pasted"].shape == (1, 8, 8)
    # the same checkpoint (step 3) and mask as the run's own sample of step 3
    assert np.allclose(out["pasted"], sample["pasted"][0], atol=1e-5)
    visible = ~mask.repeat(2, 0).repeat(2, 1)
    assert np.allclose(out["pasted"][0][visible], img[0][visible], atol=1e-6)


def test_hiding_one_more_patch_changes_only_that_patch_of_the_input(loaded):
    model, sample = loaded
    img = sample["images"][0]
    mask = np.zeros((4, 4), bool)
    mask[1, 2] = True
    out = reconstruct(model, img, mask)
    changed = ~np.isclose(out["pasted"][0], img[0], atol=1e-6)
    assert not changed[~mask.repeat(2, 0).repeat(2, 1)].any()  # every visible pixel is the original


@pytest.mark.parametrize("hidden", ["all", "none"])
def test_every_or_no_patch_hidden(loaded, hidden):
    model, sample = loaded
    mask = np.full((4, 4), hidden == "all")
    out = reconstruct(model, sample["images"][1], torch.as_tensor(mask).flatten())  # a [L] mask works too
    assert np.isfinite(out["pred_img"]).all() and out["pred_img"].min() >= 0 and out["pred_img"].max() <= 1
    if hidden == "none":
        assert np.allclose(out["pasted"], sample["images"][1], atol=1e-6)


def test_shapes_that_do_not_fit_the_run_are_refused(loaded):
    model, sample = loaded
    with pytest.raises(ValueError, match=r"image of shape \(1, 7, 7\).*\(1, 8, 8\)"):
        reconstruct(model, np.zeros((1, 7, 7), np.float32), np.zeros((4, 4), bool))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 8\).*4x4 patch grid"):
        reconstruct(model, sample["images"][0], np.zeros((2, 8), bool))
