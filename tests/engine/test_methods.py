"""The methods beside pixel MAE (issue 36): HOG targets, the EMA teacher and its collapse watch,
denoising, the contrastive mix, the method catalog and the ``method`` sweep field."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.methods.catalog import apply_method, method_label, methods_for
from engine.methods.collapse import TARGET_STD, collapse_warning
from engine.methods.hog import hog_picture, patch_hog
from engine.methods.teacher import ema_decay_at, target_std, top_k_targets
from engine.models import build_model
from engine.models.mae import MaskedAutoencoderViT
from engine.models.mae_methods import MethodMAE
from engine.runner.sweep import sweep_configs
from engine.tasks import build_task, resolve

REPO = Path(__file__).resolve().parents[2]


def _cfg(**over) -> RunConfig:
    d = {"task": "image_mim", "data": {"dataset": "digits"}, "model": {"arch": "mae_vit", "patch_size": 2},
         "train": {"device": "cpu", "batch_size": 32, "num_vis": 4}}
    for k, v in over.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return resolve(RunConfig.from_dict(d))


# --- HOG -------------------------------------------------------------------------------------------


def test_hog_of_a_vertical_edge_votes_into_the_horizontal_gradient_bin():
    img = torch.zeros(1, 1, 8, 8)
    img[..., 4:] = 1.0  # dark left, bright right: gradient along +x, angle 0
    h = patch_hog(img, patch=4, bins=9, cells=1)
    assert h.shape == (1, 4, 9)
    for patch in (0, 2):  # the left patches hold the edge at their right border (column 3 vs 4)
        v = h[0, patch]
        assert math.isclose(float(v.norm()), 1.0, rel_tol=1e-4)
        assert int(v.argmax()) in (0, 8)  # bins centred at 10 and 170 degrees share angle 0
        assert math.isclose(float(v[0]), float(v[8]), rel_tol=1e-5)  # 0 degrees lies halfway between them
    flat = patch_hog(torch.full((1, 3, 8, 8), 0.3), patch=4)
    assert torch.count_nonzero(flat) == 0  # no gradient: a zero vector, not NaN
    cells = patch_hog(torch.rand(2, 1, 8, 8), patch=4, bins=9, cells=2)
    assert cells.shape == (2, 4, 36) and torch.allclose(cells.norm(dim=-1), torch.ones(2, 4), atol=1e-4)
    with pytest.raises(ValueError, match="hog_cells 3 does not divide the 4-pixel patch"):
        patch_hog(img, patch=4, cells=3)


def test_hog_picture_draws_the_edge_direction():
    img = torch.zeros(1, 1, 8, 8)
    img[..., 4:] = 1.0
    pic = hog_picture(patch_hog(img, patch=8), (1, 1), cell_px=9)
    assert pic.shape == (1, 9, 9) and pic.max() == pytest.approx(1.0)
    # a vertical edge is drawn as a vertical line (its two bins, 10 degrees either side): every row
    # is lit in the three middle columns, and nothing outside them
    assert pic[0][:, 3:6].sum(axis=1).min() > 0.6 and pic[0][:, [0, 1, 2, 6, 7, 8]].max() < 0.05
    with pytest.raises(ValueError, match=r"expected \[B, 4, 9\]"):
        hog_picture(np.zeros((1, 4, 8)), (2, 2))


# --- the teacher -----------------------------------------------------------------------------------


def test_teacher_targets_and_spread():
    assert [round(ema_decay_at(s, 0.9, 0.99, 10), 3) for s in (0, 5, 10, 50)] == [0.9, 0.945, 0.99, 0.99]
    a, b = torch.randn(2, 5, 3) * 4 + 2, torch.randn(2, 5, 3)
    t = top_k_targets([a, b], 2)
    # each layer is normalised over the units per channel, then the two are averaged
    norm = [(x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, unbiased=False, keepdim=True) + 1e-5) for x in (a, b)]
    assert torch.allclose(t, (norm[0] + norm[1]) / 2, atol=1e-4)
    assert float(target_std(torch.ones(2, 5, 3))) == 0.0
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[:, :2] = True
    x = torch.arange(30.0).reshape(2, 5, 3)
    assert float(target_std(x, mask)) == pytest.approx(float(x[mask].std(0).mean()))


def test_collapse_warning_fires_on_a_forced_collapse(workspace):
    """A real latent-target task: its logged spread is healthy, then the teacher is forced to a
    constant output (every weight and the positions zeroed) and the warning fires on the series."""
    torch.manual_seed(0)
    task = build_task(_cfg(task_params={"target": "latent"}), "cpu", workspace)
    g = torch.Generator().manual_seed(0)
    idx = torch.arange(32)
    series = []
    for step in range(3):
        loss, logs = task.train_loss(idx, g, 0.75)
        assert torch.isfinite(loss)
        series.append(float(logs[TARGET_STD]))
        task.after_step(step)
    assert min(series) > 0.5 and collapse_warning(series) is None
    with torch.no_grad():
        for p in task.model.teacher.parameters():
            p.zero_()
        task.model.pos_embed.zero_()
    _, logs = task.train_loss(idx, g, 0.75)
    series.append(float(logs[TARGET_STD]))
    assert series[-1] < 0.01
    warning = collapse_warning(series)
    assert warning and "collapsing" in warning and "ema_decay" in warning
    assert task.evaluate()["val_" + TARGET_STD] < 0.01


# --- the model -------------------------------------------------------------------------------------


def test_a_plain_config_builds_plain_mae_with_its_state_dict_keys():
    cfg = _cfg()
    plain = build_model(cfg, image_shape=(1, 8, 8))
    assert type(plain) is MaskedAutoencoderViT
    ref = MaskedAutoencoderViT(img_size=(8, 8), in_chans=1, patch_size=2, embed_dim=96, depth=4, num_heads=4,
                               decoder_embed_dim=64, decoder_depth=2, decoder_num_heads=4)
    assert list(plain.state_dict()) == list(ref.state_dict())


@pytest.mark.parametrize("over, dim", [({"task_params": {"target": "hog"}}, 9), ({"task_params": {"target": "latent"}}, 96),
                                       ({"task_params": {"corruption": "noise"}}, 4)])
def test_method_outputs_and_readout_gradient(over, dim):
    torch.manual_seed(0)
    model = build_model(_cfg(**over), image_shape=(1, 8, 8))
    assert isinstance(model, MethodMAE)
    x = torch.rand(3, 1, 8, 8)
    mask = torch.zeros(3, 16, dtype=torch.bool)
    mask[:, ::2] = True
    noise = torch.randn(3, 16, 4) * 0.5 if model.params.corruption == "noise" else None
    out = model(x, mask, noise=noise)
    assert out["pred"].shape == out["target"].shape == (3, 16, dim)
    if model.params.target == "pixel":
        assert "px_pred" not in out
        return
    assert out["px_pred"].shape == out["px_target"].shape == (3, 16, 4)
    ((out["px_pred"] - out["px_target"]) ** 2).mean().backward()  # the readout alone
    assert model.readout.weight.grad is not None and model.readout.weight.grad.abs().sum() > 0
    for name, p in model.named_parameters():  # nothing before the readout learns from it
        if not name.startswith("readout") and p.requires_grad:
            assert p.grad is None or p.grad.abs().sum() == 0, name


def test_noise_keeps_every_patch_visible_and_targets_the_clean_pixels():
    torch.manual_seed(0)
    model = build_model(_cfg(task_params={"corruption": "noise"}), image_shape=(1, 8, 8))
    x = torch.rand(2, 1, 8, 8)
    mask = torch.ones(2, 16, dtype=torch.bool)
    latent, _, pad = model._encode(model.patchify(x), mask, torch.zeros(2, 16, 4))
    assert latent.shape == (2, 17, 96) and pad is None  # all 16 patches (and the class token) encoded
    out = model(x, mask, noise=torch.randn(2, 16, 4))
    assert torch.equal(out["target"], model.patchify(x))
    assert torch.equal(model.fixed_noise(x), model.fixed_noise(x))  # evaluation noise is fixed


def test_contrastive_views_and_teacher_update():
    torch.manual_seed(0)
    cfg = _cfg(objective={"terms": [{"loss": "mse", "weight": 1.0}, {"loss": "contrastive", "weight": 0.1}]},
               task_params={"target": "latent", "ema_decay": 0.5, "ema_decay_end": 0.5})
    model = build_model(cfg, image_shape=(1, 8, 8))
    x = torch.rand(4, 1, 8, 8)
    g = torch.Generator().manual_seed(1)
    m1, m2 = (torch.rand(4, 16, generator=g) < 0.75 for _ in range(2))
    out = model(x, m1, mask_b=m2)
    assert out["emb_a"].shape == out["emb_b"].shape == (4, 64)
    assert float(out["logit_scale"]) == pytest.approx(math.log(1 / 0.2))
    before = model.teacher.blocks[0].mlp.fc1.weight.clone() if hasattr(model.teacher.blocks[0].mlp, "fc1") else None
    with torch.no_grad():
        for p in model.blocks.parameters():
            p.add_(1.0)
    t0 = [p.clone() for p in model.teacher.blocks.parameters()]
    model.ema_update(0)
    for t, old, s in zip(model.teacher.blocks.parameters(), t0, model.blocks.parameters()):
        assert torch.allclose(t, 0.5 * old + 0.5 * s)
    assert not any(p.requires_grad for p in model.teacher.parameters())
    del before


def test_a_contrastive_term_of_weight_zero_trains(workspace):
    """The objective evaluates every term, weight 0 too: the model still gives the views' embeddings."""
    torch.manual_seed(0)
    task = build_task(_cfg(objective={"terms": [{"loss": "mse", "weight": 1.0}, {"loss": "contrastive", "weight": 0.0}]}),
                      "cpu", workspace)
    loss, logs = task.train_loss(torch.arange(16), torch.Generator().manual_seed(0), 0.75)
    assert torch.isfinite(loss) and float(logs["loss/contrastive"]) > 0
    assert method_label(task.cfg.to_dict()) == "mae"  # a weight of 0 mixes nothing in


