"""Imported MAE checkpoints (issue 32, image half): masklab's prediction equals transformers' own.

The checkpoints are made here with transformers from tiny random configs, every tensor moved away
from its initialisation (tests/pretrained_image_checkpoints.py): a ``save_pretrained`` folder of
``ViTMAEForPreTraining`` and of ``ViTMAEModel``, and the same weights in the MAE repository's
``.pth`` layout. Predictions are compared on the same images and masks, float32 on the CPU.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.cli import main as cli_main
from engine.eval.inference import load_model
from engine.models.mae import MaskedAutoencoderViT
from engine.pretrained.image import MAE_PRESETS, normalize
from engine.pretrained.importers import import_model
from engine.pretrained.importers.mae_pth import infer_arch
from engine.pretrained.predict import predict_images
from engine.pretrained.predict_image import predict_images as predict_in
from engine.pretrained.store import PretrainedError, get_pretrained, load_pretrained, models_root
from tests.pretrained_image_checkpoints import (
    MEAN,
    STD,
    ViTMAEForPreTraining,
    ViTMAEModel,
    hf_model,
    hf_prediction,
    mae_state_dict,
    noise_for,
    save_hf_folder,
    save_mae_pth,
    set_kept,
)

TOL = 1e-5
HEADS = {"num_heads": 4, "decoder_num_heads": 4}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """HF folders and .pth files: ``plain`` (32x32, patch 8, no norm-pix), ``normpix`` (64x64, patch
    16, norm_pix_loss, 3 layers), ``encoder`` (a ViTMAEModel)."""
    root = tmp_path_factory.mktemp("mae-ckpts")
    plain = hf_model(seed=0)
    normpix = hf_model(seed=1, image_size=64, patch_size=16, num_hidden_layers=3, norm_pix_loss=True)
    encoder = hf_model(ViTMAEModel, seed=2)
    return {
        "plain": plain, "normpix": normpix, "encoder": encoder,
        "plain_dir": save_hf_folder(plain, root / "plain"),
        "normpix_dir": save_hf_folder(normpix, root / "normpix"),
        "encoder_dir": save_hf_folder(encoder, root / "encoder"),
        "normpix_pth": save_mae_pth(mae_state_dict(normpix), root / "normpix.pth"),
        "plain_pth": save_mae_pth(mae_state_dict(plain), root / "plain.pth"),
        "root": root,
    }


def inputs(model, B=3, seed=0, n_masked=None):
    """Images ``[B, C, H, W]`` in [0, 1] and a mask ``[B, L]`` with ``n_masked`` (3/4 by default)
    patches masked in every row, each row its own patches."""
    cfg = model.config
    L = (cfg.image_size // cfg.patch_size) ** 2
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(B, cfg.num_channels, cfg.image_size, cfg.image_size, generator=g)
    n = 3 * L // 4 if n_masked is None else n_masked
    mask = torch.zeros(B, L, dtype=torch.bool)
    for b in range(B):
        mask[b, torch.randperm(L, generator=g)[:n]] = True
    return images, mask


def nothing_registered(workspace) -> bool:
    root = models_root(workspace)
    return not root.exists() or not [p for p in root.iterdir()]


# --- the acceptance: masklab's prediction equals transformers' -----------------------------------


@pytest.mark.parametrize("which", ["plain", "normpix"])
def test_hf_folder_prediction_equals_transformers(ckpts, workspace, which):
    hf = ckpts[which]
    info = import_model(str(ckpts[f"{which}_dir"]), which)
    assert info.preprocessing["mean"] == pytest.approx(MEAN) and info.preprocessing["std"] == pytest.approx(STD)
    assert info.arch_config["norm_pix_loss"] is hf.config.norm_pix_loss
    assert info.arch_config["layer_norm_eps"] == 1e-6
    assert (info.arch_config["mlp_hidden_dim"], info.arch_config["decoder_mlp_hidden_dim"]) == (96, 80)
    assert info.source["fresh"] == [] and info.source["ignored"] == []
    for n_masked in (None, 0, 5):  # 3/4 masked; none; a few
        images, mask = inputs(hf, n_masked=n_masked)
        want = hf_prediction(hf, images, mask, MEAN, STD)
        got = predict_images(which, images.numpy(), mask.numpy())
        assert got.dtype == np.float32 and got.shape == tuple(images.shape)
        assert ((got > 0) & (got < 1)).mean() > 0.9 and got.std() > 0.01  # not a comparison of clamped constants
        diff = float(np.abs(got - want.numpy()).max())
        print(f"HF folder {which}, {int(mask[0].sum())} masked: max |masklab - transformers| = {diff:.2e}")
        assert diff < TOL


def test_mae_pth_prediction_equals_transformers_and_the_hf_folder(ckpts, workspace):
    hf = ckpts["normpix"]  # a .pth's norm_pix_loss is taken as True, as the released checkpoints'
    info = import_model(str(ckpts["normpix_pth"]), "pth", {**HEADS, "image_mean": MEAN, "image_std": STD})
    assert info.source["format"] == "mae_pth" and info.arch_config["norm_pix_loss"] is True
    assert any("norm_pix_loss taken as True" in n for n in info.source["notes"])
    assert info.arch_config["img_size"] == [64, 64] and info.arch_config["patch_size"] == 16
    assert (info.arch_config["depth"], info.arch_config["decoder_depth"]) == (3, 2)
    import_model(str(ckpts["normpix_dir"]), "hf")
    images, mask = inputs(hf, seed=1)
    want = hf_prediction(hf, images, mask, MEAN, STD)
    got = predict_images("pth", images.numpy(), mask.numpy())
    diff = float(np.abs(got - want.numpy()).max())
    print(f".pth: max |masklab - transformers| = {diff:.2e}")
    assert diff < TOL
    assert float(np.abs(got - predict_images("hf", images.numpy(), mask.numpy())).max()) < TOL
    # the same weights under masklab's names, whichever file they came from
    a, b = load_pretrained("pth")[0].state_dict(), load_pretrained("hf")[0].state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_pth_defaults_to_imagenet_normalisation(ckpts, workspace):
    info = import_model(str(ckpts["plain_pth"]), "pth", HEADS)
    assert info.preprocessing == {"size": [32, 32], "channels": 3, "mean": [0.485, 0.456, 0.406],
                                  "std": [0.229, 0.224, 0.225]}
    assert any("ImageNet" in n for n in info.source["notes"])


def test_rows_with_different_mask_counts(ckpts, workspace):
    """masklab pads ragged rows (transformers cannot take them): each row equals its own prediction alone."""
    import_model(str(ckpts["plain_dir"]), "m")
    images, mask = inputs(ckpts["plain"], B=2)
    mask[1, :] = False
    mask[1, :3] = True
    both = predict_images("m", images.numpy(), mask.numpy())
    for b in range(2):
        one = predict_images("m", images[b:b + 1].numpy(), mask[b:b + 1].numpy())
        assert np.abs(both[b:b + 1] - one).max() < TOL


def test_cli_import_and_predict(ckpts, workspace, tmp_path, capsys):
    hf = ckpts["plain"]
    assert cli_main(["models", "import", str(ckpts["plain_dir"]), "--name", "cli-mae"]) == 0
    images, mask = inputs(hf, seed=3)
    np.save(tmp_path / "x.npy", images.numpy())
    np.save(tmp_path / "m.npy", mask.numpy())
    out = tmp_path / "y.npy"
    args = ["predict", "cli-mae", "--images", str(tmp_path / "x.npy"), "--mask", str(tmp_path / "m.npy"),
            "--out", str(out)]
    assert cli_main(args) == 0
    assert np.abs(np.load(out) - hf_prediction(hf, images, mask, MEAN, STD).numpy()).max() < TOL
    np.save(tmp_path / "m.npy", mask.numpy()[:, :-1])
    capsys.readouterr()
    assert cli_main(args) == 2
    assert "takes [B, L] = [3, 16]" in capsys.readouterr().err


# --- encoder only: a fresh decoder, said so; the encoder is transformers' --------------------------


def test_vitmae_model_gets_a_fresh_decoder_and_its_encoder_equals_transformers(ckpts, workspace):
    hf = ckpts["encoder"]
    info = import_model(str(ckpts["encoder_dir"]), "enc")
    assert info.source["fresh"] == ["decoder"] and info.source["architecture"] == "ViTMAEModel"
    assert any("freshly initialised" in n for n in info.source["notes"])
    model, info = load_pretrained("enc")
    images, mask = inputs(hf, seed=4)
    x = normalize(images, info.preprocessing)
    L = mask.shape[1]
    with torch.no_grad():
        # nothing masked: the whole sequence, and the pooled features probes read
        set_kept(hf, L, L)
        ref = hf(pixel_values=x, noise=torch.arange(L, dtype=torch.float32).expand(len(x), L)).last_hidden_state
        latent, _, _ = model.forward_encoder(x, torch.zeros_like(mask))
        assert (latent - ref).abs().max() < TOL
        assert (model.features(x) - ref[:, 1:].mean(dim=1)).abs().max() < TOL
        # masked: transformers keeps the visible patches in the order of its noise (here: position order)
        set_kept(hf, int((~mask[0]).sum()), L)
        noise = mask.float() + 0.5 * torch.arange(L, dtype=torch.float32) / L
        ref = hf(pixel_values=x, noise=noise).last_hidden_state
        latent, _, _ = model.forward_encoder(x, mask)
        assert (latent - ref).abs().max() < TOL
    # the fresh decoder is MAE's init at a fixed seed: the same on every import
    import_model(str(ckpts["encoder_dir"]), "enc2")
    a, b = model.state_dict(), load_pretrained("enc2")[0].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert predict_images("enc", images.numpy(), mask.numpy()).shape == tuple(images.shape)


def test_pth_encoder_only_release_gets_mae_default_decoder(ckpts, workspace):
    """A ``mae_pretrain_*``-style file (no decoder tensors): MAE's default decoder, 512 wide, 8 deep, 16 heads."""
    sd = {k: v for k, v in mae_state_dict(ckpts["plain"]).items()
          if not (k.startswith("decoder_") or k == "mask_token")}
    file = save_mae_pth(sd, ckpts["root"] / "mae_pretrain_tiny.pth")
    info = import_model(str(file), "enc-pth", {"num_heads": 4})
    c = info.arch_config
    assert (c["decoder_embed_dim"], c["decoder_depth"], c["decoder_num_heads"]) == (512, 8, 16)
    assert info.source["fresh"] == ["decoder"] and any("decoder" in n for n in info.source["notes"])
    model = load_pretrained("enc-pth")[0]
    hf_sd = mae_state_dict(ckpts["plain"])
    assert torch.equal(model.state_dict()["blocks.1.attn.qkv.weight"], hf_sd["blocks.1.attn.qkv.weight"])


