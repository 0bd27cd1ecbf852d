"""Multimodal masked autoencoder (M3AE): one Transformer encoder over image patches and caption tokens.

Both token streams are embedded to one width ``D`` (patches by a ``P x P`` convolution, tokens by a
table), each with its modality embedding and its position embedding (2-D sin-cos for patches,
learned for tokens), after a learned ``[CLS]`` token. The encoder sees the *visible* tokens of
both modalities only (MAE's recipe, padded with key padding when rows keep different counts); a
light decoder gets the encoded visible tokens with each modality's learned mask token at its hidden
positions (plus the decoder's own position and modality embeddings), and two heads predict the
pixels of every patch and the token at every hidden caption position. Hiding a whole modality
(all caption tokens, or every patch) is cross-modal completion: the encoder then sees the other
modality alone and the decoder predicts the hidden one from it.

Contrastive features (CLIP-style): each modality encoded *alone* (the other modality absent, so the
pair's partner cannot leak in), its tokens averaged and projected to ``E`` dimensions; InfoNCE with
a learned temperature (:func:`engine.objectives.info_nce`) aligns them.

Shapes: B batch, C channels (3), H/W pixels, P patch, L_i = h*w patches, L_t caption positions
(tokenizer rows: ``[CLS] tokens [SEP] [PAD]...``; only real, non-special tokens take part), D encoder
width, D_d decoder width, V vocabulary, M hidden caption tokens in the batch, E contrastive width.

References: Geng et al. 2022, "Multimodal Masked Autoencoders Learn Transferable Representations"
(M3AE: one encoder over both modalities, visible tokens only, modality embeddings, per-modality
mask ratios 0.75 / 0.15 in its best setting, a light decoder); He et al. 2022 (MAE); Radford et al.
2021 (CLIP: InfoNCE with a learned temperature); Singh et al. 2022 (FLAVA: unimodal + joint passes;
:mod:`engine.models.flava` subclasses :class:`M3AE` with FLAVA's separate encoders).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from engine.masking.apply import gather_visible, restore_order
from engine.models.layers import Block
from engine.models.mae import MaskedAutoencoderViT, display_images, pool
from engine.models.pos_embed import sincos_2d

#: Modality ids of the modality embedding.
CLS, IMAGE, TEXT = 0, 1, 2


def scatter_back(latent: torch.Tensor, ids_restore: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Encoded kept tokens back at their positions: ``latent [B, V, D]`` and ``ids_restore [B, N]``
    from :func:`engine.masking.apply.gather_visible` of ``keep [B, N]`` (True = kept) ->
    ``[B, N, D]``, zeros where not kept (padding slots of a ragged batch included)."""
    B, N = ids_restore.shape
    full = torch.cat([latent, latent.new_zeros(B, N - latent.shape[1], latent.shape[2])], dim=1)
    return restore_order(full, ids_restore) * keep[..., None].to(latent.dtype)


