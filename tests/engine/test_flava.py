"""The FLAVA-style paired model (``model.arch: flava``, engine/models/flava.py) on tiny CPU models:
the shapes of every output, where the gradient of each objective goes, what the encoders can and
cannot see (hidden tokens and patches never enter; the contrastive embeddings are unimodal), the
presets and the config checks. The real run on Tux Paint stamps is in test_paired_task.py."""

from __future__ import annotations

import pytest
import torch

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.models import FLAVA, FLAVA_PRESETS, M3AE, M3AE_PRESETS, build_model, count_parameters
from engine.objectives import info_nce, masked_cross_entropy, masked_mse
from engine.tasks import resolve

B, C, S, P, V, L = 4, 3, 16, 4, 60, 12  # batch, channels, image side, patch, vocabulary, caption row
LI = (S // P) ** 2
MICRO = dict(embed_dim=32, image_depth=1, text_depth=1, fusion_depth=1, num_heads=2, decoder_embed_dim=16,
             decoder_depth=1, decoder_num_heads=2, proj_dim=8)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def micro() -> FLAVA:
    torch.manual_seed(0)
    return FLAVA(img_size=(S, S), in_chans=C, patch_size=P, vocab_size=V, max_len=L, **MICRO).eval()


def batch(seed: int = 0):
    """Images ``[B, C, S, S]``, caption rows ``[CLS] w.. [SEP] [PAD]..`` of 3 to 8 words, their real
    tokens, a ragged image mask (one row hides the whole image) and a caption mask (one row hides
    the whole caption)."""
    g = torch.Generator().manual_seed(seed)
    imgs = torch.rand(B, C, S, S, generator=g)
    ids = torch.randint(5, V, (B, L), generator=g)
    n_words = torch.tensor([3, 8, 5, 6])
    pos = torch.arange(L)[None]
    real = (pos >= 1) & (pos <= n_words[:, None])
    ids = torch.where(real, ids, 0)
    img_mask = torch.rand(B, LI, generator=g) < torch.tensor([[0.75], [0.5], [1.0], [0.25]])
    txt_mask = real & (torch.rand(B, L, generator=g) < 0.3)
    txt_mask[:, 1] = True  # one hidden token at least
    txt_mask[3] = real[3]  # cross-modal completion: the whole caption of pair 3
    return imgs, ids, real, img_mask, txt_mask


def test_every_output_has_its_shape():
    m = micro()
    imgs, ids, real, img_mask, txt_mask = batch()
    out = m(imgs, ids, real, img_mask, txt_mask, contrastive=True)
    M = int(txt_mask.sum())
    assert out["pred"].shape == out["target"].shape == (B, LI, P * P * C)
    assert out["mask"].shape == (B, LI) and out["mask"].dtype == torch.bool
    assert out["logits"].shape == (M, V) and out["labels"].shape == (M,)
    assert torch.equal(out["labels"], ids[txt_mask])
    assert out["emb_a"].shape == out["emb_b"].shape == (B, 8) and out["logit_scale"].shape == ()
    assert set(m(imgs, ids, real, img_mask, txt_mask)) == {"pred", "target", "mask", "logits", "labels"}
    img, txt = m.encode(imgs, ids, True, real)
    assert img.shape == txt.shape == (B, 32)
    img, txt = m.encode(imgs, ids, torch.tensor([True, False, True, False]), real & torch.tensor([[1], [1], [0], [0]]).bool())
    assert img.shape == txt.shape == (B, 32) and torch.isfinite(img).all() and torch.isfinite(txt).all()
    assert m.embed_image(imgs).shape == m.embed_text(ids, real).shape == (B, 8)
    rec = m.reconstruct(imgs, out["pred"], img_mask)
    assert rec["pred_img"].shape == rec["pasted"].shape == (B, C, S, S)
    assert (m.num_patches, m.grid_size, m.patch_size, m.img_size, m.in_chans, m.norm_pix_loss) == (
        LI, (S // P, S // P), P, (S, S), C, False)
    assert torch.equal(m.unpatchify(m.patchify(imgs)), imgs)
    for v in out.values():
        assert torch.isfinite(v).all()


def _grads(m: FLAVA, loss: torch.Tensor) -> dict[str, float]:
    m.zero_grad()
    loss.backward()
    parts = {"image": m.image_encoder.blocks, "text": m.text_encoder.blocks, "fusion": m.blocks,
             "decoder": m.decoder_blocks, "img_proj": m.img_proj, "txt_proj": m.txt_proj}
    return {k: sum(float(p.grad.abs().sum()) for p in mod.parameters() if p.grad is not None)
            for k, mod in parts.items()}


def test_masked_modeling_trains_all_three_encoders_and_contrastive_the_unimodal_ones():
    m = micro().train()
    imgs, ids, real, img_mask, txt_mask = batch()
    out = m(imgs, ids, real, img_mask, txt_mask, contrastive=True)
    g = _grads(m, masked_mse(out["pred"], out["target"], out["mask"]) + masked_cross_entropy(out["logits"], out["labels"]))
    assert all(g[k] > 0 for k in ("image", "text", "fusion", "decoder")), g
    assert g["img_proj"] == g["txt_proj"] == 0.0
    out = m(imgs, ids, real, img_mask, txt_mask, contrastive=True)
    g = _grads(m, info_nce(out["emb_a"], out["emb_b"], out["logit_scale"]))
    assert g["image"] > 0 and g["text"] > 0 and g["img_proj"] > 0 and g["txt_proj"] > 0, g
    assert g["fusion"] == g["decoder"] == 0.0, g  # FLAVA: contrastive on the unimodal encoders only


def test_contrastive_embeddings_are_unimodal():
    """An image's embedding does not depend on its caption (nor on the batch), a caption's does not
    depend on its image, nor on the ids at its padding."""
    m = micro()
    imgs, ids, real, img_mask, txt_mask = batch()
    imgs2, ids2, real2, _, _ = batch(seed=1)
    with torch.no_grad():
        a = m(imgs, ids, real, img_mask, txt_mask, contrastive=True)
        b = m(imgs, ids2, real2, img_mask, txt_mask & real2, contrastive=True)  # other captions
        c = m(imgs2, ids, real, img_mask, txt_mask, contrastive=True)  # other images
        assert torch.equal(a["emb_a"], b["emb_a"]) and not torch.allclose(a["emb_b"], b["emb_b"])
        assert torch.equal(a["emb_b"], c["emb_b"]) and not torch.allclose(a["emb_a"], c["emb_a"])
        assert torch.allclose(m.embed_image(imgs.flip(0)), a["emb_a"].flip(0), atol=1e-5)
        padded = torch.where(real, ids, torch.randint(5, V, ids.shape))  # other ids where not real
        assert torch.allclose(m.embed_text(padded, real), a["emb_b"], atol=1e-6)
        assert torch.allclose(m.embed_text(ids.flip(0), real.flip(0)), a["emb_b"].flip(0), atol=1e-5)


def test_hidden_tokens_and_patches_never_enter_the_encoders():
    m = micro()
    imgs, ids, real, img_mask, txt_mask = batch()
    other_ids = torch.where(txt_mask, torch.randint(5, V, ids.shape, generator=torch.Generator().manual_seed(3)), ids)
    hidden_px = m.unpatchify(m.patchify(imgs).masked_fill(img_mask[..., None], 0.5))  # other hidden patches
    with torch.no_grad():
        a = m(imgs, ids, real, img_mask, txt_mask)
        b = m(imgs, other_ids, real, img_mask, txt_mask)
        c = m(hidden_px, ids, real, img_mask, txt_mask)
        assert not torch.equal(a["labels"], b["labels"])
        assert torch.allclose(a["pred"], b["pred"], atol=1e-6) and torch.allclose(a["logits"], b["logits"], atol=1e-6)
        assert not torch.equal(a["target"], c["target"])
        assert torch.allclose(a["pred"], c["pred"], atol=1e-6) and torch.allclose(a["logits"], c["logits"], atol=1e-6)
        # a visible token does matter (the test would pass on a model that ignores the caption otherwise)
        shown = real & ~txt_mask
        d = m(imgs, torch.where(shown, (ids + 1) % V, ids), real, img_mask, txt_mask)
        assert not torch.allclose(a["logits"], d["logits"], atol=1e-4)


def test_presets_build_through_the_registry_and_tiny_stays_near_m3ae_tiny():
    cfg = resolve(RunConfig.from_dict({"task": "paired", "model": {"arch": "flava", "preset": "tiny", "patch_size": 8}}))
    dims = dict(image_shape=(3, 32, 32), vocab_size=2000, max_len=48)
    torch.manual_seed(0)
    m = build_model(cfg, **dims)
    assert isinstance(m, FLAVA) and len(m.image_encoder.blocks) == 2 and len(m.text_encoder.blocks) == 2
    assert len(m.blocks) == 1
    torch.manual_seed(0)
    ref = M3AE((32, 32), 3, 8, 2000, 48, **M3AE_PRESETS["tiny"])
    assert 1.0 < count_parameters(m) / count_parameters(ref) < 1.25
    assert set(FLAVA_PRESETS) == set(M3AE_PRESETS)
    with pytest.raises(ConfigError, match="model.patch_size"):
        build_model(resolve(RunConfig.from_dict({"task": "paired", "model": {"arch": "flava", "patch_size": 5}})), **dims)


def test_flava_is_a_paired_arch_only():
    cfg = resolve(RunConfig.from_dict({"task": "paired", "model": {"arch": "flava"}}))
    assert (cfg.model.arch, cfg.model.preset) == ("flava", "tiny")
    with pytest.raises(ConfigError, match="model.preset: unknown preset 'huge' for flava"):
        resolve(RunConfig.from_dict({"task": "paired", "model": {"arch": "flava", "preset": "huge"}}))
    for task in ("image_mim", "text_mlm", "text_span", "audio_mae", "audio_frames"):
        for arch in ("m3ae", "flava"):
            with pytest.raises(ConfigError, match=rf"model\.arch: task '{task}' trains .*, not '{arch}'"):
                resolve(RunConfig.from_dict({"task": task, "model": {"arch": arch}}))