@pytest.mark.parametrize("name", list(MAE_PRESETS))
def test_released_presets_give_head_counts(name):
    """Head counts from the released presets' shapes (meta tensors: the shapes without the weights)."""
    p = MAE_PRESETS[name]
    D, P, depth = p["embed_dim"], p["patch_size"], p["depth"]
    g = 224 // P
    meta = {"patch_embed.proj.weight": torch.empty(D, 3, P, P, device="meta"),
            "pos_embed": torch.empty(1, g * g + 1, D, device="meta"),
            "blocks.0.mlp.fc1.weight": torch.empty(4 * D, D, device="meta"),
            **{f"blocks.{i}.norm1.weight": torch.empty(D, device="meta") for i in range(depth)}}
    c, notes, fresh = infer_arch("mae_pretrain.pth", meta, {})
    assert (c["num_heads"], c["img_size"], c["depth"]) == (p["num_heads"], [224, 224], depth)
    assert fresh and (c["decoder_embed_dim"], c["decoder_depth"], c["decoder_num_heads"]) == (512, 8, 16)
    full = {**meta, "decoder_embed.weight": torch.empty(512, D, device="meta"),
            "decoder_blocks.0.mlp.fc1.weight": torch.empty(2048, 512, device="meta"),
            **{f"decoder_blocks.{i}.norm1.weight": torch.empty(512, device="meta") for i in range(8)}}
    c, _, fresh = infer_arch("mae_visualize.pth", full, {})
    assert not fresh and (c["num_heads"], c["decoder_num_heads"], c["decoder_mlp_hidden_dim"]) == (p["num_heads"], 16, 2048)


