"""engine.models (MAE ViT, presets, build_model) and engine.objectives, on tiny CPU models."""

from __future__ import annotations

import pytest
import torch

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.masking import draw_mask, random_mask
from engine.models import MODEL_REGISTRY, PRESETS, MaskedAutoencoderViT, build_model, count_parameters
from engine.models.layers import Attention
from engine.objectives import masked_mse, normalize_patches
from engine.tasks import resolve

MICRO = dict(embed_dim=32, depth=1, num_heads=2, decoder_embed_dim=16, decoder_depth=1, decoder_num_heads=2)


def micro(img_size=(8, 8), in_chans=1, patch_size=2, **kw) -> MaskedAutoencoderViT:
    torch.manual_seed(0)
    return MaskedAutoencoderViT(img_size=img_size, in_chans=in_chans, patch_size=patch_size, **{**MICRO, **kw})


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- patches ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("in_chans", [1, 3])
@pytest.mark.parametrize(
    ("img_size", "patch_size"), [((8, 8), 1), ((8, 8), 2), ((8, 8), 4), ((12, 8), 4), ((28, 28), 7)]
)
def test_patchify_unpatchify_round_trip(in_chans, img_size, patch_size):
    model = micro(img_size, in_chans, patch_size)
    imgs = torch.rand(2, in_chans, *img_size, generator=gen())
    x = model.patchify(imgs)
    h, w = img_size[0] // patch_size, img_size[1] // patch_size
    assert x.shape == (2, h * w, patch_size**2 * in_chans)
    assert torch.equal(model.unpatchify(x), imgs)


def test_patch_order_is_row_major_like_a_flattened_grid_mask():
    model = micro((8, 12), 1, 4)  # grid h=2, w=3
    ids = torch.arange(6, dtype=torch.float32).reshape(1, 1, 2, 3)
    imgs = ids.repeat_interleave(4, dim=2).repeat_interleave(4, dim=3)  # patch (i, j) filled with i*3 + j
    patches = model.patchify(imgs)
    assert torch.equal(patches[0, :, 0], torch.arange(6, dtype=torch.float32))
    assert (patches == patches[..., :1]).all()


# --- encoder / decoder -----------------------------------------------------------------------------


@pytest.mark.parametrize("ratio", [0.0, 0.5, 0.75])
def test_encoder_sees_only_visible_patches(ratio):
    model = micro()
    imgs = torch.rand(3, 1, 8, 8, generator=gen())
    mask = random_mask((3, 4, 4), ratio, generator=gen(1))
    n_visible = 16 - round(ratio * 16)
    latent, ids_restore, pad = model.forward_encoder(imgs, mask.flatten(1))
    assert latent.shape == (3, 1 + n_visible, 32)
    assert ids_restore.shape == (3, 16) and pad is None
    pred = model.forward_decoder(latent, ids_restore, pad)
    assert pred.shape == (3, 16, 4)


def test_encoder_output_does_not_depend_on_masked_pixels():
    model = micro()
    imgs = torch.rand(2, 1, 8, 8, generator=gen())
    mask = random_mask((2, 4, 4), 0.75, generator=gen(1))
    latent, _, _ = model.forward_encoder(imgs, mask)
    pixel_mask = mask.repeat_interleave(2, 1).repeat_interleave(2, 2).unsqueeze(1)  # (B, 1, H, W)
    scribbled = torch.where(pixel_mask, torch.rand_like(imgs) * 10, imgs)
    latent2, _, _ = model.forward_encoder(scribbled, mask)
    torch.testing.assert_close(latent, latent2)