def test_refused_method_combinations_name_the_field():
    with pytest.raises(ConfigError, match=r"task_params: .* run on mae_vit, not simmim_vit"):
        _cfg(model={"arch": "simmim_vit"}, task_params={"target": "hog"})
    with pytest.raises(ConfigError, match=r"objective\.norm_pix_loss: applies to the pixel target only"):
        build_model(_cfg(objective={"norm_pix_loss": True}, task_params={"target": "hog"}), image_shape=(1, 8, 8))
    with pytest.raises(ConfigError, match=r"task_params\.hog_cells: 4 cells do not tile a 2-pixel patch"):
        build_model(_cfg(task_params={"target": "hog", "hog_cells": 4}), image_shape=(1, 8, 8))
    with pytest.raises(ConfigError, match=r"task_params\.top_k: 9 is more than the 4 blocks"):
        build_model(_cfg(task_params={"target": "latent", "top_k": 9}), image_shape=(1, 8, 8))
    with pytest.raises(ConfigError, match=r"task_params\.target"):
        _cfg(task_params={"target": "sound"})


def test_denoising_baseline_is_the_noisy_input(workspace):
    torch.manual_seed(0)
    task = build_task(_cfg(task_params={"corruption": "noise", "noise_sigma": 0.5}), "cpu", workspace)
    b = task.baselines()
    # the noisy input's error: sigma^2 = 0.25 before clipping to [0, 1], less after
    assert 0.05 < b["baseline/noisy_input/mse"] < 0.25
    assert {"baseline/mean_image/mse", "baseline/knn/mse", "baseline/noisy_input"} <= set(b)
    assert "val_mse" in task.evaluate()


