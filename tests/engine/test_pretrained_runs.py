"""Runs that start from an imported model (``model.init_from``, :mod:`engine.pretrained.runs`).

One workspace for the module: the bundled ``digits`` (8x8 grey), the first 400 TREC questions, two
tiny ViTMAEs made by transformers (:mod:`tests.pretrained_image_checkpoints`): a norm-pix one (64x64
RGB, 16x16 patches) and a pixel one (32x32 RGB, 8x8 patches), and a tiny BERT with bert-base's
special-token layout (:mod:`tests.pretrained_text_checkpoints`), all imported. Each view run
(``train.steps`` 0, what :func:`~engine.pretrained.manage.view_config` makes) is trained once, through
the real worker, when a test first asks for it, and read by several tests; the norm-pix one and the
BERT's are evaluated at their end on 60 rows. What a view run must show is what the imported model
computes: its reconstructions, its pixel error, its fill-ins, its weights (also once the imported
folder is gone), beside a random init that is the architecture's, not the import. The refusals go
through the submit path's own pre-flight (:func:`engine.tasks.resolve` then
:func:`engine.tasks.checks.check_run`) and must name the field.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.eval.inference import checkpoint_steps, load_model
from engine.eval.job import evaluate_checkpoint
from engine.models.mae import MaskedAutoencoderViT
from engine.pretrained.image import predict_pixels
from engine.pretrained.importers import import_model
from engine.pretrained.manage import view_config
from engine.pretrained.predict import predict_text
from engine.pretrained.runs import fit_images, fit_note, random_init_, record
from engine.pretrained.store import load_pretrained
from engine.runner.launcher import resume
from engine.store import get_run, read_metrics, write_status
from engine.store.evaluations import ENCODERS, latest_evaluation
from engine.store.samples import load_samples
from engine.tasks import build_task, resolve
from engine.tasks.checks import check_run
from engine.tasks.text.inference import fill_in, tokenizer_of
from engine.workspace import read_json
from tests.engine.procs import wait_until
from tests.pretrained_image_checkpoints import MEAN, STD, hf_model, save_hf_folder
from tests.pretrained_text_checkpoints import make_checkpoint, vocab_of
from tests.runs import import_dataset
from tests.stamps import completed_run

MAE, BERT = "mae-np", "bert-tiny"
#: kind -> (imported name, hf_model arguments, image side, patch side, evaluated at its end).
IMAGE_VIEWS = {
    "norm-pix": (MAE, dict(seed=1, image_size=64, patch_size=16, num_hidden_layers=3, norm_pix_loss=True), 64, 16, True),
    "pixels": ("mae-px", dict(seed=2), 32, 8, False),
}
#: The end-of-run evaluation of the evaluated views: 60 rows, no t-SNE, a one-epoch fine-tune.
EVALUATION = {"max_rows": 60, "tsne_max_rows": 0, "finetune_epochs": 1, "budget": None}
NUM_VIS = 4
SENTENCES = ["what is the capital of [MASK] ?", "the cat [MASK] on the [MASK] ."]


@dataclass(frozen=True)
class ImageView:
    """A view run of an imported MAE on digits: its model's name, run id, input side and patch side."""

    name: str
    run_id: str
    side: int
    patch: int

    @property
    def grid(self) -> int:
        return self.side // self.patch


class Lab:
    """The module's workspace, its imported models and its image view runs (trained on first use)."""

    def __init__(self, root: Path, shared_data: Path):
        self.ws = root / "workspace"
        self.ws.mkdir()
        import_dataset("trec400", self.ws, shared_data)
        for name, kw, *_ in IMAGE_VIEWS.values():
            import_model(str(save_hf_folder(hf_model(**kw), root / name)), name, workspace=self.ws)
        import_model(str(make_checkpoint(root / BERT, layout="bertbase", seed=5)), BERT, workspace=self.ws)
        self._views: dict[str, ImageView] = {}

    def image_view(self, kind: str) -> ImageView:
        if kind not in self._views:
            name, _, side, patch, evaluate = IMAGE_VIEWS[kind]
            cfg = view_config(name, "digits", self.ws)
            cfg["train"]["num_vis"] = NUM_VIS
            cfg["evaluation"] = EVALUATION
            self._views[kind] = ImageView(name, completed_run(cfg, self.ws, evaluate=evaluate), side, patch)
        return self._views[kind]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, shared_data) -> Lab:
    return Lab(tmp_path_factory.mktemp("pretrained-runs"), shared_data)