def test_ragged_masks_match_each_row_run_alone():
    """Rows with different visible counts (Bernoulli, SpecAugment...) are padded; padding must not
    leak: each row's loss terms and prediction equal those of the row run as a batch of one."""
    model = micro().eval()
    imgs = torch.rand(3, 1, 8, 8, generator=gen())
    mask = torch.zeros(3, 16, dtype=torch.bool)
    mask[0, :3] = True  # 13 visible
    mask[1, 5:14] = True  # 7 visible
    mask[2, :] = True  # 0 visible: the encoder sees the class token only
    mask[2, 15] = False  # ... and one patch
    latent, ids_restore, pad = model.forward_encoder(imgs, mask)
    assert latent.shape == (3, 1 + 13, 32) and pad.shape == (3, 13)
    assert pad.sum(dim=1).tolist() == [0, 6, 12]
    pred = model.forward_decoder(latent, ids_restore, pad)
    for b in range(3):
        lat_b, ids_b, pad_b = model.forward_encoder(imgs[b : b + 1], mask[b : b + 1])
        assert pad_b is None
        pred_b = model.forward_decoder(lat_b, ids_b)
        torch.testing.assert_close(pred[b : b + 1], pred_b, atol=1e-5, rtol=1e-5)
        n_vis = int((~mask[b]).sum())
        torch.testing.assert_close(latent[b, : 1 + n_vis], lat_b[0], atol=1e-5, rtol=1e-5)


# --- objective -------------------------------------------------------------------------------------


def test_loss_ignores_visible_patches_and_scores_masked_ones():
    g = gen()
    pred, target = torch.randn(2, 16, 4, generator=g), torch.randn(2, 16, 4, generator=g)
    mask = random_mask((2, 16), 0.5, generator=gen(1))
    loss = masked_mse(pred, target, mask)
    b, vis = torch.nonzero(~mask)[0].tolist()
    b2, msk = torch.nonzero(mask)[0].tolist()

    changed = pred.clone()
    changed[b, vis] += 100.0
    assert masked_mse(changed, target, mask) == loss
    changed = pred.clone()
    changed[b2, msk] += 1.0
    assert masked_mse(changed, target, mask) != loss

    per_patch = ((pred - target) ** 2).mean(-1)
    torch.testing.assert_close(loss, per_patch[mask].mean())


def mae_loss(model, imgs, mask):
    """MAE's loss: masked MSE of the model's outputs; returns (loss, pred)."""
    out = model(imgs, mask)
    return masked_mse(**out), out["pred"]


def test_model_outputs_score_only_masked_predictions():
    model = micro()
    imgs = torch.rand(2, 1, 8, 8, generator=gen())
    mask = random_mask((2, 16), 0.75, generator=gen(1))
    out = model(imgs, mask)
    assert set(out) == {"pred", "target", "mask"} and torch.equal(out["mask"], mask)
    torch.testing.assert_close(out["target"], model.patchify(imgs))
    loss = masked_mse(**out)
    noisy = torch.where(mask.unsqueeze(-1), out["pred"], out["pred"] + 5.0)
    torch.testing.assert_close(masked_mse(noisy, out["target"], mask), loss)


def test_loss_with_no_masked_patch_is_zero_and_differentiable():
    pred = torch.randn(2, 4, 3, requires_grad=True)
    loss = masked_mse(pred, torch.zeros(2, 4, 3), torch.zeros(2, 4, dtype=torch.bool))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(pred.grad, torch.zeros_like(pred))