# --- the catalog -----------------------------------------------------------------------------------


def test_every_example_config_is_its_method():
    files = sorted((REPO / "configs").glob("method-*.yaml"))
    names = {p.stem.removeprefix("method-") for p in files}
    assert {"data2vec", "maskfeat", "mae-contrastive", "attmask", "denoise", "data2vec-text"} <= names
    for p in files:
        cfg = yaml.safe_load(p.read_text(encoding="utf-8"))
        assert method_label(resolve(RunConfig.from_dict(cfg)).to_dict()) == p.stem.removeprefix("method-"), p.name


@pytest.mark.parametrize("task, base", [("image_mim", {"data": {"dataset": "digits"}, "model": {"patch_size": 2}}),
                                        ("text_mlm", {"data": {"dataset": "fortunes"}})])
def test_a_method_sweep_makes_each_method(task, base):
    base = {"name": "m", "task": task, **base}
    names = list(methods_for(task))
    cfgs = sweep_configs(base, "method", names, [0, 1])
    assert [method_label(c.to_dict()) for c in cfgs] == [n for n in names for _ in (0, 1)]
    assert all(c.name.startswith("m sweep ") and " method=" in c.name for c in cfgs)
    # a method put on another method's config undoes the first: the label is the second's alone
    for a in names:
        for b in names:
            assert method_label(apply_method(apply_method(base, a), b)) == b
    with pytest.raises(ConfigError, match="is not a method of task"):
        sweep_configs(base, "method", ["nope"], [0])
