"""The evaluation's downstream fine-tune, SSIM, audio spectral error and training FLOPs, on real data
(scikit-learn digits; FSDD clips), each beside its baseline."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from bench.fsdd import subset_zip
from engine.config import RunConfig
from engine.data import ImportOptions, import_source, load_dataset
from engine.errors import EvaluationError
from engine.eval.finetune import FinetuneInputs, _probe_head, finetune, finetune_inputs, pooled_features
from engine.eval.flops import train_step_flops
from engine.eval.reconstruction import SpectralSums, masked_ssim, reconstruction_quality, ssim_window
from engine.tasks import build_task, resolve

DIGITS = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2},
          "train": {"steps": 10, "batch_size": 64, "seed": 3, "device": "cpu", "num_threads": 1}}


def _image_task(workspace, **over):
    cfg = resolve(RunConfig.from_dict({**DIGITS, **over}))
    torch.manual_seed(cfg.train.seed)
    return build_task(cfg, torch.device("cpu"), workspace)


# --- fine-tune --------------------------------------------------------------------------------------


def test_finetune_trains_a_copy_and_is_seeded(workspace, one_thread):
    task = _image_task(workspace)
    before = copy.deepcopy(task.model.state_dict())
    inputs = finetune_inputs(task, 600)
    assert len(inputs.y_train) == 600 and len(inputs.y_val) == 179  # digits: 10% val
    a = finetune(task.model, inputs, seed=0, epochs=2)
    b = finetune(task.model, inputs, seed=0, epochs=2)
    # the run's model is untouched; the same seed gives the same figures
    assert all(torch.equal(before[k], v) for k, v in task.model.state_dict().items())
    assert a.accuracy == b.accuracy and a.train_accuracy == b.train_accuracy
    assert a.steps == 2 * (600 // 64) and a.rows == {"train": 600, "val": 179}
    # from random init, a short fine-tune still learns digits far above chance (10%): the baseline is a fair one
    assert a.accuracy > 0.5 and a.train_accuracy > 0.5
    assert set(a.figures()) == {"finetune_acc", "finetune_train_acc", "finetune_steps", "finetune_epochs",
                                "finetune_seconds"}


def test_a_finetune_starts_from_a_probe_and_its_length_is_planned_after_one_step(workspace, one_thread):
    """LP-FT: cut to one step (what a small evaluation budget leaves), the fine-tune of the random-init
    encoder scores near the probe its head starts from, far above chance (10%); a random head scored
    near chance there. ``plan`` sets the length once, after the first step, from measured times."""
    task = _image_task(workspace)
    inputs = finetune_inputs(task, 600)
    one = finetune(task.model, inputs, seed=0, max_steps=1)
    assert one.steps == 1 and one.accuracy > 0.6 and one.train_accuracy > 0.6
    calls = []
    planned = finetune(task.model, inputs, seed=0, max_steps=20, plan=lambda *a: calls.append(a) or 4)
    assert planned.steps == 4 and len(calls) == 1
    step_s, head_s, row_s = calls[0]
    assert step_s > 0 and head_s > row_s > 0
    # the plan cannot go past the recipe's steps nor below the step already taken
    assert finetune(task.model, inputs, seed=0, max_steps=3, plan=lambda *a: 99).steps == 3
    assert finetune(task.model, inputs, seed=0, max_steps=3, plan=lambda *a: 0).steps == 1


def test_the_probe_head_predicts_as_its_logistic_regression_whatever_classes_its_rows_hold():
    """The head's start (:func:`engine.eval.finetune._probe_head`) on two well-separated classes of
    a three-class task, and on rows of a single class (a rare class missing from the sample)."""
    g = torch.Generator().manual_seed(0)
    feats = torch.cat([torch.randn(40, 5, generator=g) + 3, torch.randn(40, 5, generator=g) - 3])
    y = np.array([0] * 40 + [2] * 40)
    head = _probe_head(feats, y, classes=3, seed=0).eval()
    with torch.no_grad():
        pred = head(feats).argmax(1).numpy()
    assert (pred == y).mean() > 0.95 and not (pred == 1).any()  # class 1, never seen, is never predicted
    one = _probe_head(feats, np.full(80, 1), classes=3, seed=0).eval()
    with torch.no_grad():
        assert (one(feats).argmax(1) == 1).all()


def test_pooled_features_are_the_probe_features_with_gradient(workspace, one_thread):
    task = _image_task(workspace)
    x = task.x_eval[:4].float()
    f = pooled_features(task.model)(x)
    assert f.requires_grad and torch.allclose(f.detach(), task.model.features(x))
    assert not task.model.features(x).requires_grad  # the probes' path stays without gradient


def test_finetune_refuses_without_labels(workspace):
    task = _image_task(workspace)
    inputs = finetune_inputs(task, 100)
    with pytest.raises(EvaluationError, match=r"fine-tuning needs labels: 1 class\(es\) among 100 labelled train rows"):
        finetune(task.model, FinetuneInputs(np.zeros(100, np.int64), inputs.y_val, inputs.encode), epochs=1)
    with pytest.raises(EvaluationError, match=r"0 labelled val rows"):
        finetune(task.model, FinetuneInputs(inputs.y_train, -np.ones_like(inputs.y_val), inputs.encode), epochs=1)


# --- SSIM -------------------------------------------------------------------------------------------


def test_ssim_window_fits_the_image():
    assert [ssim_window(s, s) for s in (3, 5, 8, 13, 14, 28, 224)] == [3, 3, 3, 5, 7, 7, 7]
    assert ssim_window(8, 28) == 3


def test_masked_ssim_scores_only_what_changed(workspace):
    x = load_dataset("digits", workspace).tensors("val")[0][:6].float().numpy()  # [6, 1, 8, 8]
    pm = np.zeros((6, 8, 8), bool)
    pm[:, 4:, 4:] = True
    masked, full = masked_ssim(x, x, pm)
    assert np.allclose(masked, 1) and np.allclose(full, 1)
    flat = np.where(pm[:, None], 0.5, x)  # a flat grey in the masked quarter
    masked2, full2 = masked_ssim(flat, x, pm)
    assert (masked2 < 0.9).all() and (masked2 < full2).all()  # the masked region scores lower than the image
    pm[0] = False
    assert np.isnan(masked_ssim(flat, x, pm)[0][0])  # nothing masked: no masked figure
    with pytest.raises(ValueError, match="must be"):
        masked_ssim(x, x, pm[:, :4])


def test_image_quality_puts_the_checkpoint_beside_every_baseline(workspace, one_thread):
    task = _image_task(workspace)
    q = reconstruction_quality(task)
    assert set(q) == {"trained", "mean_image", "visible_mean", "biharmonic", "knn"}
    assert all(v["rows"] == 179 and -1 <= v["ssim"] <= 1 and -1 <= v["ssim_full"] <= 1 for v in q.values())
    # the nearest training digits are a better guess of a hidden corner than a flat grey
    assert q["knn"]["ssim"] > q["visible_mean"]["ssim"]
    # visible pixels are pasted back: the whole image scores above its masked patches
    assert all(v["ssim_full"] > v["ssim"] for v in q.values())
    norm = _image_task(workspace, objective={"norm_pix_loss": True})
    assert reconstruction_quality(norm) == {}


# --- audio spectral error ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def audio_ws(tmp_path_factory, shared_data):
    """32 real FSDD clips (digits 0-3, two speakers, 4 takes), split by speaker, 8 kHz."""
    ws = tmp_path_factory.mktemp("eval-audio") / "workspace"
    subset_zip(shared_data, ws.parent / "d4.zip", "0123", ("jackson", "theo"), 4)
    ws.mkdir()
    import_source(ws.parent / "d4.zip", "d4", ImportOptions(group_column="speaker", sample_rate=8000, val_fraction=0.5),
                  workspace=ws)
    return ws


@pytest.mark.parametrize("task_name", ["audio_mae", "audio_frames"])
def test_audio_spectral_error_agrees_with_the_tasks_own_figures(audio_ws, one_thread, task_name):
    cfg = resolve(RunConfig.from_dict({"task": task_name, "data": {"dataset": "d4", "audio": {"n_mels": 32, "clip_seconds": 0.5}},
                               "model": {"preset": "tiny"}, "train": {"steps": 3, "batch_size": 8, "num_vis": 2}}))
    torch.manual_seed(0)
    task = build_task(cfg, torch.device("cpu"), audio_ws)
    q = reconstruction_quality(task)
    assert set(q) == {"trained", "mean_spec", "interp_spec"}
    base, ev = task.baselines(), task.evaluate()
    # the same masked cells as the task's headline and baselines: the MSEs are theirs
    assert q["trained"]["spec_mse"] == pytest.approx(ev["val_spec_mse"], rel=1e-5)
    assert q["mean_spec"]["spec_mse"] == pytest.approx(base["baseline/mean_spec_mse"], rel=1e-5)
    assert q["interp_spec"]["spec_mse"] == pytest.approx(base["baseline/interp_spec_mse"], rel=1e-5)
    for figs in q.values():
        assert figs["cells"] > 0 and figs["spec_l1"] > 0 and figs["lsd_db"] > 0 and figs["spectral_convergence"] > 0
        assert figs["spec_l1"] ** 2 <= figs["spec_mse"] * (1 + 1e-6)  # mean |d| squared <= mean d^2


def test_spectral_sums_perfect_and_silent_predictions():
    g = torch.Generator().manual_seed(0)
    target = torch.randn(2, 4, 10, generator=g)
    scored = torch.rand(2, 4, 10, generator=g) > 0.5
    mean, std = torch.full((4,), -2.0), torch.full((4,), 1.5)
    s = SpectralSums()
    s.add(target, target, scored, mean, std)
    f = s.figures()
    assert f["spec_l1"] == f["spec_mse"] == f["lsd_db"] == f["spectral_convergence"] == 0 and f["cells"] == scored.sum()
    silent = SpectralSums()
    silent.add(torch.full_like(target, -40.0), target, scored, mean, std)  # exp(-62 / 2): no energy
    assert silent.figures()["spectral_convergence"] == pytest.approx(1.0, abs=1e-6)
    # one normalised unit of log-mel error is std natural-log units: 10 / ln 10 * 1.5 dB
    off = SpectralSums()
    off.add(target + 1, target, scored, mean, std)
    assert off.figures()["lsd_db"] == pytest.approx(10 / np.log(10) * 1.5, rel=1e-5)


# --- FLOPs ------------------------------------------------------------------------------------------


def test_train_step_flops_follow_the_visible_patches(workspace, one_thread):
    flops = {}
    for ratio in (0.25, 0.75):
        task = _image_task(workspace, masking={"ratio": ratio})
        flops[ratio] = train_step_flops(task)
        assert all(p.grad is None for p in task.model.parameters())  # nothing left behind
    f = flops[0.75]
    assert f["flops_per_step"] == pytest.approx(f["flops_per_sample"] * 64) and f["batch_size"] == 64
    assert 0 < f["forward_flops_per_step"] < f["flops_per_step"]
    # MAE's encoder sees only the visible patches: hiding more costs less
    assert flops[0.75]["flops_per_step"] < flops[0.25]["flops_per_step"]
    assert train_step_flops(_image_task(workspace, masking={"ratio": 0.75})) == f  # shapes only: the same count