def test_normalize_patches():
    target = torch.rand(3, 5, 12, generator=gen()) * 4 + 2
    out = normalize_patches(target)
    torch.testing.assert_close(out.mean(-1), torch.zeros(3, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(-1), torch.ones(3, 5), atol=1e-3, rtol=0)
    assert torch.isfinite(normalize_patches(torch.ones(1, 2, 4))).all()  # flat patch: eps keeps it finite
    with pytest.raises(ValueError, match="at least 2 values"):
        normalize_patches(torch.rand(1, 2, 1))


def test_norm_pix_loss_scores_against_normalised_patches():
    model = micro(norm_pix_loss=True)
    imgs = torch.rand(2, 1, 8, 8, generator=gen())
    mask = random_mask((2, 16), 0.75, generator=gen(1))
    loss, pred = mae_loss(model, imgs, mask)
    torch.testing.assert_close(loss, masked_mse(pred, normalize_patches(model.patchify(imgs)), mask))
    assert not torch.allclose(loss, masked_mse(pred, model.patchify(imgs), mask))


# --- reconstruct -----------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_pix_loss", [False, True])
def test_reconstruct_pastes_originals_at_visible_patches(norm_pix_loss):
    model = micro(in_chans=3, norm_pix_loss=norm_pix_loss)
    imgs = torch.rand(2, 3, 8, 8, generator=gen())
    mask = random_mask((2, 4, 4), 0.75, generator=gen(1))
    out = model.reconstruct(imgs, mask)
    assert out["pred_img"].shape == out["pasted"].shape == imgs.shape
    assert not out["pasted"].requires_grad
    for img in out.values():
        assert img.min() >= 0.0 and img.max() <= 1.0
    pasted, pred_img = model.patchify(out["pasted"]), model.patchify(out["pred_img"])
    m = mask.flatten(1)
    assert torch.equal(pasted[~m], model.patchify(imgs)[~m])
    assert torch.equal(pasted[m], pred_img[m])


# --- presets, build_model --------------------------------------------------------------------------


def test_tiny_preset_forward_backward_is_finite():
    cfg = resolve(RunConfig.from_dict({"model": {"preset": "tiny", "patch_size": 2}}))
    torch.manual_seed(0)
    model = build_model(cfg, image_shape=(1, 8, 8))
    imgs = torch.rand(16, 1, 8, 8, generator=gen())
    mask = draw_mask(cfg.masking, (16, 4, 4), gen(1))
    loss, pred = mae_loss(model, imgs, mask.flatten(1))
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert pred.shape == (16, 16, 4)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.mask_token.grad.abs().sum() > 0  # masked positions are predicted from the mask token


def test_a_few_steps_reduce_the_loss():
    model = micro()
    imgs = torch.rand(16, 1, 8, 8, generator=gen())
    mask = random_mask((16, 16), 0.5, generator=gen(1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for _ in range(10):
        loss, _ = mae_loss(model, imgs, mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.25 * first


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_builds(preset):
    sizes = PRESETS[preset]
    assert sizes["embed_dim"] % sizes["num_heads"] == 0 and sizes["embed_dim"] % 4 == 0
    assert sizes["decoder_embed_dim"] % sizes["decoder_num_heads"] == 0 and sizes["decoder_embed_dim"] % 4 == 0
    if preset == "tiny":
        model = build_model(resolve(RunConfig.from_dict({"model": {"preset": preset}})), image_shape=(1, 8, 8))
        assert 0 < count_parameters(model) < 2_000_000


def test_presets_grow():
    counts = [sum(v for k, v in PRESETS[p].items() if "embed_dim" in k) for p in ("tiny", "small", "base")]
    assert counts == sorted(counts)


def test_build_model_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"model\.preset: unknown preset 'huge' for mae_vit; known presets: tiny, small, base"):
        resolve(RunConfig.from_dict({"model": {"preset": "huge"}}))
    with pytest.raises(ConfigError, match=r"model\.patch_size: 3 does not divide the image size 8x8"):
        build_model(resolve(RunConfig.from_dict({"model": {"patch_size": 3}})), image_shape=(1, 8, 8))
    with pytest.raises(ConfigError, match=r"objective\.norm_pix_loss"):
        build_model(resolve(RunConfig.from_dict({"model": {"patch_size": 1}, "objective": {"norm_pix_loss": True}})), image_shape=(1, 8, 8))


def test_model_registry_has_mae_vit():
    assert "mae_vit" in MODEL_REGISTRY
    cfg = resolve(RunConfig.from_dict({"model": {"arch": "mae_vit", "patch_size": 4}, "objective": {"norm_pix_loss": True}}))
    model = build_model(cfg, image_shape=(3, 12, 8))
    assert isinstance(model, MaskedAutoencoderViT)
    assert model.grid_size == (3, 2) and model.norm_pix_loss


@pytest.mark.parametrize("L", [5, 80])  # CPU: math kernel for short sequences, default (flash) for long
def test_attention_matches_the_textbook_formula(L):
    torch.manual_seed(0)
    attn = Attention(dim=32, num_heads=4)
    x = torch.randn(3, L, 32, generator=gen())
    q, k, v = attn.qkv(x).reshape(3, L, 3, 4, 8).permute(2, 0, 3, 1, 4)
    y = ((q @ k.transpose(-2, -1)) / 8**0.5).softmax(-1) @ v  # (B, nh, L, hs)
    expected = attn.proj(y.transpose(1, 2).reshape(3, L, 32))
    torch.testing.assert_close(attn(x), expected, atol=1e-5, rtol=1e-4)
