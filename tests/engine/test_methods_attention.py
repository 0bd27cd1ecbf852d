"""engine.methods.attention.cls_attention on tiny MAE models: shape, rows summing to 1, a brute-force
recomputation of the last block's class-token attention, and an EMA-teacher-like encoder beside the model."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from engine.methods.attention import cls_attention
from engine.models import MaskedAutoencoderViT

REPO = Path(__file__).resolve().parents[2]


def tiny(img_size=(8, 8), in_chans=1, patch_size=2, depth=2, num_heads=2, **kw) -> MaskedAutoencoderViT:
    torch.manual_seed(0)
    return MaskedAutoencoderViT(img_size=img_size, in_chans=in_chans, patch_size=patch_size, embed_dim=32, depth=depth,
                                num_heads=num_heads, decoder_embed_dim=16, decoder_depth=1, decoder_num_heads=2,
                                **kw).eval()  # fmt: skip


def images(n=5, c=1, h=8, w=8, seed=1) -> torch.Tensor:
    return torch.rand(n, c, h, w, generator=torch.Generator().manual_seed(seed))


def brute_force(model: MaskedAutoencoderViT, imgs: torch.Tensor, enc: nn.Module | None = None) -> torch.Tensor:
    """The last block's class-token attention from the model's own modules: the full token sequence
    through ``blocks[:-1]`` (the Conv2d patch embedding, not the Linear of cls_attention), then an
    explicit per-head softmax of q k^T / sqrt(hs) written out with exp and a sum, heads averaged,
    the class token's self-weight dropped and the rest renormalised."""
    enc = model if enc is None else enc
    with torch.no_grad():
        x = enc.patch_embed(model.normalize_input(imgs)).flatten(2).transpose(1, 2)  # (B, L, D), row-major
        x = x + model.pos_embed[:, 1:]
        x = torch.cat([(enc.cls_token + model.pos_embed[:, :1]).expand(len(x), -1, -1), x], dim=1)
        for blk in enc.blocks[:-1]:
            x = blk(x)
        last = enc.blocks[-1]
        n = last.norm1(x)
        B, T, D = n.shape
        nh = last.attn.num_heads
        qkv = last.attn.qkv(n).reshape(B, T, 3, nh, D // nh)
        q, k = qkv[:, :, 0], qkv[:, :, 1]  # (B, T, nh, hs)
        rows = []
        for head in range(nh):
            logits = (k[:, :, head] @ q[:, 0, head, :, None]).squeeze(-1) / math.sqrt(D // nh)  # (B, T)
            e = torch.exp(logits - logits.max(dim=1, keepdim=True).values)
            rows.append(e / e.sum(dim=1, keepdim=True))
        a = torch.stack(rows).mean(dim=0)[:, 1:]
        return a / a.sum(dim=1, keepdim=True)


@pytest.mark.parametrize("kw", [{}, {"depth": 1}, {"num_heads": 4}, {"img_size": (8, 12), "patch_size": 4},
                                {"in_chans": 3, "input_mean": [0.5, 0.4, 0.3], "input_std": [0.2, 0.3, 0.25]}])
def test_shape_rows_sum_to_one_and_equal_the_brute_force(kw):
    model = tiny(**kw)
    c = model.in_chans
    H, W = model.img_size
    x = images(c=c, h=H, w=W)
    a = cls_attention(model, x)
    h, w = model.grid_size
    assert a.shape == (5, h * w) and a.dtype == torch.float32
    assert torch.allclose(a.sum(dim=1), torch.ones(5), atol=1e-5)
    assert (a > 0).all()
    assert torch.allclose(a, brute_force(model, x), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(a[0], a[1])  # per image, not one map for all


def test_no_gradient_and_the_model_is_unchanged():
    model = tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    a = cls_attention(model, images())
    assert not a.requires_grad
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_row_major_patch_order():
    """Changing one patch's pixels moves that patch's weight alone (in a one-block encoder), at its
    row-major index, the order of ``mask.flatten(1)``. One head: with several, each head's softmax
    renormalises differently and their average moves every weight a little."""
    model = tiny(depth=1, num_heads=1)
    x = torch.zeros(1, 1, 8, 8)
    a0 = cls_attention(model, x)[0]
    y = x.clone()
    y[0, 0, 2:4, 6:8] = 1.0  # patch (row 1, col 3) of the 4x4 grid: index 1 * 4 + 3 = 7
    a1 = cls_attention(model, y)[0]
    ratio = a1 / a0
    # With one block, the query is the class token's alone (it sees no patch before the last
    # block), so only the changed key's logit moves: every other patch keeps its relative weight.
    others = torch.cat([ratio[:7], ratio[8:]])
    assert torch.allclose(others, others[0].expand_as(others), rtol=1e-4)
    assert not torch.isclose(ratio[7], others[0], rtol=1e-3)


class Teacher(nn.Module):
    """What an EMA teacher holds: copies of the encoder's patch embedding, class token, blocks and norm."""

    def __init__(self, model: MaskedAutoencoderViT):
        super().__init__()
        self.patch_embed = copy.deepcopy(model.patch_embed)
        self.cls_token = copy.deepcopy(model.cls_token)
        self.blocks = copy.deepcopy(model.blocks)
        self.norm = copy.deepcopy(model.norm)


def test_encoder_reads_a_teacher_beside_the_model():
    model = tiny()
    model.teacher = Teacher(model)
    x = images()
    assert torch.allclose(cls_attention(model, x, encoder=model.teacher), cls_attention(model, x), atol=1e-6)
    with torch.no_grad():  # the teacher drifts from the student: its own weights are read
        for p in model.teacher.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    t = cls_attention(model, x, encoder=model.teacher)
    assert not torch.allclose(t, cls_attention(model, x), atol=1e-4)
    assert torch.allclose(t, brute_force(model, x, model.teacher), atol=1e-5, rtol=1e-4)
    assert torch.allclose(t.sum(dim=1), torch.ones(len(x)), atol=1e-5)


def test_bad_images_and_an_encoder_without_blocks_raise():
    model = tiny()
    with pytest.raises(ValueError, match=r"\[B, C, 8, 8\]"):
        cls_attention(model, torch.rand(2, 1, 6, 6))
    empty = Teacher(model)
    empty.blocks = nn.ModuleList()
    with pytest.raises(ValueError, match="no block"):
        cls_attention(model, images(), encoder=empty)


def test_the_methods_package_does_not_load_torch():
    out = subprocess.run([sys.executable, "-c", "import sys, engine.methods; print('torch' in sys.modules)"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
