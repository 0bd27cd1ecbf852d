"""Image reconstruction baselines: exact values on handmade images, and the task's figures on digits."""

from __future__ import annotations

import math

import pytest
import torch

from engine.config import RunConfig
from engine.eval.image_baselines import (
    BASELINES,
    NO_VISIBLE_FILL,
    PSNR_MAX_DB,
    all_baselines,
    biharmonic_patches,
    knn_patches,
    masked_pixel_sse,
    mean_image_patches,
    patchify,
    pixel_mask,
    psnr,
    unpatchify,
    visible_mean_patches,
)
from engine.tasks import build_task, resolve


def quadrants(values, channels: int = 1) -> torch.Tensor:
    """A ``[1, C, 4, 4]`` image whose four 2x2 patches (row-major) are flat at ``values``; channel
    ``c`` adds ``0.1 * c``."""
    img = torch.zeros(1, channels, 4, 4)
    for k, v in enumerate(values):
        r, c = divmod(k, 2)
        for ch in range(channels):
            img[0, ch, 2 * r : 2 * r + 2, 2 * c : 2 * c + 2] = v + 0.1 * ch
    return img


def test_patchify_layout_and_round_trip():
    img = torch.arange(2 * 3 * 4 * 6, dtype=torch.float32).reshape(2, 3, 4, 6)
    p = patchify(img, 2)
    assert p.shape == (2, 6, 12)
    # patch (0, 1) of image 0, flattened as (p_row, p_col, channel)
    assert p[0, 1].tolist() == [img[0, c, r, 2 + q].item() for r in range(2) for q in range(2) for c in range(3)]
    assert torch.equal(unpatchify(p, 2, (3, 4, 6)), img)


def test_pixel_mask_repeats_each_patch():
    m = torch.tensor([[True, False, False, True]])
    pm = pixel_mask(m, 2, (2, 2))
    assert pm.shape == (1, 4, 4)
    assert pm[0].int().tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]


def test_visible_mean_is_the_mean_of_the_visible_pixels_per_channel():
    img = quadrants([0.1, 0.3, 0.5, 0.7], channels=3)
    mask = torch.tensor([[True, False, False, True]])  # top-left and bottom-right hidden
    pred = visible_mean_patches(img, mask, 2)
    assert pred.shape == (1, 4, 12)
    per_channel = pred[0].reshape(4, 4, 3)  # (patch, pixel, channel)
    for c in range(3):
        assert torch.allclose(per_channel[..., c], torch.full((4, 4), 0.4 + 0.1 * c))
    nothing_visible = visible_mean_patches(img, torch.ones(1, 4, dtype=torch.bool), 2)
    assert torch.equal(nothing_visible, torch.full((1, 4, 12), NO_VISIBLE_FILL))


def test_mean_image_is_the_training_mean():
    train = torch.cat([quadrants([0.0, 0.2, 0.4, 0.6]), quadrants([1.0, 0.2, 0.0, 0.2])])
    pred = mean_image_patches(train, 3, 2)
    assert pred.shape == (3, 4, 4)
    assert torch.allclose(pred, torch.tensor([0.5, 0.2, 0.2, 0.4])[None, :, None].expand(3, 4, 4))


def test_knn_uses_the_visible_pixels_only():
    query = quadrants([0.9, 0.0, 0.0, 0.0])
    mask = torch.tensor([[False, True, True, True]])  # only the top-left patch is visible
    train = torch.cat([
        quadrants([0.0, 0.0, 0.0, 0.0]),  # equal to the query on every hidden pixel, far on the visible one
        quadrants([0.8, 1.0, 1.0, 1.0]),  # nearest on the visible patch
        quadrants([0.5, 0.6, 0.6, 0.6]),  # second nearest
    ])
    assert torch.allclose(knn_patches(query, mask, train, 2, k=1), patchify(train[1:2], 2))
    two = knn_patches(query, mask, train, 2, k=2)
    assert torch.allclose(two, patchify((train[1:2] + train[2:3]) / 2, 2))
    assert torch.allclose(knn_patches(query, mask, train, 2, k=50), patchify(train.mean(0, keepdim=True), 2))
    with pytest.raises(ValueError, match="k must be >= 1"):
        knn_patches(query, mask, train, 2, k=0)
    with pytest.raises(ValueError, match="differ in shape"):
        knn_patches(query, mask, torch.zeros(3, 1, 8, 8), 2)