@pytest.fixture(params=list(IMAGE_VIEWS))
def image_view(lab, request) -> ImageView:
    """Each imported MAE shown on digits (0 steps)."""
    return lab.image_view(request.param)


@pytest.fixture(scope="module")
def text_view(lab) -> str:
    """The BERT shown on TREC (0 steps), evaluated at its end: its run id."""
    cfg = view_config(BERT, "trec", lab.ws)
    cfg["train"]["num_vis"] = NUM_VIS
    cfg["evaluation"] = EVALUATION
    return completed_run(cfg, lab.ws, evaluate=True)


def without_models(ws: Path, dest: Path) -> Path:
    """A copy of workspace ``ws`` at ``dest`` without its ``models/`` (every imported model gone)."""
    shutil.copytree(ws, dest, ignore=lambda d, names: ["models"] if Path(d) == ws else [])
    assert not (dest / "models").exists()
    return dest


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    different = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not different, f"tensors that differ: {different}"


def preflight(cfg: dict, ws: Path) -> None:
    """What :func:`engine.runner.launcher.submit` checks before it creates a run."""
    check_run(resolve(RunConfig.from_dict(cfg)), ws)


# --------------------------------------------------------------------------- image view


def test_image_view_completes_at_step_0_with_the_imported_weights(lab, image_view):
    rec = get_run(image_view.run_id, lab.ws)
    assert (rec.status, rec.step, rec.total_steps) == ("completed", 0, 0), rec.error
    assert checkpoint_steps(image_view.run_id, lab.ws) == [0]
    imported, info = load_pretrained(image_view.name, lab.ws)
    loaded = load_model(image_view.run_id, None, lab.ws)
    assert loaded.step == 0
    assert_same_weights(loaded.model, imported)
    side = image_view.side
    task_info = read_json(rec.path / "task.json")
    assert task_info["model_dims"]["pretrained"] == record(info)
    assert task_info["image_shape"] == [3, side, side]
    assert task_info["input_fit"] == fit_note((1, 8, 8), (3, side, side))
    assert "8x8" in task_info["input_fit"] and f"{side}x{side}" in task_info["input_fit"]


def test_image_view_sample_is_the_imported_models_prediction(lab, image_view):
    """The reconstructions a view run saved at step 0 are :func:`predict_pixels` of the imported
    model on the same (fitted) images and masks: its processor's mean/std (and norm-pix) undone."""
    s = load_samples(image_view.run_id, 0, lab.ws)
    assert s is not None and s.step == 0 and s.kind == "image"
    images, mask = torch.from_numpy(s["images"]), torch.from_numpy(s["mask"])
    N, side, h, P = NUM_VIS, image_view.side, image_view.grid, image_view.patch
    assert images.shape == (N, 3, side, side) and mask.shape == (N, h, h)
    assert torch.equal(images[:, 0], images[:, 1]) and torch.equal(images[:, 0], images[:, 2])  # grey made RGB
    flat = mask.reshape(N, -1)
    assert flat.float().mean(dim=1).tolist() == [0.75] * N  # random masking at MAE's ratio
    model, info = load_pretrained(image_view.name, lab.ws)
    expected = predict_pixels(model, images, flat, info.preprocessing)
    torch.testing.assert_close(torch.from_numpy(s["pred_img"]), expected, atol=1e-5, rtol=0)
    # pasted: the original pixels where visible, the prediction where masked
    keep = (~mask).reshape(N, 1, h, 1, h, 1).expand(-1, 3, -1, P, -1, P).reshape(N, 3, side, side)
    pasted = torch.from_numpy(s["pasted"])
    assert torch.equal(pasted[keep], images[keep])
    torch.testing.assert_close(pasted[~keep], expected[~keep], atol=1e-5, rtol=0)


