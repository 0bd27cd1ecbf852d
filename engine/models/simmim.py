"""SimMIM: an encoder-only ViT that sees mask tokens in place of the hidden patches.

Unlike MAE, there is no decoder and no gather: every patch goes through the encoder, the masked
ones replaced by one learned mask token before the positional embedding is added, and a linear head
predicts the pixels of every patch from the final features. The loss (L1 in the paper,
:func:`engine.objectives.masked_l1`) is scored on the masked patches only.

Shapes as in :mod:`engine.models.mae`: B batch, C channels, H/W pixels, P patch size, h/w grid,
L = h*w patches (row-major), D width.

References: Xie et al. 2022, "SimMIM: A Simple Framework for Masked Image Modeling" (sec. 3.1-3.3:
mask token at the input, a linear prediction head is enough, L1 on masked pixels).
"""

from __future__ import annotations

import torch
from torch import nn

from engine.models.layers import Block
from engine.models.mae import MaskedAutoencoderViT, display_images
from engine.models.pos_embed import sincos_2d


class SimMIMViT(nn.Module):
    """Encoder-only masked image model with a linear pixel head.

    Args:
        img_size: ``(H, W)``; ``patch_size`` must divide both.
        in_chans: ``C``. patch_size: ``P``.
        embed_dim, depth, num_heads: encoder width ``D`` (a multiple of 4), blocks, heads.
        mlp_ratio: MLP hidden width / ``D``.
        norm_pix_loss: target = per-patch normalised pixels (as MAE's option).

    Raises:
        ValueError: ``patch_size`` does not divide ``img_size`` or ``num_heads`` does not divide ``D``.

    References: Xie et al. 2022, "SimMIM: A Simple Framework for Masked Image Modeling".
    """

    def __init__(self, img_size: tuple[int, int], in_chans: int, patch_size: int, embed_dim: int, depth: int,
                 num_heads: int, mlp_ratio: float = 4.0, norm_pix_loss: bool = False):
        super().__init__()
        H, W = img_size
        P = patch_size
        if H % P or W % P:
            raise ValueError(f"patch_size {P} does not divide the image size {H}x{W}")
        self.img_size, self.in_chans, self.patch_size = (H, W), in_chans, P
        self.grid_size = (H // P, W // P)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.norm_pix_loss = norm_pix_loss
        self.patch_embed = nn.Conv2d(in_chans, embed_dim, kernel_size=P, stride=P)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.register_buffer("pos_embed", sincos_2d(embed_dim, self.grid_size, cls_token=False)[None], persistent=False)
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, P * P * in_chans)  # pixels of one patch
        w = self.patch_embed.weight.data
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.normal_(self.mask_token, std=0.02)
        self.apply(MaskedAutoencoderViT.init_module)

    # patchify / unpatchify are MAE's (same patch layout), bound to this model's sizes.
    patchify = MaskedAutoencoderViT.patchify
    unpatchify = MaskedAutoencoderViT.unpatchify
    forward_target = MaskedAutoencoderViT.forward_target
    flat_mask = staticmethod(MaskedAutoencoderViT.flat_mask)

    def forward_encoder(self, imgs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``imgs [B, C, H, W]``, ``mask [B, L]`` bool (True = replaced by the mask token) -> ``[B, L, D]``."""
        x = self.patch_embed(imgs).flatten(2).transpose(1, 2)  # (B, L, D)
        x = torch.where(mask.unsqueeze(-1), self.mask_token.to(x.dtype), x)
        x = x + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)

    def forward(self, imgs: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """``imgs [B, C, H, W]``, ``mask [B, L]`` or ``[B, h, w]`` bool -> ``{"pred", "target", "mask"}``
        (``pred``/``target`` ``[B, L, P*P*C]``, ``mask [B, L]``), the outputs an objective reads."""
        mask = self.flat_mask(mask, imgs.device)
        pred = self.head(self.forward_encoder(imgs, mask))
        return {"pred": pred, "target": self.forward_target(imgs), "mask": mask}

    @torch.no_grad()
    def features(self, imgs: torch.Tensor) -> torch.Tensor:
        """Frozen features: the encoder on the whole image, patch tokens averaged. ``[B, C, H, W] -> [B, D]``."""
        mask = torch.zeros(imgs.shape[0], self.num_patches, dtype=torch.bool, device=imgs.device)
        return self.forward_encoder(imgs, mask).mean(dim=1)

    @torch.no_grad()
    def reconstruct(self, imgs: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """Display reconstructions, as :meth:`MaskedAutoencoderViT.reconstruct`:
        ``{"pred_img", "pasted"}``, both ``[B, C, H, W]`` clamped to [0, 1]."""
        mask = self.flat_mask(mask, imgs.device)
        pred = self.head(self.forward_encoder(imgs, mask)).float()
        return display_images(self, imgs, pred, mask)