@pytest.mark.parametrize("style", ["hub", "modules"])
def test_hf_tensor_naming_styles(ckpts, workspace, tmp_path, style):
    """The Hub's names (``decoder.decoder_layers.N.attention.attention.query``) and transformers 5's
    module names (``vit.layers.N.attention.q_proj``) give the same model as what save_pretrained wrote."""
    src = ckpts["plain_dir"]
    folder = tmp_path / style
    folder.mkdir()
    for f in ("config.json", "preprocessor_config.json"):
        (folder / f).write_bytes((src / f).read_bytes())
    if style == "hub":
        sd = {k.replace("decoder.decoder_encoder.layer.", "decoder.decoder_layers."): v
              for k, v in load_file(str(src / "model.safetensors")).items()}
        assert any(k.startswith("decoder.decoder_layers.0.attention.attention.query") for k in sd)
    else:
        sd = {k: v.contiguous() for k, v in ckpts["plain"].state_dict().items()}
        assert "vit.layers.0.attention.q_proj.weight" in sd
    save_file(sd, str(folder / "model.safetensors"))
    import_model(str(folder), style)
    import_model(str(src), "saved")
    a, b = load_pretrained(style)[0].state_dict(), load_pretrained("saved")[0].state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- ignored head tensors ---------------------------------------------------------------------------