def test_image_view_loads_without_the_imported_folder(lab, image_view, tmp_path):
    """The run keeps its model's record in task.json: it loads, with its input normalisation, and
    reconstructs as it did, after the imported model is gone."""
    ws = without_models(lab.ws, tmp_path / "workspace")
    loaded = load_model(image_view.run_id, None, ws)
    imported, _ = load_pretrained(image_view.name, lab.ws)
    assert loaded.model.input_norm
    assert_same_weights(loaded.model, imported)
    s = load_samples(image_view.run_id, 0, ws)
    flat = torch.from_numpy(s["mask"]).reshape(NUM_VIS, -1)
    out = loaded.model.reconstruct(torch.from_numpy(s["images"]), flat)
    torch.testing.assert_close(out["pred_img"], torch.from_numpy(s["pred_img"]), atol=1e-5, rtol=0)


def test_pixel_view_val_mse_is_the_imported_models_pixel_error(lab):
    """A pixel (not norm-pix) MAE's ``val_mse`` at step 0 is the masked-pixel MSE of the imported
    model's prediction in pixels (:func:`predict_pixels`), not of its normalised units."""
    view = lab.image_view("pixels")
    cfg = RunConfig.from_dict(get_run(view.run_id, lab.ws).config)
    task = build_task(cfg, "cpu", lab.ws)  # the run's fixed validation images and masks
    model, info = load_pretrained(view.name, lab.ws)
    sse, count, i = 0.0, 0, 0
    for mask in task.eval_masks:  # [n, L] each, over consecutive chunks of x_eval
        x = task.x_eval[i : i + len(mask)]
        err = (predict_pixels(model, x, mask, info.preprocessing) - x).pow(2)  # (n, C, H, W)
        scored = model.unpatchify(mask.unsqueeze(-1).expand(-1, -1, view.patch**2 * 3).float()).bool()
        sse, count, i = sse + float(err[scored].sum()), count + int(scored.sum()), i + len(mask)
    assert i == len(task.x_eval)
    m = read_metrics([view.run_id], ["val_mse"], workspace=lab.ws)
    assert m["step"].tolist() == [0]
    assert m["value"].iloc[0] == pytest.approx(sse / count, rel=1e-4)


@pytest.mark.parametrize("kind", ["image", "text"])
def test_view_evaluation_compares_with_the_architectures_random_init(lab, kind, request):
    run_id = lab.image_view("norm-pix").run_id if kind == "image" else request.getfixturevalue("text_view")
    ev = latest_evaluation(run_id, lab.ws)
    assert ev is not None and ev.complete and ev.step == 0
    figures = ("probe_acc", "knn_acc", "kmeans_nmi", "kmeans_ari")
    for encoder in ENCODERS:
        assert set(figures) <= ev.representation[encoder].keys(), encoder
    # random_init is the architecture's own initialisation, not the imported weights (the run's step 0)
    assert ev.representation["trained"] != ev.representation["random_init"]
    assert ev.downstream.keys() == {"trained", "random_init"}


def _differ(a: dict, b: dict) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("kind", ["image", "text"])
def test_random_init_is_the_architectures_init_drawn_from_the_seed(lab, kind):
    name, dataset = (MAE, "digits") if kind == "image" else (BERT, "trec")
    task = build_task(resolve(RunConfig.from_dict(view_config(name, dataset, lab.ws))), "cpu", lab.ws)
    imported = {k: v.clone() for k, v in task.model.state_dict().items()}
    rng = torch.get_rng_state()
    states = []
    for seed in (0, 0, 1):
        assert random_init_(task, seed)
        states.append({k: v.clone() for k, v in task.model.state_dict().items()})
    assert torch.equal(torch.get_rng_state(), rng)  # the global RNG is left as it was
    assert not _differ(states[0], states[1]) and _differ(states[0], imported)
    assert _differ(states[0], states[2]), "random_init_ gave the same weights for seeds 0 and 1"


