"""Audio models: AudioMAE on rectangular spectrogram patches, the frame Transformer and its EMA teacher."""

from __future__ import annotations

import pytest
import torch

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.models import MODEL_REGISTRY, FrameTransformer, MaskedAutoencoderViT, build_model, count_parameters
from engine.models.mae import pool, pool_stats
from engine.objectives import masked_mse
from engine.tasks import resolve
from engine.training.loop import param_groups


def spec_batch(B=3, F=16, T=24, seed=0):
    return torch.randn(B, 1, F, T, generator=torch.Generator().manual_seed(seed))


def test_rectangular_patches_patchify_round_trip_and_layout():
    m = MaskedAutoencoderViT((16, 24), 1, (4, 6), embed_dim=16, depth=1, num_heads=2, decoder_embed_dim=8,
                             decoder_depth=1, decoder_num_heads=2)
    assert m.grid_size == (4, 4) and m.num_patches == 16
    x = spec_batch()
    p = m.patchify(x)
    assert p.shape == (3, 16, 24)
    assert torch.equal(m.unpatchify(p), x)
    # patch (i, j) holds mel bins 4i..4i+3 and frames 6j..6j+5, flattened (bin, frame)
    assert torch.equal(p[1, 1 * 4 + 2], x[1, 0, 4:8, 12:18].reshape(-1))
    out = m(x, torch.zeros(3, 16, dtype=torch.bool).index_fill_(1, torch.tensor([0, 5, 9]), True))
    assert out["pred"].shape == out["target"].shape == (3, 16, 24)


def test_square_patch_models_are_unchanged_by_the_rectangular_option():
    torch.manual_seed(0)
    a = MaskedAutoencoderViT((8, 8), 1, 2, 16, 1, 2, 8, 1, 2)
    torch.manual_seed(0)
    b = MaskedAutoencoderViT((8, 8), 1, (2, 2), 16, 1, 2, 8, 1, 2)
    x = torch.rand(2, 1, 8, 8)
    mask = torch.zeros(2, 16, dtype=torch.bool)
    mask[:, ::3] = True
    assert torch.equal(a(x, mask)["pred"], b(x, mask)["pred"])


def test_pool_averages_only_the_kept_positions():
    t = torch.arange(12.0).reshape(1, 4, 3).repeat(2, 1, 1)
    keep = torch.tensor([[True, True, False, False], [False, False, False, False]])
    out = pool(t, keep)
    assert torch.allclose(out[0], t[0, :2].mean(0)) and torch.allclose(out[1], t[1].mean(0))
    st = pool_stats(t, keep)
    assert st.shape == (2, 6) and torch.allclose(st[0, :3], out[0]) and torch.allclose(st[1, :3], out[1])
    assert torch.allclose(st[0, 3:], t[0, :2].std(0, unbiased=False)) and torch.allclose(st[1, 3:], t[1].std(0, unbiased=False))


def test_frame_tokens_round_trip_and_order():
    m = FrameTransformer(n_mels=16, frames=24, patch_size=3, embed_dim=16, depth=2, num_heads=2)
    x = spec_batch()
    tok = m.tokenize(x)
    assert tok.shape == (3, 8, 48)
    assert torch.equal(tok[2, 1], x[2, 0, :, 3:6].transpose(0, 1).reshape(-1))  # frames 3..5, each 16 bins
    assert torch.equal(m.untokenize(tok), x)


def test_mel_target_scores_the_masked_frames_and_masked_tokens_are_hidden():
    torch.manual_seed(0)
    m = FrameTransformer(16, 24, 2, 16, 2, 2, target="mel")
    x = spec_batch()
    mask = torch.zeros(3, 12, dtype=torch.bool)
    mask[:, 4:8] = True
    out = m(x, mask)
    assert out["pred"].shape == out["target"].shape == (3, 12, 32) and torch.equal(out["target"], m.tokenize(x))
    # what is under a masked token does not reach the prediction
    y = x.clone()
    y[:, :, :, 8:16] = 100.0  # frames of tokens 4..7
    assert torch.allclose(m(y, mask)["pred"], out["pred"])