def test_unused_head_tensors_are_ignored_and_listed(ckpts, workspace, tmp_path):
    src = ckpts["plain_dir"]
    folder = tmp_path / "with-heads"
    folder.mkdir()
    for f in ("config.json", "preprocessor_config.json"):
        (folder / f).write_bytes((src / f).read_bytes())
    sd = load_file(str(src / "model.safetensors"))
    extra = {"vit.pooler.dense.weight": torch.randn(64, 64), "vit.pooler.dense.bias": torch.randn(64),
             "vit.embeddings.position_ids": torch.arange(17)[None]}
    save_file({**sd, **extra}, str(folder / "model.safetensors"))
    info = import_model(str(folder), "heads")
    assert info.source["ignored"] == sorted(extra)
    images, mask = inputs(ckpts["plain"])
    assert np.abs(predict_images("heads", images.numpy(), mask.numpy())
                  - hf_prediction(ckpts["plain"], images, mask, MEAN, STD).numpy()).max() < TOL
    pth = save_mae_pth({**mae_state_dict(ckpts["plain"]), "head.weight": torch.randn(10, 64),
                        "head.bias": torch.randn(10), "fc_norm.weight": torch.randn(64)}, tmp_path / "ft.pth")
    assert import_model(str(pth), "heads-pth", HEADS).source["ignored"] == ["fc_norm.weight", "head.bias",
                                                                            "head.weight"]


# --- refusals: named, and nothing registered --------------------------------------------------------


class NeedsCode:
    """Stands for the ``argparse.Namespace`` of a training checkpoint: not loadable as weights only."""

    def __init__(self):
        self.lr = 1.5e-4


def _hf_variant(ckpts, tmp_path, edit_weights=None, edit_config=None):
    src, folder = ckpts["plain_dir"], tmp_path / "variant"
    folder.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(edit_config(cfg) if edit_config else cfg))
    sd = load_file(str(src / "model.safetensors"))
    save_file(edit_weights(sd) if edit_weights else sd, str(folder / "model.safetensors"))
    return folder


def _drop(key):
    return lambda sd: {k: v for k, v in sd.items() if k != key}


def _set(key, value):
    return lambda sd: {**sd, key: value}


