"""The paired task (M3AE, and FLAVA-style encoders) through the task seam: defaults and config errors, the masks (joint and
cross-modal completion), what the model can and cannot see, training through the real worker and
store on a slice of real Tux Paint stamps, samples, features, the inference loader."""

from __future__ import annotations

import csv
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.config import RunConfig, load_config
from engine.data import ImportOptions, import_source
from engine.errors import ConfigError
from engine.eval.inference import load_model
from engine.runner.worker import execute_run
from engine.store import create_run, get_run, load_samples
from engine.tasks import build_task, resolve
from engine.tasks.checks import check_run
from engine.tasks.text.common import text_rows

REPO = Path(__file__).resolve().parents[2]
N_PAIRS = 48


@pytest.fixture(scope="module")
def ws(tmp_path_factory, shared_data):
    """A workspace with ``stamps``: the first 48 real Tux Paint stamps with their English captions
    and categories, 16x16 RGB padded on white, a quarter in val."""
    d = shared_data / "tuxpaint-stamps"
    root = tmp_path_factory.mktemp("paired-task")
    with open(d / "captions.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:N_PAIRS]
    with zipfile.ZipFile(root / "stamps.zip", "w") as z:
        z.writestr("captions.csv", "image,caption,category\n" + "".join(
            f'{r["image"]},"{r["caption_en"]}",{r["category"]}\n' for r in rows))
        for r in rows:
            z.write(d / r["image"], r["image"])
    ws = root / "workspace"
    ws.mkdir()
    rep = import_source(root / "stamps.zip", "stamps", ImportOptions(val_fraction=0.25), workspace=ws, image_size=16,
                        geometry="pad", pad_fill="white")
    assert rep.accepted == N_PAIRS
    return ws


def cfg_of(**over) -> RunConfig:
    d = {"task": "paired", "data": {"dataset": "stamps", "tokenizer": {"vocab_size": 300, "max_len": 24}},
         "model": {"preset": "tiny"},
         "train": {"steps": 3, "batch_size": 8, "eval_interval": 3, "checkpoint_interval": 3, "num_vis": 2,
                   "warmup_steps": 1}}
    for k, v in over.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return resolve(RunConfig.from_dict(d))


def test_paired_task_fills_its_defaults():
    cfg = resolve(RunConfig.from_dict({"task": "paired", "data": {"dataset": "tuxpaint-stamps"}}))
    assert (cfg.model.arch, cfg.model.patch_size, cfg.masking.strategy, cfg.masking.ratio) == ("flava", 4, "random", 0.75)
    assert [(t.loss, t.weight) for t in cfg.objective.terms] == [("mse", 1.0), ("cross_entropy", 0.5),
                                                                 ("contrastive", 0.5)]
    assert cfg.task_params == {"text_strategy": "random", "text_ratio": 0.15, "text_params": {},
                               "caption_completion": 0.25, "image_completion": 0.0}
    assert cfg.data.tokenizer.max_len == 48
    audio = resolve(RunConfig.from_dict({"task": "paired_audio", "data": {"dataset": "spoken"}}))
    assert audio.task_params == {**cfg.task_params, "text_source": "text"}  # the audio-text task's own field
    for over in ({"task_params": {"text_source": "label"}}, {"data": {"dataset": "x", "audio": {"n_mels": 32}}}):
        with pytest.raises(ConfigError):  # image-text pairs know nothing of audio
            resolve(RunConfig.from_dict({"task": "paired", "data": {"dataset": "x"}, **over}))
    span = resolve(RunConfig.from_dict({"task": "paired", "task_params": {"text_strategy": "span"}}))
    assert span.task_params["text_params"]  # the strategy's own parameters, resolved


@pytest.mark.parametrize("over, field", [
    ({"task_params": {"text_strategy": "nope"}}, "task_params.text_strategy: unknown strategy 'nope'"),
    ({"task_params": {"text_strategy": "block"}}, "task_params.text_strategy: 'block' does not apply to token sequences"),
    ({"task_params": {"caption_completion": 0.7, "image_completion": 0.5}}, "caption_completion + image_completion"),
    ({"task_params": {"text_strategy": "span", "text_params": {"mean_len": -1}}}, "task_params.text_params"),
    ({"task_params": {"text_ratio": 1.5}}, "task_params.text_ratio"),
    ({"objective": {"norm_pix_loss": True}}, "objective.norm_pix_loss"),
    ({"model": {"arch": "mae_vit"}}, "model.arch"),
])
def test_config_errors_name_the_field(over, field):
    with pytest.raises(ConfigError, match=field.replace("+", r"\+").replace(".", r"\.").replace("(", r"\(")):
        cfg_of(**over)


def test_preflight_checks_both_grids(ws):
    assert check_run(cfg_of(), ws).name == "stamps"
    with pytest.raises(ConfigError, match="model.patch_size: 5 does not divide"):
        check_run(cfg_of(model={"patch_size": 5}), ws)
    with pytest.raises(ConfigError, match="task_params.text_ratio: random at ratio 0 masks 0"):
        check_run(cfg_of(task_params={"text_ratio": 0.0}), ws)


def test_cross_modal_completion_hides_a_whole_modality_and_shows_the_other_whole(ws):
    torch.manual_seed(0)
    task = build_task(cfg_of(task_params={"caption_completion": 1.0}), "cpu", ws)
    _, logs = task.train_loss(torch.arange(8), torch.Generator().manual_seed(1), 0.75)
    assert float(logs["text_mask_ratio"]) == 1.0 and float(logs["mask_ratio"]) == 0.0
    task = build_task(cfg_of(task_params={"caption_completion": 0.0, "image_completion": 1.0}), "cpu", ws)
    _, logs = task.train_loss(torch.arange(8), torch.Generator().manual_seed(1), 0.75)
    assert float(logs["mask_ratio"]) == 1.0 and float(logs["text_mask_ratio"]) == 0.0
    task = build_task(cfg_of(task_params={"caption_completion": 0.0}), "cpu", ws)  # joint masks only
    _, logs = task.train_loss(torch.arange(8), torch.Generator().manual_seed(1), 0.75)
    assert float(logs["mask_ratio"]) == 0.75 and 0.0 < float(logs["text_mask_ratio"]) < 1.0


@pytest.mark.parametrize("arch", ["m3ae", "flava"])
def test_hidden_tokens_and_the_partner_never_leak(ws, arch):
    """Hidden caption tokens are never embedded (changing them changes nothing); the contrastive
    caption embedding does not see the image, nor the image embedding the caption."""
    torch.manual_seed(0)
    task = build_task(cfg_of(model={"arch": arch}), "cpu", ws)
    m = task.model.eval()
    idx = torch.arange(6)
    xb = task.train_batch(idx)

    b = text_rows(task.train_enc, idx)
    ids, real = b["ids"], b["eligible"]
    img_mask = torch.zeros(6, m.num_patches, dtype=torch.bool)
    img_mask[:, ::3] = True
    scrambled = torch.where(real, torch.randint(5, task.tok.vocab_size, ids.shape), ids)
    with torch.no_grad():
        a = m(xb, ids, real, img_mask, real)
        c = m(xb, scrambled, real, img_mask, real)
        assert torch.allclose(a["pred"], c["pred"], atol=1e-6) and torch.allclose(a["logits"], c["logits"], atol=1e-6)
        assert not torch.equal(a["labels"], c["labels"])
        e1, e2 = m.embed_image(xb), m.embed_image(xb.flip(0))
        assert torch.allclose(e1.flip(0), e2, atol=1e-5)  # each image's embedding is its own
        t1 = m.embed_text(ids, real)
        t2 = m.embed_text(ids.flip(0), real.flip(0))
        assert torch.allclose(t1.flip(0), t2, atol=1e-5)


@pytest.mark.parametrize("extra", [
    {},
    {"objective": {"loss": "contrastive"}},
    {"masking": {"strategy": "block", "ratio": 0.5}, "task_params": {"text_strategy": "span", "text_ratio": 0.3},
     "objective": {"terms": [{"loss": "mse", "weight": 1.0}, {"loss": "cross_entropy", "weight": 1.0}]}},
    {"model": {"arch": "flava"}},
])
def test_a_run_trains_through_the_real_worker_and_store(ws, monkeypatch, extra):
    monkeypatch.setenv("MASKLAB_WORKSPACE", str(ws))
    cfg = cfg_of(**extra)
    run_id, d = create_run(cfg.to_dict(), ws)
    assert execute_run(d) == "completed", get_run(run_id, ws).error
    latest = get_run(run_id, ws).latest
    keys = ["loss", "val_loss", "val_caption_acc", "val_caption_blank_acc", "val_mse", "val_mse_no_caption",
            "val_t2i_r5", "val_i2t_r10", "baseline/position", "baseline/cca/t2i_r5", "baseline/chance/t2i_r5",
            "baseline/mean_image/mse", "mask_ratio", "text_mask_ratio"]
    names = [t.loss for t in cfg.objective.terms] or [cfg.objective.loss]
    keys += [f"loss/{n}" for n in names] if len(names) > 1 else []
    for k in keys:
        assert np.isfinite(latest[k]), k
    s = load_samples(run_id, workspace=ws)
    assert s.kind == "paired" and s["images"].shape == s["pred_img"].shape == s["pasted"].shape == (2, 3, 16, 16)
    assert s["mask"].shape == (2, 4, 4) and s["tokens"].shape == s["text_mask"].shape == s["pred_tokens"].shape
    hidden = s["text_mask"]
    assert (s["pred_tokens"][hidden] != "").all() and (s["pred_tokens"][~hidden] == "").all()
    real = (s["tokens"] != "") & ~np.isin(s["tokens"], ["[CLS]", "[SEP]"])
    assert ((s["caption_from_image"] != "") == real).all()  # every caption token predicted from the image
    assert len(s.meta["captions"]) == 2
    loaded = load_model(run_id, workspace=ws)  # rebuilt from task.json
    assert type(loaded.model).__name__ == {"m3ae": "M3AE", "flava": "FLAVA"}[cfg.model.arch]


def test_features_and_raw_features(ws):
    torch.manual_seed(0)
    task = build_task(cfg_of(), "cpu", ws)
    x, y = task.features("val")
    assert x.shape == (12, 256) and y.shape == (12,) and np.isfinite(x).all()
    (xt, yt), (xv, yv) = task.raw_features()
    assert xt.shape[0] == 36 and xv.shape[0] == 12 and xt.shape[1] == xv.shape[1] > 3 * 16 * 16


def test_example_config_passes_the_preflight_on_an_imported_set(ws):
    cfg = load_config(REPO / "configs/paired-tuxpaint.yaml", ["data.dataset=stamps"])
    assert cfg.task == "paired"
    assert check_run(cfg, ws).name == "stamps"