def test_random_init_leaves_a_run_without_init_from_alone(lab):
    cfg = resolve(RunConfig.from_dict({"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2}}))
    task = build_task(cfg, "cpu", lab.ws)
    before = {k: v.clone() for k, v in task.model.state_dict().items()}
    assert random_init_(task, 1) is False
    assert not _differ(before, task.model.state_dict())


# --------------------------------------------------------------------------- text view


def test_text_view_completes_with_the_models_own_tokenizer(lab, text_view):
    rec = get_run(text_view, lab.ws)
    assert (rec.status, rec.step) == ("completed", 0), rec.error
    assert checkpoint_steps(text_view, lab.ws) == [0]
    loaded = load_model(text_view, None, lab.ws)
    imported, info = load_pretrained(BERT, lab.ws)
    assert_same_weights(loaded.model, imported)
    assert loaded.info["tokenizer_id"].startswith("pt-")
    assert loaded.info["vocab_size"] == len(vocab_of("bertbase"))
    assert loaded.info["model_dims"]["pretrained"] == record(info)
    tok = tokenizer_of(loaded, lab.ws)
    assert [tok.id_to_token(i) for i in (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id)] == \
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)


def expected_fill_in(text: str, ws: Path, specials: set[str], k: int) -> list[list[tuple[str, float]]]:
    """The imported model's top ``k`` non-special tokens at each [MASK]: predict_text over the whole
    vocabulary (it ranks special tokens too; the fill-in box leaves them out, without renormalising)."""
    V = len(vocab_of("bertbase"))
    out = []
    for m in predict_text(BERT, text, top_k=V, workspace=ws):
        pairs = [(t, p) for t, p in zip(m["tokens"], m["probs"]) if t not in specials]
        out.append(pairs[:k])
    return out


@pytest.mark.parametrize("gone", [False, True], ids=["imported", "imported-folder-deleted"])
def test_text_view_fills_in_as_the_imported_model(lab, text_view, tmp_path, gone):
    """fill_in of the view run gives the imported model's tokens and probabilities, in order; also
    once the imported folder is gone (the run's tokenizer is cached by its id)."""
    ws = without_models(lab.ws, tmp_path / "workspace") if gone else lab.ws
    loaded = load_model(text_view, None, ws)
    tok = tokenizer_of(loaded, ws)
    specials = {tok.id_to_token(i) for i in tok.special_ids}
    for text in SENTENCES:
        got = fill_in(loaded, text, workspace=ws)
        want = expected_fill_in(text, lab.ws, specials, k=len(got[0].candidates))
        assert len(got) == text.count("[MASK]") == len(want)
        for g, w in zip(got, want):
            assert [t for t, _ in g.candidates] == [t for t, _ in w], text
            np.testing.assert_allclose([p for _, p in g.candidates], [p for _, p in w], atol=1e-6, rtol=0)


# --------------------------------------------------------------------------- refusals


def test_view_configs_pass_the_preflight(lab):
    preflight(view_config(MAE, "digits", lab.ws), lab.ws)
    preflight(view_config(BERT, "trec", lab.ws), lab.ws)
    # a strategy that probes real images: the digits fitted to the model's 64x64
    preflight({**view_config(MAE, "digits", lab.ws), "masking": {"strategy": "superpixel"}}, lab.ws)


def _image(**changes) -> dict:
    return {"task": "image_mim", "data": {"dataset": "digits"}, "model": {"init_from": MAE, "patch_size": 16},
            "objective": {"norm_pix_loss": True}, "masking": {"strategy": "random", "ratio": 0.75}, **changes}


def _text(**changes) -> dict:
    return {"task": "text_mlm", "data": {"dataset": "trec", "tokenizer": {"max_len": 40}},
            "model": {"init_from": BERT}, "masking": {"strategy": "random", "ratio": 0.15}, **changes}


REFUSALS = {  # name: (config, the field the message starts with, what else it must say)
    "unknown-model-image": (_image(model={"init_from": "nope", "patch_size": 16}), "model.init_from",
                            ["'nope'", MAE, BERT]),
    "unknown-model-text": (_text(model={"init_from": "nope"}), "model.init_from", ["'nope'"]),
    "image-model-on-text": (_text(model={"init_from": MAE}), "model.init_from", [MAE, "image", "text"]),
    "text-model-on-images": (_image(model={"init_from": BERT, "patch_size": 16}), "model.init_from", [BERT, "text"]),
    "patch-size": (_image(model={"init_from": MAE, "patch_size": 8}), "model.patch_size", ["set model.patch_size to 16"]),
    "norm-pix": (_image(objective={"norm_pix_loss": False}), "objective.norm_pix_loss", ["true"]),
    "arch": (_image(model={"init_from": MAE, "patch_size": 16, "arch": "simmim_vit"}), "model.arch", ["mae_vit"]),
    "audio-task": ({"task": "audio_mae", "data": {"dataset": "digits"}, "model": {"init_from": MAE}},
                   "model.init_from", ["audio_mae"]),
    "span-task": ({"task": "text_span", "data": {"dataset": "trec"}, "model": {"init_from": BERT}},
                  "model.init_from", ["text_span"]),
    "max-len": (_text(data={"dataset": "trec", "tokenizer": {"max_len": 41}}), "data.tokenizer.max_len",
                ["at most 40"]),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_preflight_refusals_name_the_field(lab, case):
    cfg, field, says = REFUSALS[case]
    with pytest.raises(ConfigError) as e:
        preflight(cfg, lab.ws)
    msg = str(e.value).removeprefix("invalid run config: ")  # resolve's prefix (engine.tasks.resolve)
    assert msg.startswith(f"{field}:"), msg
    for part in says:
        assert part in msg, msg


def test_view_config_of_an_unknown_model_names_the_field(lab):
    with pytest.raises(ConfigError, match=r"^model\.init_from:"):
        view_config("nope", "digits", lab.ws)


# --------------------------------------------------------------------------- 0 steps, no import


def test_zero_step_run_without_init_from_keeps_its_initial_model(workspace):
    cfg = {"name": "zero", "model": {"preset": "tiny", "patch_size": 2},
           "train": {"steps": 0, "batch_size": 32, "num_vis": 2, "device": "cpu"}}
    run_id = completed_run(cfg, workspace, evaluate=False)
    rec = get_run(run_id, workspace)
    assert (rec.status, rec.step) == ("completed", 0), rec.error
    assert checkpoint_steps(run_id, workspace) == [0]
    assert load_samples(run_id, 0, workspace) is not None
    # the checkpoint is the model as the run built it from train.seed (nothing trained)
    resolved = RunConfig.from_dict(rec.config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(resolved.train.seed)
        initial = build_task(resolved, "cpu", workspace).model
    assert_same_weights(load_model(run_id, None, workspace).model, initial)


# --------------------------------------------------------------------------- fit_images / fit_note


def _uint8(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def test_fit_images_grey_to_larger_rgb_is_pillow_lanczos_repeated():
    a = _uint8((3, 8, 8), 0)
    x = torch.from_numpy(a).float().div(255).unsqueeze(1)  # (N, 1, 8, 8)
    got = fit_images(x, (3, 16, 16))
    want = np.stack([np.asarray(Image.fromarray(im, "L").resize((16, 16), Image.Resampling.LANCZOS)) for im in a])
    want = torch.from_numpy(want).float().div(255).unsqueeze(1).expand(-1, 3, -1, -1)
    assert got.shape == (3, 3, 16, 16) and got.dtype == torch.float32
    assert torch.equal(got, want)


def test_fit_images_rgb_to_grey_is_pillow_luma():
    a = _uint8((2, 8, 8, 3), 1)
    x = torch.from_numpy(a).permute(0, 3, 1, 2).float().div(255)  # (N, 3, 8, 8)
    got = fit_images(x, (1, 8, 8))
    want = np.stack([np.asarray(Image.fromarray(im, "RGB").convert("L")) for im in a])
    assert torch.equal(got, torch.from_numpy(want).float().div(255).unsqueeze(1))


def test_fit_images_leaves_images_of_the_models_shape_alone():
    x = torch.rand(2, 3, 8, 8)
    assert fit_images(x, (3, 8, 8)) is x


def test_fit_note():
    assert fit_note((3, 64, 64), (3, 64, 64)) == ""
    note = fit_note((1, 8, 8), (3, 16, 16))
    assert "8x8" in note and "16x16" in note and "grey" in note and "aspect" not in note
    assert "resized" not in fit_note((3, 8, 8), (1, 8, 8)) and "grey" in fit_note((3, 8, 8), (1, 8, 8))
    assert "aspect ratio not kept" in fit_note((1, 8, 16), (1, 16, 16))


# --------------------------------------------------------------------------- the MAE's input normalisation


def _mae(norm_pix: bool, **norm) -> MaskedAutoencoderViT:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return MaskedAutoencoderViT(img_size=(16, 16), in_chans=3, patch_size=4, embed_dim=32, depth=1, num_heads=2,
                                    decoder_embed_dim=16, decoder_depth=1, decoder_num_heads=2,
                                    norm_pix_loss=norm_pix, **norm).eval()


@pytest.mark.parametrize("norm_pix", [False, True], ids=["pixels", "norm-pix"])
def test_input_normalisation_reconstructs_as_predict_pixels(norm_pix):
    """An MAE with ``input_mean``/``input_std`` reconstructs what :func:`predict_pixels` computes with
    the same weights and no normalisation inside the model (the import's path)."""
    plain = _mae(norm_pix)
    normed = _mae(norm_pix, input_mean=MEAN, input_std=STD)
    with torch.no_grad():  # weights off their init, the same in both
        for p in plain.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    normed.load_state_dict(plain.state_dict())
    g = torch.Generator().manual_seed(3)
    x = torch.rand(4, 3, 16, 16, generator=g)
    mask = torch.rand(4, 16, generator=g).argsort(dim=1) < 12  # 12 of 16 patches masked per row
    out = normed.reconstruct(x, mask)
    want = predict_pixels(plain, x, mask, {"mean": MEAN, "std": STD})
    torch.testing.assert_close(out["pred_img"], want, atol=1e-5, rtol=0)
    keep = ~normed.unpatchify(mask.unsqueeze(-1).expand(-1, -1, 4 * 4 * 3).float()).bool()
    assert torch.equal(out["pasted"][keep], x[keep])  # visible patches: the pixels, not their normalised values


def test_input_normalisation_keeps_the_state_dict_keys():
    plain, normed = _mae(False), _mae(False, input_mean=MEAN, input_std=STD)
    assert not plain.input_norm and normed.input_norm
    assert plain.state_dict().keys() == normed.state_dict().keys()
    assert not [k for k in plain.state_dict() if k.startswith("input_")]
    x = torch.rand(2, 3, 16, 16)
    assert torch.equal(plain.normalize_input(x), x) and torch.equal(plain.to_pixels(x), x)
    torch.testing.assert_close(normed.to_pixels(normed.normalize_input(x)), x)


def test_a_run_outlives_its_imported_model_evaluated_and_resumed(lab, tmp_path):
    """With the imported model deleted, a run from it is still evaluated (its random init drawn from
    its architecture, not looked up) and resumed: the run's task.json holds what it started from."""
    name, kw, *_ = IMAGE_VIEWS["pixels"]
    cfg = view_config(name, "digits", lab.ws)
    cfg.update(name="short fork", evaluation={"auto": False, **EVALUATION},
               train={"steps": 2, "batch_size": 16, "eval_interval": 2, "checkpoint_interval": 2, "num_vis": 2,
                      "warmup_steps": 1, "device": "cpu", "num_threads": 1})
    run_id = completed_run(cfg, lab.ws, evaluate=False)
    ws = without_models(lab.ws, tmp_path / "ws")
    run_dir = get_run(run_id, ws).path
    started = read_json(run_dir / "task.json")["init"]

    ev, _ = evaluate_checkpoint(run_dir, workspace=ws)
    assert ev.representation["trained"] != ev.representation["random_init"]

    write_status(run_dir, {**read_json(run_dir / "status.json"), "status": "failed"})  # as a crash leaves it
    assert resume(run_id, ["train.steps=3"], ws) == 2
    wait_until(lambda: get_run(run_id, ws).status in ("completed", "failed"), 120, "the resumed run to end")
    rec = get_run(run_id, ws)
    assert (rec.status, rec.step) == ("completed", 3), rec.error
    assert read_json(run_dir / "task.json")["init"] == started  # what it started from, not the resume's view