HF_REFUSALS = {
    "missing tensor": (dict(edit_weights=_drop("vit.encoder.layer.1.output.dense.weight")),
                       ["missing tensor vit.encoder.layer.1.output.dense.weight"]),
    "missing key of q,k,v": (dict(edit_weights=_drop("decoder.decoder_encoder.layer.0.attention.attention.key.bias")),
                             ["missing tensor decoder.decoder_encoder.layer.0.attention.attention.key.bias"]),
    "wrong shape": (dict(edit_weights=_set("decoder.decoder_pred.bias", torch.zeros(191))),
                    ["decoder.decoder_pred.bias", "[191]", "[192]"]),
    "unknown tensor": (dict(edit_weights=_set("vit.encoder.layer.0.attention.extra.weight", torch.zeros(4))),
                       ["vit.encoder.layer.0.attention.extra.weight", "fits nowhere"]),
    "block past the depth": (dict(edit_weights=_set("vit.encoder.layer.2.layernorm_before.weight", torch.ones(64))),
                             ["vit.encoder.layer.2.layernorm_before.weight", "fits nowhere"]),
    "unknown model_type": (dict(edit_config=lambda c: {**c, "model_type": "vit_msn"}), ["model_type 'vit_msn'"]),
    "unknown architecture": (dict(edit_config=lambda c: {**c, "architectures": ["ViTMAEForImageClassification"]}),
                             ["unknown architecture", "ViTMAEForImageClassification"]),
    "heads not dividing": (dict(edit_config=lambda c: {**c, "num_attention_heads": 5}),
                           ["num_attention_heads 5 does not divide the encoder width 64"]),
}


@pytest.mark.parametrize("case", list(HF_REFUSALS))
def test_hf_folder_refusals(ckpts, workspace, tmp_path, case):
    edits, says = HF_REFUSALS[case]
    folder = _hf_variant(ckpts, tmp_path, **edits)
    with pytest.raises(PretrainedError) as e:
        import_model(str(folder), "bad")
    for s in says:
        assert s in str(e.value)
    assert str(folder) in str(e.value)
    assert nothing_registered(workspace)


PTH_REFUSALS = {
    "missing tensor": (lambda sd: {k: v for k, v in sd.items() if k != "decoder_norm.weight"}, HEADS,
                       ["missing tensor decoder_norm.weight"]),
    "wrong shape": (lambda sd: {**sd, "blocks.1.attn.qkv.bias": torch.zeros(190)}, HEADS,
                    ["blocks.1.attn.qkv.bias", "[190]", "[192]"]),
    "unknown tensor": (lambda sd: {**sd, "blocks.0.attn.rel_pos": torch.zeros(3)}, HEADS,
                       ["blocks.0.attn.rel_pos", "fits nowhere"]),
    "no preset, no --num-heads": (None, {}, ["--num-heads N", "--decoder-num-heads N"]),
    "no preset, no --decoder-num-heads": (None, {"num_heads": 4}, ["--decoder-num-heads N"]),
    "--num-heads not dividing": (None, {"num_heads": 5, "decoder_num_heads": 4},
                                 ["--num-heads 5 does not divide the encoder width 64"]),
    "--decoder-num-heads not dividing": (None, {"num_heads": 4, "decoder_num_heads": 3},
                                         ["--decoder-num-heads 3 does not divide the decoder width 32"]),
    "needs code to load": (lambda sd: {"model": sd, "args": NeedsCode()}, HEADS, ["needs code to load",
                                                                                   "weights_only=True"]),
}


@pytest.mark.parametrize("case", list(PTH_REFUSALS))
def test_mae_pth_refusals(ckpts, workspace, tmp_path, case):
    edit, options, says = PTH_REFUSALS[case]
    sd = mae_state_dict(ckpts["plain"])
    obj = edit(sd) if edit else sd
    file = tmp_path / "bad.pth"
    torch.save(obj if "model" in obj else {"model": obj}, file)
    with pytest.raises(PretrainedError) as e:
        import_model(str(file), "bad", options)
    for s in says:
        assert s in str(e.value)
    assert str(file) in str(e.value)
    assert nothing_registered(workspace)


def test_needs_code_is_refused_without_running_it(ckpts, workspace, tmp_path):
    """weights_only refuses before any object of the pickle is built."""
    file = tmp_path / "evil.pth"
    torch.save({"model": mae_state_dict(ckpts["plain"]), "x": NeedsCode()}, file)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(file, weights_only=True)
    with pytest.raises(PretrainedError, match="needs code to load"):
        import_model(str(file), "bad", HEADS)