class M3AE(nn.Module):
    """The joint encoder, light decoder and heads of the module docstring.

    Args:
        img_size: ``(H, W)``; in_chans: ``C``; patch_size: ``P`` (divides ``H`` and ``W``).
        vocab_size: ``V``; max_len: the longest caption row ``L_t`` (tokenizer ``max_len``).
        embed_dim, depth, num_heads: encoder width ``D``, blocks, heads.
        decoder_embed_dim, decoder_depth, decoder_num_heads: the decoder's (``D_d`` a multiple of 4).
        proj_dim: ``E``, the contrastive embedding width.
        mlp_ratio: MLP hidden width / block width.

    Raises:
        ValueError: ``patch_size`` does not divide the image, a width is not a multiple of 4.
    """

    def __init__(self, img_size: tuple[int, int], in_chans: int, patch_size: int, vocab_size: int, max_len: int,
                 embed_dim: int, depth: int, num_heads: int, decoder_embed_dim: int, decoder_depth: int,
                 decoder_num_heads: int, proj_dim: int = 128, mlp_ratio: float = 4.0):
        super().__init__()
        H, W = img_size
        if H % patch_size or W % patch_size:
            raise ValueError(f"patch_size {patch_size} does not divide the image size {H}x{W}")
        self.img_size, self.in_chans, self.patch_size = (H, W), in_chans, patch_size
        self.grid_size = (H // patch_size, W // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.vocab_size, self.max_len = vocab_size, max_len
        self.norm_pix_loss = False  # pixels are predicted as they are (display_images reads it)

        # --- encoder ------------------------------------------------------------------------------
        self.patch_embed = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.tok_embed = nn.Embedding(vocab_size, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.type_embed = nn.Embedding(3, embed_dim)  # CLS, IMAGE, TEXT
        self.register_buffer("img_pos", sincos_2d(embed_dim, self.grid_size)[None], persistent=False)
        self.txt_pos = nn.Parameter(torch.zeros(1, max_len, embed_dim))
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)

        # --- decoder ------------------------------------------------------------------------------
        self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim)
        self.img_mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        self.txt_mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        self.decoder_type_embed = nn.Embedding(3, decoder_embed_dim)
        self.register_buffer("decoder_img_pos", sincos_2d(decoder_embed_dim, self.grid_size)[None], persistent=False)
        self.decoder_txt_pos = nn.Parameter(torch.zeros(1, max_len, decoder_embed_dim))
        self.decoder_blocks = nn.ModuleList(
            [Block(decoder_embed_dim, decoder_num_heads, mlp_ratio) for _ in range(decoder_depth)])
        self.decoder_norm = nn.LayerNorm(decoder_embed_dim, eps=1e-6)
        self.pixel_head = nn.Linear(decoder_embed_dim, patch_size * patch_size * in_chans)
        self.token_head = nn.Linear(decoder_embed_dim, vocab_size)

        # --- contrastive --------------------------------------------------------------------------
        self.img_proj = nn.Linear(embed_dim, proj_dim, bias=False)
        self.txt_proj = nn.Linear(embed_dim, proj_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))  # CLIP's initial temperature 0.07
        self.initialize_weights()

    def initialize_weights(self) -> None:
        """MAE's init (xavier Linear and patch kernel, zero biases, LayerNorm (1, 0)), tokens and
        learned positions N(0, 0.02). Uses the global torch RNG."""
        w = self.patch_embed.weight.data
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        for p in (self.cls_token, self.txt_pos, self.img_mask_token, self.txt_mask_token, self.decoder_txt_pos,
                  self.tok_embed.weight, self.type_embed.weight, self.decoder_type_embed.weight):
            nn.init.normal_(p, std=0.02)
        self.apply(MaskedAutoencoderViT.init_module)

    patchify = MaskedAutoencoderViT.patchify
    unpatchify = MaskedAutoencoderViT.unpatchify

    # --- encoder ----------------------------------------------------------------------------------

    def embed_patches(self, imgs: torch.Tensor) -> torch.Tensor:
        """The patches embedded with their 2-D sin-cos positions: ``[B, C, H, W]`` -> ``[B, L_i, D]`` (row-major)."""
        return self.patch_embed(imgs).flatten(2).transpose(1, 2) + self.img_pos

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """The caption tokens embedded with their learned positions: ``[B, L_t]`` -> ``[B, L_t, D]``."""
        return self.tok_embed(ids.to(self.txt_pos.device)) + self.txt_pos[:, : ids.shape[1]]

    def with_types(self, x_img: torch.Tensor, x_txt: torch.Tensor) -> torch.Tensor:
        """The joint sequence: ``[CLS]``, then ``x_img [B, L_i, D]``, then ``x_txt [B, L_t, D]``, each
        plus its modality embedding -> ``[B, 1 + L_i + L_t, D]``."""
        types = self.type_embed.weight
        cls = (self.cls_token + types[CLS]).expand(x_img.shape[0], -1, -1)
        return torch.cat([cls, x_img + types[IMAGE], x_txt + types[TEXT]], dim=1)

    def embed(self, imgs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Every token of both modalities, embedded: ``imgs [B, C, H, W]``, ``ids [B, L_t]`` ->
        ``[B, 1 + L_i + L_t, D]`` (``[CLS]``, patches in row-major order, caption positions)."""
        return self.with_types(self.embed_patches(imgs), self.embed_tokens(ids))

    def encoder_inputs(self, imgs: torch.Tensor, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """What the joint encoder's blocks read, ``[B, 1 + L_i + L_t, D]`` (only the ``keep`` positions
        are gathered from it): here every token embedded (:meth:`embed`); FLAVA (a subclass) puts its
        unimodal encoders' states there."""
        return self.embed(imgs, ids)

    def forward_encoder(self, imgs: torch.Tensor, ids: torch.Tensor, keep: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Encode the kept tokens only.

        Args:
            imgs: ``[B, C, H, W]``; ids: ``[B, L_t]`` int64 caption tokens.
            keep: ``[B, 1 + L_i + L_t]`` bool, True = visible to the encoder (``[CLS]`` always is;
                hidden patches, hidden tokens, padding and special tokens are not).

        Returns:
            ``(latent [B, V, D], ids_restore [B, 1 + L_i + L_t], pad [B, V] bool or None)`` as
            :func:`engine.masking.apply.gather_visible` (``V`` the largest kept count).
        """
        keep = keep.to(imgs.device)
        x = self.encoder_inputs(imgs, ids, keep)
        x, _, ids_restore, pad = gather_visible(x, ~keep)
        for blk in self.blocks:
            x = blk(x, pad)
        return self.norm(x), ids_restore, pad

    def forward_decoder(self, latent: torch.Tensor, ids_restore: torch.Tensor, pad: torch.Tensor | None,
                        keep: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Decode every position: the kept ones from ``latent``, the others from their modality's
        mask token; positions that are not ``real`` (padding, special tokens) are ignored as keys.

        Args:
            latent, ids_restore, pad: from :meth:`forward_encoder`.
            keep: ``[B, 1 + L_i + L_t]`` bool as given to the encoder.
            real: ``[B, 1 + L_i + L_t]`` bool: the positions that exist (``[CLS]``, every patch, real tokens).

        Returns:
            ``[B, 1 + L_i + L_t, D_d]`` decoder states.
        """
        B, N = keep.shape
        Li = self.num_patches
        y = self.decoder_embed(latent)  # (B, V, D_d)
        if pad is not None:
            y = y.masked_fill(pad[..., None], 0.0)
        y = torch.cat([y, y.new_zeros(B, N - y.shape[1], y.shape[2])], dim=1)
        y = restore_order(y, ids_restore)  # (B, N, D_d), kept positions hold their latents
        fill = torch.cat([self.img_mask_token.expand(B, 1 + Li, -1),
                          self.txt_mask_token.expand(B, N - 1 - Li, -1)], dim=1).to(y.dtype)
        y = torch.where(keep[..., None].to(y.device), y, fill)
        types = self.decoder_type_embed.weight
        y = y + torch.cat([types[CLS].expand(B, 1, -1), (self.decoder_img_pos + types[IMAGE]).expand(B, -1, -1),
                           (self.decoder_txt_pos[:, : N - 1 - Li] + types[TEXT]).expand(B, -1, -1)], dim=1)
        key_padding = ~real.to(y.device)
        for blk in self.decoder_blocks:
            y = blk(y, key_padding)
        return self.decoder_norm(y)

    # --- the joint pass ---------------------------------------------------------------------------

    def forward(self, imgs: torch.Tensor, ids: torch.Tensor, real_tokens: torch.Tensor, img_mask: torch.Tensor,
                txt_mask: torch.Tensor, contrastive: bool = False) -> dict[str, torch.Tensor]:
        """Joint masked modeling of a batch of pairs.

        Args:
            imgs: ``[B, C, H, W]`` in [0, 1].
            ids: ``[B, L_t]`` int64 caption tokens (the originals: hidden ones are never embedded).
            real_tokens: ``[B, L_t]`` bool: real, non-special tokens (the ones that can be hidden or shown).
            img_mask: ``[B, L_i]`` (or ``[B, h, w]``) bool, True = patch hidden; all True hides the image.
            txt_mask: ``[B, L_t]`` bool, True = token hidden (predicted); only ``real_tokens`` count;
                all real tokens True hides the caption.
            contrastive: also compute the unimodal embeddings (two more encoder passes).

        Returns:
            The outputs objectives read (:data:`engine.objectives.OUTPUTS`): ``pred``, ``target``
            ``[B, L_i, P*P*C]`` and ``mask [B, L_i]`` (the image), ``logits [M, V]`` and ``labels
            [M]`` (the hidden caption tokens, row-major), and with ``contrastive`` ``emb_a [B, E]``
            (image), ``emb_b [B, E]`` (caption), ``logit_scale []``.
        """
        dev = imgs.device
        B = imgs.shape[0]
        img_mask = img_mask.reshape(B, -1).to(dev, torch.bool)
        real_tokens, txt_mask, ids = real_tokens.to(dev), txt_mask.to(dev) & real_tokens.to(dev), ids.to(dev)
        cls = torch.ones(B, 1, dtype=torch.bool, device=dev)
        keep = torch.cat([cls, ~img_mask, real_tokens & ~txt_mask], dim=1)
        real = torch.cat([cls, torch.ones_like(img_mask), real_tokens], dim=1)
        latent, ids_restore, pad = self.forward_encoder(imgs, ids, keep)
        y = self.forward_decoder(latent, ids_restore, pad, keep, real)
        Li = self.num_patches
        out = {"pred": self.pixel_head(y[:, 1 : 1 + Li]), "target": self.patchify(imgs), "mask": img_mask,
               "logits": self.token_head(y[:, 1 + Li :][txt_mask]), "labels": ids[txt_mask]}
        if contrastive:
            out.update(emb_a=self.embed_image(imgs), emb_b=self.embed_text(ids, real_tokens), logit_scale=self.logit_scale)
        return out

    # --- unimodal passes (contrastive, retrieval, probes) ------------------------------------------

    def encode(self, imgs: torch.Tensor, ids: torch.Tensor, show_image: torch.Tensor | bool,
               show_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode with whole modalities shown or absent (nothing partly masked).

        Args:
            imgs: ``[B, C, H, W]``; ids: ``[B, L_t]``.
            show_image: bool (or ``[B]`` bool): the patches are visible.
            show_tokens: ``[B, L_t]`` bool: the visible tokens (all False: no caption).

        Returns:
            ``(image_pool [B, D], text_pool [B, D])``: the encoder's states averaged over the
            visible patches and over the visible tokens (a modality that is absent gives the
            ``[CLS]`` state instead).
        """
        B, Li = imgs.shape[0], self.num_patches
        dev = imgs.device
        show_image = torch.as_tensor(show_image, device=dev).expand(B)
        show_tokens = show_tokens.to(dev)
        keep = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=dev), show_image[:, None].expand(B, Li),
                          show_tokens], dim=1)
        latent, ids_restore, pad = self.forward_encoder(imgs, ids, keep)
        full = scatter_back(latent, ids_restore, keep)  # (B, N, D), zeros where not kept
        cls = full[:, :1]
        img = torch.where(show_image[:, None, None], full[:, 1 : 1 + Li], cls)
        txt = torch.where(show_tokens.any(dim=1)[:, None, None], full[:, 1 + Li :], cls)
        keep_txt = show_tokens | ~show_tokens.any(dim=1, keepdim=True)
        return pool(img), pool(txt, keep_txt)

    def embed_image(self, imgs: torch.Tensor) -> torch.Tensor:
        """Contrastive embedding of the images alone: ``[B, C, H, W]`` -> ``[B, E]``."""
        B = imgs.shape[0]
        ids = torch.zeros(B, 1, dtype=torch.long, device=imgs.device)
        img, _ = self.encode(imgs, ids, True, torch.zeros(B, 1, dtype=torch.bool, device=imgs.device))
        return self.img_proj(img)

    def embed_text(self, ids: torch.Tensor, real_tokens: torch.Tensor) -> torch.Tensor:
        """Contrastive embedding of the captions alone: ``ids``, ``real_tokens [B, L_t]`` -> ``[B, E]``."""
        B = ids.shape[0]
        blank = torch.zeros(B, self.in_chans, *self.img_size, device=ids.device)
        _, txt = self.encode(blank, ids, False, real_tokens)
        return self.txt_proj(txt)

    @torch.no_grad()
    def reconstruct(self, imgs: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """Display images of a prediction ``pred [B, L_i, P*P*C]`` under ``mask [B, L_i]``:
        ``{"pred_img", "pasted"}`` ``[B, C, H, W]`` in [0, 1] (:func:`engine.models.mae.display_images`)."""
        return display_images(self, imgs, pred.float(), mask)
