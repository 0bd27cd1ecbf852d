"""SimMIM (encoder-only ViT with mask tokens, linear head, L1 on masked pixels) through the task seam."""

from __future__ import annotations

import pytest
import torch

from engine.config import RunConfig
from engine.masking import random_mask
from engine.models import SimMIMViT, build_model
from engine.objectives import masked_l1
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, read_metrics
from engine.tasks import resolve


def micro(**kw) -> SimMIMViT:
    torch.manual_seed(0)
    return SimMIMViT(img_size=(8, 8), in_chans=1, patch_size=2, embed_dim=32, depth=2, num_heads=4, **kw)


def test_outputs_and_mask_token_at_masked_patches_only():
    model = micro()
    imgs = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    mask = random_mask((2, 16), 0.5, generator=torch.Generator().manual_seed(1))
    out = model(imgs, mask)
    assert out["pred"].shape == out["target"].shape == (2, 16, 4) and torch.equal(out["mask"], mask)
    # a masked patch's pixels never reach the encoder: changing them changes nothing
    m = mask[0].view(4, 4).repeat_interleave(2, 0).repeat_interleave(2, 1)
    changed = imgs.clone()
    changed[0, 0][m] = 1.0 - changed[0, 0][m]
    torch.testing.assert_close(model(changed, mask)["pred"], out["pred"])
    # ...while a visible patch's pixels do
    changed = imgs.clone()
    changed[0, 0][~m] += 0.5
    assert not torch.allclose(model(changed, mask)["pred"][0], out["pred"][0])


def test_l1_scores_masked_patches_and_reconstruct_pastes_visible_ones():
    model = micro()
    imgs = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    mask = random_mask((2, 16), 0.75, generator=torch.Generator().manual_seed(3))
    out = model(imgs, mask)
    expected = (out["pred"] - out["target"]).abs().mean(-1)[mask].mean()
    torch.testing.assert_close(masked_l1(**out), expected)
    rec = model.reconstruct(imgs, mask)
    assert torch.equal(model.patchify(rec["pasted"])[~mask], model.patchify(imgs)[~mask])
    assert model.features(imgs).shape == (2, 32)


def test_build_from_config():
    cfg = resolve(RunConfig.from_dict({"model": {"arch": "simmim_vit"}, "objective": {"loss": "l1"}}))
    assert isinstance(build_model(cfg, image_shape=(1, 8, 8)), SimMIMViT)


@pytest.mark.slow
def test_simmim_trains_on_digits_below_the_mean_image_baseline(workspace):
    cfg = resolve(RunConfig.from_dict({
        "name": "simmim", "model": {"arch": "simmim_vit", "preset": "tiny", "patch_size": 4},
        "objective": {"loss": "l1"}, "masking": {"strategy": "random", "ratio": 0.5},
        "train": {"steps": 600, "batch_size": 64, "lr": 3e-3, "warmup_steps": 30, "eval_interval": 200,
                  "checkpoint_interval": 600, "device": "cpu"}}))
    run_id, d = create_run(cfg.to_dict())
    assert execute_run(d) == "completed", get_run(run_id).error
    df = read_metrics([run_id], ["val_loss", "baseline/mean_image"], max_points=None)
    base = df[df.key == "baseline/mean_image"].value.item()
    val = df[df.key == "val_loss"].sort_values("step").value.tolist()
    # L1 on the same masked val patches as the baseline; measured here: 0.145 against 0.196
    assert val[-1] < 0.85 * base, (val, base)