# --- predict: shapes named; the model itself -------------------------------------------------------


def test_predict_names_the_shapes_expected(ckpts, workspace):
    import_model(str(ckpts["plain_dir"]), "m")
    images, mask = inputs(ckpts["plain"], B=2)
    with pytest.raises(PretrainedError, match=r"takes \[B, 3, 32, 32\]"):
        predict_images("m", images[:, :, :16].numpy(), mask.numpy())
    with pytest.raises(PretrainedError, match=r"takes \[B, L\] = \[2, 16\]"):
        predict_images("m", images.numpy(), mask.reshape(2, 4, 4).numpy())
    with pytest.raises(PretrainedError, match=r"in \[0, 1\]"):
        predict_images("m", (images * 255).numpy(), mask.numpy())
    with pytest.raises(PretrainedError, match="no imported model or run named 'nope'"):
        predict_images("nope", images.numpy(), mask.numpy())
    assert get_pretrained("m").arch == "mae_vit"


def test_predict_from_a_run_is_its_reconstruction(shared_runs):
    """A run id: its checkpoint's ``reconstruct`` on [0, 1] pixels (no mean/std), every patch predicted."""
    run = shared_runs.get("image_mae")
    loaded = load_model(run.run_id, workspace=run.workspace)
    m = loaded.model
    g = torch.Generator().manual_seed(0)
    images = torch.rand(2, m.in_chans, *m.img_size, generator=g)
    mask = torch.rand(2, m.num_patches, generator=g) < 0.6  # rows of different counts
    got = predict_in(run.run_id, images.numpy(), mask.numpy(), workspace=run.workspace)
    assert np.array_equal(got, m.reconstruct(images, mask)["pred_img"].numpy())
    with pytest.raises(PretrainedError, match=r"takes \[B, L\]"):
        predict_in(run.run_id, images.numpy(), mask[:, 1:].numpy(), workspace=run.workspace)


def test_model_defaults_keep_existing_state_dicts():
    """Every run's model keeps its keys (no positional embeddings stored) and its LayerNorm/MLP sizes."""
    kw = dict(img_size=(8, 8), in_chans=1, patch_size=2, embed_dim=16, depth=1, num_heads=2, decoder_embed_dim=8,
              decoder_depth=1, decoder_num_heads=2)
    m = MaskedAutoencoderViT(**kw)
    sd = m.state_dict()
    assert "pos_embed" not in sd and "decoder_pos_embed" not in sd
    assert sd["blocks.0.mlp.fc1.weight"].shape == (64, 16) and sd["decoder_blocks.0.mlp.fc1.weight"].shape == (32, 8)
    assert m.norm.eps == m.blocks[0].norm1.eps == m.decoder_norm.eps == 1e-6
    s = MaskedAutoencoderViT(**kw, stored_pos_embed=True, mlp_hidden_dim=24, decoder_mlp_hidden_dim=12,
                             layer_norm_eps=1e-12)
    ssd = s.state_dict()
    assert torch.equal(ssd["pos_embed"], m.pos_embed) and "decoder_pos_embed" in ssd
    assert ssd["blocks.0.mlp.fc1.weight"].shape == (24, 16) and ssd["decoder_blocks.0.mlp.fc1.weight"].shape == (12, 8)
    assert s.decoder_blocks[0].norm2.eps == s.norm.eps == 1e-12
    assert not any(n.endswith("pos_embed") for n, _ in s.named_parameters())


def test_noise_removes_exactly_the_masked_patches(ckpts):
    """The helper the comparisons rely on: transformers' argsort of the noise keeps the visible patches."""
    _, mask = inputs(ckpts["plain"], B=4)
    keep = torch.argsort(noise_for(mask), dim=1)[:, : int((~mask[0]).sum())]
    assert all(set(keep[b].tolist()) == set((~mask[b]).nonzero().flatten().tolist()) for b in range(4))


def test_checkpoint_helper_is_transformers_model(ckpts):
    assert isinstance(ckpts["plain"], ViTMAEForPreTraining) and isinstance(ckpts["encoder"], ViTMAEModel)