def test_knn_chunks_give_the_same_answer():
    g = torch.Generator().manual_seed(0)
    imgs, train = torch.rand(7, 1, 4, 4, generator=g), torch.rand(20, 1, 4, 4, generator=g)
    mask = torch.rand(7, 4, generator=g) < 0.5
    assert torch.allclose(knn_patches(imgs, mask, train, 2, k=3, chunk=2), knn_patches(imgs, mask, train, 2, k=3))


def test_biharmonic_fills_a_flat_image_exactly_and_keeps_visible_pixels():
    flat = torch.full((1, 1, 8, 8), 0.3)
    mask = torch.zeros(1, 4, 4, dtype=torch.bool)
    mask[0, 1:3, 1:3] = True
    assert torch.allclose(biharmonic_patches(flat, mask, 2), patchify(flat, 2), atol=1e-6)

    g = torch.Generator().manual_seed(1)
    img = torch.rand(2, 3, 8, 8, generator=g)
    mask = torch.rand(2, 4, 4, generator=g) < 0.6
    pred = biharmonic_patches(img, mask, 2)
    visible = ~mask.flatten(1)
    assert torch.allclose(pred[visible], patchify(img, 2)[visible], atol=1e-6)
    assert pred.min() >= 0 and pred.max() <= 1
    assert torch.equal(biharmonic_patches(img[:1], torch.ones(1, 16, dtype=torch.bool), 2),
                       torch.full((1, 16, 12), NO_VISIBLE_FILL))


def test_all_baselines_and_the_biharmonic_row_cap():
    g = torch.Generator().manual_seed(2)
    imgs, train = torch.rand(5, 1, 4, 4, generator=g), torch.rand(12, 1, 4, 4, generator=g)
    mask = torch.rand(5, 4, generator=g) < 0.5
    out = all_baselines(imgs, mask, train, 2, k=3, biharmonic_rows=2)
    assert list(out) == list(BASELINES)
    assert [len(v) for v in out.values()] == [5, 5, 2, 5]
    assert "biharmonic" not in all_baselines(imgs, mask, train, 2, biharmonic_rows=0)


def test_masked_pixel_sse_counts_masked_patches_only_and_clips():
    pred = torch.tensor([[[0.5, 0.5], [1.5, -1.0], [9.0, 9.0]]])  # [1, 3 patches, 2 values]
    target = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[True, True, False]])
    sse, count = masked_pixel_sse(pred, target, mask)
    assert count == 4
    assert sse == pytest.approx(0.25 + 0.25 + 0.0 + 0.0)  # 1.5 -> 1.0 and -1.0 -> 0.0 after clipping


def test_psnr():
    assert psnr(0.01) == pytest.approx(20.0)
    assert psnr(1.0) == 0.0
    assert psnr(0.0) == PSNR_MAX_DB and math.isfinite(psnr(0.0))


def test_image_task_logs_every_baseline_in_objective_and_pixel_units(workspace):
    """On digits: each baseline under the run's objective and as pixel MSE / PSNR; with an MSE
    objective and exact-count masks the two agree; the run's own val_mse and val_psnr."""
    cfg = resolve(RunConfig.from_dict({"train": {"device": "cpu"}}))
    torch.manual_seed(0)
    task = build_task(cfg, "cpu", workspace)
    base = task.baselines()
    assert sorted(base) == sorted(k for b in BASELINES for k in (f"baseline/{b}", f"baseline/{b}/mse", f"baseline/{b}/psnr"))
    for b in BASELINES:
        assert base[f"baseline/{b}"] == pytest.approx(base[f"baseline/{b}/mse"], rel=1e-5)
        assert base[f"baseline/{b}/psnr"] == pytest.approx(10 * math.log10(1 / base[f"baseline/{b}/mse"]))
    # what a run is compared with: kNN beats the mean image, which beats the flat visible mean
    assert base["baseline/knn/mse"] < base["baseline/mean_image/mse"] < base["baseline/visible_mean/mse"]
    ev = task.evaluate()
    assert ev["val_mse"] <= ev["val_loss"] + 1e-6  # the same masks; pixel figures clip to [0, 1]
    assert ev["val_psnr"] == pytest.approx(10 * math.log10(1 / ev["val_mse"]))


def test_norm_pix_runs_report_no_pixel_figure_but_keep_the_baselines(workspace):
    cfg = resolve(RunConfig.from_dict({"objective": {"norm_pix_loss": True}, "train": {"device": "cpu"}}))
    task = build_task(cfg, "cpu", workspace)
    ev = task.evaluate()
    assert "val_mse" not in ev and "val_psnr" not in ev and "val_loss" in ev
    base = task.baselines()
    assert base["baseline/knn/mse"] < base["baseline/mean_image/mse"]
    assert base["baseline/knn"] != base["baseline/knn/mse"]  # the objective is in normalised units
