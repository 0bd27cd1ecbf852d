"""FLAVA-style paired model: separate image and text encoders, then a fusion encoder over both.

Masked multimodal modeling as :mod:`engine.models.m3ae` (same decoder, heads and :meth:`encode`),
with FLAVA's encoders in place of M3AE's joint one (why: docs/architecture.md, "Models and
objectives"):

1. **image encoder**: a ViT over the *visible* patches only, with its own ``[CLS_I]`` token;
2. **text encoder**: a Transformer over the *visible* caption tokens only, with ``[CLS_T]``;
3. **fusion encoder**: both states projected, plus modality embeddings, after ``[CLS_M]``: the
   layout of M3AE's encoder output (``[CLS]``, visible patches, visible tokens).

Contrastive embeddings ``[B, E]``: the image encoder's states averaged over every patch, the text
encoder's over the real tokens, each projected; so neither depends on the other modality.

Shapes: B batch, C channels, H/W pixels, P patch, L_i = h*w patches, L_t caption positions, D width
of all three encoders, D_d decoder width, V vocabulary, E contrastive width.

References: Singh et al. 2022, "FLAVA: A Foundational Language And Vision Alignment Model" (ViT-B/16
image and text encoders of 12 blocks, fusion of 6, all 768 wide; FLAVA projects ``[CLS]`` where
masklab averages, as M3AE's embeddings do here); Geng et al. 2022 (M3AE); He et al. 2022 (MAE).
"""

from __future__ import annotations

import torch
from torch import nn

from engine.masking.apply import gather_visible
from engine.models.layers import Block
from engine.models.m3ae import M3AE, scatter_back
from engine.models.mae import MaskedAutoencoderViT, pool


class UnimodalEncoder(nn.Module):
    """One modality's Transformer over its visible tokens after its own ``[CLS]`` token.

    Args:
        dim: width ``D``; depth: blocks; num_heads: heads (divides ``D``); mlp_ratio: MLP width / ``D``.
    """

    def __init__(self, dim: int, depth: int, num_heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.blocks = nn.ModuleList([Block(dim, num_heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        nn.init.normal_(self.cls_token, std=0.02)
        self.apply(MaskedAutoencoderViT.init_module)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode the kept tokens of ``x`` (the others never enter the blocks).

        Args:
            x: ``[B, L, D]`` embedded tokens, positions added.
            keep: ``[B, L]`` bool, True = visible; a row may keep none (its ``[CLS]`` alone is encoded).

        Returns:
            ``(states [B, L, D], pooled [B, D])``: each kept token's state at its position (zeros
            elsewhere), and their mean (the ``[CLS]`` state for a row that keeps none).
        """
        B = x.shape[0]
        keep = keep.to(device=x.device, dtype=torch.bool)
        keep = torch.cat([keep.new_ones(B, 1), keep], dim=1)
        x = torch.cat([self.cls_token.expand(B, -1, -1).to(x.dtype), x], dim=1)
        v, _, ids_restore, pad = gather_visible(x, ~keep)
        for blk in self.blocks:
            v = blk(v, pad)
        full = scatter_back(self.norm(v), ids_restore, keep)  # (B, 1 + L, D)
        states, tokens = full[:, 1:], keep[:, 1:]
        pooled = torch.where(tokens.any(dim=1, keepdim=True), pool(states, tokens), full[:, 0])
        return states, pooled


class FLAVA(M3AE):
    """Image encoder, text encoder and fusion encoder (module docstring), with M3AE's decoder and heads.

    The inherited ``cls_token``, ``type_embed``, ``blocks`` and ``norm`` are the fusion encoder's;
    ``patch_embed`` / ``img_pos`` feed the image encoder and ``tok_embed`` / ``txt_pos`` the text
    encoder. Inherited unchanged: :meth:`forward` (the outputs of :meth:`M3AE.forward`),
    :meth:`encode` (the probes' features: the *fusion* encoder's states pooled per modality),
    the decoder, heads, :meth:`reconstruct` and ``patchify`` / ``unpatchify``.

    Args:
        img_size: ``(H, W)``; in_chans: ``C``; patch_size: ``P`` (divides ``H`` and ``W``).
        vocab_size: ``V``; max_len: the longest caption row ``L_t``.
        embed_dim: ``D``, the width of the three encoders; num_heads: their heads.
        image_depth, text_depth, fusion_depth: blocks of the image, text and fusion encoders.
        decoder_embed_dim, decoder_depth, decoder_num_heads: the decoder's (``D_d`` a multiple of 4).
        proj_dim: ``E``; mlp_ratio: MLP hidden width / block width.

    Raises:
        ValueError: ``patch_size`` does not divide the image, a width is not a multiple of 4, a
            head count does not divide its width.
    """

    def __init__(self, img_size: tuple[int, int], in_chans: int, patch_size: int, vocab_size: int, max_len: int,
                 embed_dim: int, image_depth: int, text_depth: int, fusion_depth: int, num_heads: int,
                 decoder_embed_dim: int, decoder_depth: int, decoder_num_heads: int, proj_dim: int = 128,
                 mlp_ratio: float = 4.0):
        super().__init__(img_size, in_chans, patch_size, vocab_size, max_len, embed_dim, fusion_depth, num_heads,
                         decoder_embed_dim, decoder_depth, decoder_num_heads, proj_dim, mlp_ratio)
        self.image_encoder = UnimodalEncoder(embed_dim, image_depth, num_heads, mlp_ratio)
        self.text_encoder = UnimodalEncoder(embed_dim, text_depth, num_heads, mlp_ratio)
        self.image_to_fusion = nn.Linear(embed_dim, embed_dim)  # FLAVA's image-to-multimodal projection
        self.text_to_fusion = nn.Linear(embed_dim, embed_dim)
        for proj in (self.image_to_fusion, self.text_to_fusion):
            MaskedAutoencoderViT.init_module(proj)

    def encoder_inputs(self, imgs: torch.Tensor, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """The fusion encoder's inputs ``[B, 1 + L_i + L_t, D]``: each modality encoded alone over
        its kept positions of ``keep [B, 1 + L_i + L_t]`` (hidden patches and tokens never enter
        its encoder), projected, with the modality embeddings and the ``[CLS_M]`` token. Positions
        not kept hold no state; the fusion encoder gathers the kept ones only."""
        Li = self.num_patches
        img, _ = self.image_encoder(self.embed_patches(imgs), keep[:, 1 : 1 + Li])
        txt, _ = self.text_encoder(self.embed_tokens(ids), keep[:, 1 + Li :])
        return self.with_types(self.image_to_fusion(img), self.text_to_fusion(txt))

    def embed_image(self, imgs: torch.Tensor) -> torch.Tensor:
        """Contrastive embedding from the image encoder alone: ``[B, C, H, W]`` -> ``[B, E]``."""
        x = self.embed_patches(imgs)
        _, pooled = self.image_encoder(x, torch.ones(x.shape[:2], dtype=torch.bool, device=x.device))
        return self.img_proj(pooled)

    def embed_text(self, ids: torch.Tensor, real_tokens: torch.Tensor) -> torch.Tensor:
        """Contrastive embedding from the text encoder alone over the ``real_tokens [B, L_t]`` of
        ``ids [B, L_t]`` -> ``[B, E]``."""
        _, pooled = self.text_encoder(self.embed_tokens(ids), real_tokens)
        return self.txt_proj(pooled)