def test_ema_teacher_targets_update_and_checkpoint():
    torch.manual_seed(0)
    m = FrameTransformer(16, 24, 2, 16, 3, 2, target="ema", top_k=2, ema_decay=0.9, ema_decay_end=0.99, ema_anneal_steps=10)
    x = spec_batch()
    mask = torch.zeros(3, 12, dtype=torch.bool)
    mask[:, 2:6] = True
    out = m(x, mask)
    assert out["pred"].shape == out["target"].shape == (3, 12, 16)
    assert out["mel_pred"].shape == out["mel_target"].shape == (3, 12, 32)
    # targets: the teacher's top-2 blocks on the unmasked input, each instance-normalised over time, averaged
    _, layers = m.teacher(m.tokenize(x))
    norm = [(y - y.mean(1, keepdim=True)) / (y.var(1, unbiased=False, keepdim=True) + 1e-5).sqrt() for y in layers[-2:]]
    assert torch.allclose(out["target"], (norm[0] + norm[1]) / 2, atol=1e-5)
    # the teacher is frozen, out of the optimizer, and saved with the weights
    assert all(not p.requires_grad for p in m.teacher.parameters())
    opt_params = {id(p) for g in param_groups(m, 0.05) for p in g["params"]}
    assert not opt_params & {id(p) for p in m.teacher.parameters()}
    assert any(k.startswith("teacher.") for k in m.state_dict())
    assert count_parameters(m) < count_parameters(m, trainable_only=False)
    # the readout does not reach the encoder
    masked_mse(out["mel_pred"], out["mel_target"], out["mask"]).backward()
    assert m.encoder.proj.weight.grad is None and m.readout.weight.grad is not None
    # tau anneals linearly, then stays; the update is tau * teacher + (1 - tau) * student
    assert [round(m.ema_decay_at(s), 4) for s in (0, 5, 10, 50)] == [0.9, 0.945, 0.99, 0.99]
    with torch.no_grad():
        for p in m.encoder.parameters():
            p.add_(1.0)
    t0 = [p.clone() for p in m.teacher.parameters()]
    m.ema_update(5)
    for t, before, s in zip(m.teacher.parameters(), t0, m.encoder.parameters()):
        assert torch.allclose(t, 0.945 * before + 0.055 * s, atol=1e-6)


def test_mel_target_has_no_teacher():
    m = FrameTransformer(16, 24, 2, 16, 2, 2, target="mel")
    assert m.teacher is None and m.readout is None
    m.ema_update(3)  # nothing to do


@pytest.mark.parametrize("arch", ["audio_mae_vit", "frame_transformer"])
def test_audio_archs_build_from_a_config_with_every_preset(arch):
    task = {"audio_mae_vit": "audio_mae", "frame_transformer": "audio_frames"}[arch]
    for preset in MODEL_REGISTRY[arch].presets:
        if preset == "base":
            continue  # 86M parameters: too slow to build in a unit test
        cfg = resolve(RunConfig.from_dict({"task": task, "data": {"dataset": "x"}, "model": {"preset": preset}}))
        m = build_model(cfg, n_mels=64, frames=104 if arch == "audio_mae_vit" else 100, patch=(8, 8) if arch == "audio_mae_vit" else (64, 2))
        assert count_parameters(m) > 0


def test_frame_builder_refuses_top_k_above_the_depth():
    cfg = resolve(RunConfig.from_dict({"task": "audio_frames", "data": {"dataset": "x"}, "task_params": {"target": "ema", "top_k": 9}}))
    with pytest.raises(ConfigError, match=r"task_params\.top_k: 9 is more than the 4 blocks of preset 'tiny'"):
        build_model(cfg, n_mels=64, frames=100, patch=(64, 2))
