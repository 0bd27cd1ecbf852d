"""Masked autoencoder with a Vision Transformer backbone (MAE).

The encoder sees only the visible patches (plus a class token); a light decoder gets the encoded
visible tokens and a shared, learned mask token at every masked position, and predicts the pixels
of every patch; the loss is scored on the masked patches only. The mask is an argument (True =
masked), so any strategy of :mod:`engine.masking` plugs in.

Shapes: B batch, C channels, H/W pixels, P patch size, h/w patch grid (``h = H/P``, ``w = W/P``),
L = h*w patches in row-major order (patch ``(i, j)`` is index ``i*w + j``, the order of
``mask.flatten(1)`` for a ``[B, h, w]`` mask), L_vis visible patches, D width. Patches may be
rectangles ``P_h x P_w`` (``patch_size=(P_h, P_w)``): a spectrogram ``[B, 1, F, T]`` cut into
``F/P_h x T/P_w`` patches is AudioMAE's input (Huang et al. 2022), ``P*P`` then reads ``P_h*P_w``.

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (models_mae.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.masking.apply import gather_visible
from engine.models.layers import Block
from engine.models.pos_embed import sincos_2d
from engine.objectives import normalize_patches


class MaskedAutoencoderViT(nn.Module):
    """MAE with a ViT encoder and a narrow Transformer decoder.

    Args:
        img_size: ``(H, W)`` in pixels; ``patch_size`` must divide both.
        in_chans: ``C``.
        patch_size: ``P``, or ``(P_h, P_w)`` for rectangular patches (``P_h`` divides ``H``, ``P_w`` divides ``W``).
        embed_dim, depth, num_heads: encoder width ``D``, blocks, heads (``num_heads`` divides ``D``).
        decoder_embed_dim, decoder_depth, decoder_num_heads: the same for the decoder.
        mlp_ratio: MLP hidden width / block width.
        norm_pix_loss: score against per-patch normalised pixels (MAE sec. 4).
        mlp_hidden_dim, decoder_mlp_hidden_dim: the encoder's and the decoder's MLP hidden widths
            (a checkpoint's ``intermediate_size`` / ``decoder_intermediate_size``); None:
            ``int(width * mlp_ratio)``, the one ratio of masklab's own runs.
        layer_norm_eps: every LayerNorm's epsilon (MAE's 1e-6; a checkpoint's ``layer_norm_eps``).
        stored_pos_embed: keep ``pos_embed`` / ``decoder_pos_embed`` in the state dict (persistent
            buffers, still fixed: no gradient) so that a checkpoint's stored tensors are loaded and
            used. False (every masklab run): recomputed sin-cos buffers outside the state dict.
        input_mean, input_std: per-channel ``C`` floats: the model reads ``(x - mean) / std`` of
            pixels ``x`` in [0, 1] (an imported checkpoint's processor, e.g. ImageNet's), and
            :meth:`reconstruct` undoes it. None (every masklab run): the pixels as they are.

    Both widths must be multiples of 4 (2-D sin-cos positional embedding).

    Raises:
        ValueError: ``patch_size`` does not divide ``img_size``, a width is not a multiple of 4, or
            a head count does not divide its width. (:func:`engine.models.build_model` checks the
            config first and raises :class:`~engine.errors.ConfigError` naming the field.)

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners"; Huang et al.
    2022, "Masked Autoencoders that Listen" (spectrogram patches).
    """

    def __init__(
        self,
        img_size: tuple[int, int],
        in_chans: int,
        patch_size: int | tuple[int, int],
        embed_dim: int,
        depth: int,
        num_heads: int,
        decoder_embed_dim: int,
        decoder_depth: int,
        decoder_num_heads: int,
        mlp_ratio: float = 4.0,
        norm_pix_loss: bool = False,
        mlp_hidden_dim: int | None = None,
        decoder_mlp_hidden_dim: int | None = None,
        layer_norm_eps: float = 1e-6,
        stored_pos_embed: bool = False,
        input_mean: tuple[float, ...] | list[float] | None = None,
        input_std: tuple[float, ...] | list[float] | None = None,
    ):
        super().__init__()
        H, W = img_size
        P = patch_size
        ph, pw = patch_hw(P)
        if H % ph or W % pw:
            raise ValueError(f"patch_size {P} does not divide the image size {H}x{W}")
        self.img_size = (H, W)
        self.in_chans = in_chans
        self.patch_size = P
        self.grid_size = (H // ph, W // pw)  # (h, w)
        self.num_patches = self.grid_size[0] * self.grid_size[1]  # L
        self.norm_pix_loss = norm_pix_loss
        eps = layer_norm_eps
        self.input_norm = input_mean is not None or input_std is not None
        # Non-persistent: the processor's statistics belong to the config (an imported model's record),
        # so every checkpoint keeps the state-dict keys of its kind.
        self.register_buffer("input_mean", _channel_stat(input_mean, in_chans, 0.0), persistent=False)
        self.register_buffer("input_std", _channel_stat(input_std, in_chans, 1.0), persistent=False)

        # --- encoder -------------------------------------------------------------------------------
        self.patch_embed = nn.Conv2d(in_chans, embed_dim, kernel_size=(ph, pw), stride=(ph, pw))  # (B,C,H,W) -> (B,D,h,w)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        # Fixed (not learned) sin-cos embeddings; non-persistent buffers: recomputed, not checkpointed
        # (an imported model keeps its checkpoint's tensors: ``stored_pos_embed``).
        self.register_buffer("pos_embed", sincos_2d(embed_dim, self.grid_size, cls_token=True)[None],
                             persistent=stored_pos_embed)
        self.blocks = nn.ModuleList(
            [Block(embed_dim, num_heads, mlp_ratio, mlp_hidden=mlp_hidden_dim, eps=eps) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(embed_dim, eps=eps)

        # --- decoder -------------------------------------------------------------------------------
        self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        self.register_buffer(
            "decoder_pos_embed", sincos_2d(decoder_embed_dim, self.grid_size, cls_token=True)[None],
            persistent=stored_pos_embed,
        )
        self.decoder_blocks = nn.ModuleList(
            [Block(decoder_embed_dim, decoder_num_heads, mlp_ratio, mlp_hidden=decoder_mlp_hidden_dim, eps=eps)
             for _ in range(decoder_depth)]
        )
        self.decoder_norm = nn.LayerNorm(decoder_embed_dim, eps=eps)
        self.decoder_pred = nn.Linear(decoder_embed_dim, ph * pw * in_chans)  # pixels of one patch

        self.initialize_weights()

    def initialize_weights(self) -> None:
        """MAE's init: patch embedding like a Linear (xavier on the flattened kernel), tokens N(0, 0.02),
        Linear xavier-uniform with zero bias, LayerNorm (1, 0). Uses the global torch RNG."""
        w = self.patch_embed.weight.data
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.mask_token, std=0.02)
        self.apply(self.init_module)

    @staticmethod
    def init_module(m: nn.Module) -> None:
        """MAE's init of one module (``self.apply(init_module)``): Xavier-uniform linears, unit LayerNorms."""
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    # --- patches ----------------------------------------------------------------------------------

    def patchify(self, imgs: torch.Tensor) -> torch.Tensor:
        """``imgs [B, C, H, W] -> [B, L, P*P*C]``; each patch flattened as (p_row, p_col, channel)."""
        B, C, H, W = imgs.shape
        ph, pw = patch_hw(self.patch_size)
        h, w = H // ph, W // pw
        x = imgs.reshape(B, C, h, ph, w, pw)
        x = x.permute(0, 2, 4, 3, 5, 1)  # (B, h, w, P_h, P_w, C)
        return x.reshape(B, h * w, ph * pw * C)

    def unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, L, P*P*C] -> imgs [B, C, H, W]``, the inverse of :meth:`patchify` (``L = h*w``, row-major)."""
        B = x.shape[0]
        (ph, pw), C = patch_hw(self.patch_size), self.in_chans
        h, w = self.grid_size
        x = x.reshape(B, h, w, ph, pw, C)
        x = x.permute(0, 5, 1, 3, 2, 4)  # (B, C, h, P_h, w, P_w)
        return x.reshape(B, C, h * ph, w * pw)

    @staticmethod
    def flat_mask(mask: torch.Tensor, device: torch.device) -> torch.Tensor:
        """``[B, L]`` or ``[B, h, w]`` mask -> ``[B, L]`` bool on ``device``."""
        return mask.reshape(mask.shape[0], -1).to(device=device, dtype=torch.bool)

    # --- model ------------------------------------------------------------------------------------

    def forward_encoder(
        self, imgs: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Encode the visible patches only.

        Args:
            imgs: ``[B, C, H, W]``.
            mask: ``[B, L]`` bool (a ``[B, h, w]`` mask is flattened row-major), True = masked
                (removed). Moved to ``imgs.device``. Rows may have different visible counts: the
                batch is padded to the largest count ``V`` and padding slots are never attended to.

        Returns:
            ``(latent [B, 1 + V, D], ids_restore [B, L], pad [B, V] bool or None)``;
            ``latent[:, 0]`` is the class token; ``pad`` marks padding slots (None: no padding).

        Raises:
            ValueError: the size of ``mask`` is not ``L``.
        """
        return self._encode_patches(self.patchify(imgs), self.flat_mask(mask, imgs.device))

    def _encode_patches(
        self, patches: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """:meth:`forward_encoder` from ``patches = patchify(imgs)`` ``[B, L, P*P*C]`` and a flat ``[B, L]`` mask.

        The visible patches are gathered *before* the patch embedding, which runs as one Linear on
        their pixels: the same weights and weighted sums (up to float rounding) as the ``Conv2d`` (kernel = stride = P)
        of MAE on every patch, for a quarter of the work at ratio 0.75, and no transposed copy of
        a ``[B, D, h, w]`` feature map. ``patch_embed`` stays a ``Conv2d`` (same state-dict keys
        and shapes as every saved run); its weight ``[D, C, P_h, P_w]`` is permuted to the
        (p_row, p_col, channel) order of :meth:`patchify`.
        """
        vis, ids_keep, ids_restore, pad = gather_visible(patches, mask)  # (B, V, P*P*C)
        w = self.patch_embed.weight  # (D, C, P_h, P_w)
        x = F.linear(vis, w.permute(0, 2, 3, 1).reshape(w.shape[0], -1), self.patch_embed.bias)  # (B, V, D)
        x = x + self.pos_embed[0, 1:][ids_keep]  # fixed positions of the kept patches

        cls = (self.cls_token + self.pos_embed[:, :1, :]).expand(x.shape[0], -1, -1)  # (B, 1, D)
        x = torch.cat([cls, x], dim=1)  # (B, 1 + V, D)
        key_padding = None if pad is None else torch.cat([pad.new_zeros(pad.shape[0], 1), pad], dim=1)
        for blk in self.blocks:
            x = blk(x, key_padding)
        return self.norm(x), ids_restore, pad

    def forward_decoder(
        self, latent: torch.Tensor, ids_restore: torch.Tensor, pad: torch.Tensor | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The pixel head on :meth:`decoder_features` (same arguments): ``pred [B, L, P*P*C]`` in patch
        order (class token dropped), zeros outside ``rows``; normalised-pixel units when ``norm_pix_loss``."""
        h = self.decoder_features(latent, ids_restore, pad, rows)
        return self.place(self.decoder_pred(h), rows, *ids_restore.shape)

    def decoder_features(
        self, latent: torch.Tensor, ids_restore: torch.Tensor, pad: torch.Tensor | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The decoder's normalised output at every patch (or at the patches ``rows``), which the
        prediction heads read.

        Args:
            latent: ``[B, 1 + V, D]`` from :meth:`forward_encoder`.
            ids_restore: ``[B, L]`` from :meth:`forward_encoder`.
            pad: ``[B, V]`` padding slots from :meth:`forward_encoder` (they are masked patches and
                get the mask token like every other masked patch).
            rows: optional ``[B, L]`` bool, the patches to predict (the masked ones, which are all
                the loss reads). Every token still serves as a key and value in every decoder block;
                the last block's queries, output projection and MLP, the final norm and the pixel
                head run at these patches only (:meth:`~engine.models.layers.Block.forward_rows`),
                and the other patches come back as zeros. At ``rows`` the prediction equals that of
                ``rows=None`` to float rounding. None predicts every patch.

        Returns:
            ``[B, L, Dd]`` in patch order (class token dropped), or ``[M, Dd]`` at ``rows`` in their
            row-major order (:meth:`place` puts a head's output back on the grid).
        """
        x = self.decoder_embed(latent)  # (B, 1 + V, Dd)
        B, L = ids_restore.shape
        V = x.shape[1] - 1
        x_vis = x[:, 1:, :]  # (B, V, Dd)
        mask_token = self.mask_token.to(x.dtype)
        if pad is not None:
            x_vis = torch.where(pad.unsqueeze(-1), mask_token, x_vis)
        # Put the tokens back in grid order in one gather: patch l takes visible slot ids_restore[l]
        # when that slot exists (< V), the mask token otherwise. (MAE appends L - V mask tokens to the
        # V visible ones and unshuffles the [B, L, Dd] concatenation: the same values, one copy less.)
        if V == 0:  # every patch masked
            x_ = mask_token.expand(B, L, -1)
        else:
            slot = ids_restore.clamp(max=V - 1).unsqueeze(-1)  # (B, L, 1)
            x_ = torch.gather(x_vis, 1, slot.expand(-1, -1, x_vis.shape[2]))  # (B, L, Dd)
            x_ = torch.where((ids_restore >= V).unsqueeze(-1), mask_token, x_)  # (B, L, Dd): grid order
        x = torch.cat([x[:, :1, :], x_], dim=1)  # (B, 1 + L, Dd)
        x = x + self.decoder_pos_embed

        if rows is None:
            for blk in self.decoder_blocks:
                x = blk(x)
            return self.decoder_norm(x)[:, 1:, :]  # (B, L, Dd)
        rows = rows.to(device=x.device, dtype=torch.bool)
        for blk in self.decoder_blocks[:-1]:
            x = blk(x)
        if len(self.decoder_blocks):  # the class token is never predicted: not a query of the last block
            h = self.decoder_blocks[-1].forward_rows(x, torch.cat([rows.new_zeros(B, 1), rows], dim=1))  # (M, Dd)
        else:
            h = x[:, 1:, :][rows]
        return self.decoder_norm(h)  # (M, Dd), row-major order of rows

    @staticmethod
    def place(h: torch.Tensor, rows: torch.Tensor | None, B: int, L: int) -> torch.Tensor:
        """A head's output at ``rows`` (``[M, E]``) back on the grid, zeros elsewhere: ``[B, L, E]``
        (``h`` itself when ``rows`` is None)."""
        if rows is None:
            return h
        rows = rows.to(device=h.device, dtype=torch.bool)
        return h.new_zeros(B, L, h.shape[-1]).masked_scatter(rows.unsqueeze(-1), h)

    def normalize_input(self, imgs: torch.Tensor) -> torch.Tensor:
        """What the encoder reads: ``(imgs - input_mean) / input_std`` (``imgs`` itself without
        ``input_norm``), ``[B, C, H, W]``."""
        return (imgs - self.input_mean) / self.input_std if self.input_norm else imgs

    def to_pixels(self, x: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`normalize_input`: ``x * input_std + input_mean``, ``[B, C, H, W]``."""
        return x * self.input_std + self.input_mean if self.input_norm else x

    def forward_target(self, imgs: torch.Tensor) -> torch.Tensor:
        """The reconstruction target ``[B, L, P*P*C]``: ``patchify`` of the model's input
        (:meth:`normalize_input`), per-patch normalised when ``norm_pix_loss``
        (:func:`engine.objectives.normalize_patches`)."""
        target = self.patchify(self.normalize_input(imgs) if getattr(self, "input_norm", False) else imgs)  # SimMIM borrows this
        return normalize_patches(target) if self.norm_pix_loss else target

    def forward(self, imgs: torch.Tensor, mask: torch.Tensor, every_patch: bool | None = None) -> dict[str, torch.Tensor]:
        """Encode the visible patches, decode the masked ones (or every patch).

        Args:
            imgs: ``[B, C, H, W]``; mask: ``[B, L]`` (or ``[B, h, w]``) bool, True = masked.
            every_patch: predict the visible patches too. None (the default): only while autograd
                records (training), where the loss reads the masked patches alone and the last
                decoder block skips the rest (:meth:`forward_decoder`'s ``rows``); under
                ``torch.no_grad`` every patch is predicted, as a display needs.

        Returns:
            The outputs an objective reads (:data:`engine.objectives.OUTPUTS`): ``pred [B, L, P*P*C]``
            (zeros at visible patches when they are not predicted), ``target [B, L, P*P*C]``
            (:meth:`forward_target`) and ``mask [B, L]`` bool. MAE's loss is
            ``engine.objectives.masked_mse`` of them.
        """
        mask = self.flat_mask(mask, imgs.device)
        patches = self.patchify(self.normalize_input(imgs))  # (B, L, P*P*C): the encoder's input and the target
        latent, ids_restore, pad = self._encode_patches(patches, mask)
        if every_patch is None:
            every_patch = not torch.is_grad_enabled()
        pred = self.forward_decoder(latent, ids_restore, pad, rows=None if every_patch else mask)
        target = normalize_patches(patches) if self.norm_pix_loss else patches
        return {"pred": pred, "target": target, "mask": mask}

    @torch.no_grad()
    def features(self, imgs: torch.Tensor, keep: torch.Tensor | None = None, stats: bool = False) -> torch.Tensor:
        """Frozen features for probes: the encoder on every patch (nothing masked), final norm,
        patch tokens averaged (MAE's linear probing also uses pooled encoder features).

        Args:
            imgs: ``[B, C, H, W]``.
            keep: optional ``[B, L]`` bool: average only these patches (e.g. not the silence
                padding of a short clip); a row with none averages every patch.
            stats: mean and standard deviation of the patch tokens (:func:`pool_stats`) instead
                of the mean.

        Returns:
            ``[B, D]`` (``[B, 2D]`` with ``stats``).
        """
        mask = torch.zeros(imgs.shape[0], self.num_patches, dtype=torch.bool, device=imgs.device)
        latent, _, _ = self.forward_encoder(self.normalize_input(imgs), mask)
        return (pool_stats if stats else pool)(latent[:, 1:, :], keep)

    @torch.no_grad()
    def reconstruct(self, imgs: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """Reconstructions for display (no grad; the model has no dropout, so train/eval mode agree).

        With ``norm_pix_loss`` the prediction is mapped back to pixels with each target patch's own
        mean and variance (as MAE's visualisation does, which peeks at the true patch statistics).

        Args:
            imgs: ``[B, C, H, W]`` with pixel values in [0, 1].
            mask: ``[B, L]`` (or ``[B, h, w]``) bool, True = masked.

        Returns:
            ``{"pred_img": [B, C, H, W], "pasted": [B, C, H, W]}``, both clamped to [0, 1]: the
            prediction of every patch, and the original pixels at visible patches with the
            prediction at masked ones. With ``input_norm`` the prediction is mapped back to pixels
            (``* input_std + input_mean``) after the norm-pix step, as MAE's demo does.
        """
        mask = self.flat_mask(mask, imgs.device)
        latent, ids_restore, pad = self.forward_encoder(self.normalize_input(imgs), mask)
        return display_images(self, imgs, self.forward_decoder(latent, ids_restore, pad).float(), mask)


def patch_hw(patch_size: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``(P_h, P_w)`` of a square (``P``) or rectangular (``(P_h, P_w)``) patch size."""
    if isinstance(patch_size, int):
        return patch_size, patch_size
    ph, pw = patch_size
    return int(ph), int(pw)


def pool(tokens: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``tokens [B, L, D]`` over ``L``, over the ``keep [B, L]`` positions only when given
    (a row with none kept averages all of its positions). Returns ``[B, D]``."""
    if keep is None:
        return tokens.mean(dim=1)
    w = keep.to(device=tokens.device, dtype=tokens.dtype)
    w = torch.where(w.sum(dim=1, keepdim=True) > 0, w, torch.ones_like(w))
    return (tokens * w[..., None]).sum(dim=1) / w.sum(dim=1, keepdim=True)


def pool_stats(tokens: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Statistics pooling: the mean and the standard deviation (population) of ``tokens [B, L, D]``
    over ``L`` (the ``keep [B, L]`` positions only, as :func:`pool`). Returns ``[B, 2D]`` (means,
    then standard deviations), the utterance-level readout of x-vectors (Snyder et al. 2018), and
    the same statistics as the log-mel mean/std baseline of :func:`engine.eval.logmel_stats`."""
    mean = pool(tokens, keep)
    var = pool((tokens - mean[:, None, :]) ** 2, keep)
    return torch.cat([mean, var.clamp_min(0).sqrt()], dim=1)


def display_images(model, imgs: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """A patch model's prediction as display images (shared by MAE and SimMIM).

    With ``model.norm_pix_loss`` the prediction is mapped back with each true patch's own mean and
    variance (as MAE's visualisation does, which peeks at the true patch statistics), of the model's
    input; a model with an input normalisation (``input_norm``, an imported MAE's processor) then
    maps it back to pixels.

    Args:
        model: has ``patchify``, ``unpatchify`` and ``norm_pix_loss`` (and, with ``input_norm``,
            ``normalize_input`` and ``to_pixels``).
        imgs: ``[B, C, H, W]`` in [0, 1]; pred: ``[B, L, P*P*C]`` float, the model's units; mask: ``[B, L]`` bool.

    Returns:
        ``{"pred_img": [B, C, H, W], "pasted": [B, C, H, W]}`` clamped to [0, 1]: the prediction of
        every patch, and the original pixels at visible patches with the prediction at masked ones.
    """
    norm_in = getattr(model, "input_norm", False)
    target = model.patchify(model.normalize_input(imgs) if norm_in else imgs).float()
    if model.norm_pix_loss:
        pred = pred * (target.var(dim=-1, keepdim=True) + 1e-6).sqrt() + target.mean(dim=-1, keepdim=True)
    if norm_in:
        pred = model.patchify(model.to_pixels(model.unpatchify(pred)))
    pasted = torch.where(mask.unsqueeze(-1), pred, model.patchify(imgs).float())
    return {"pred_img": model.unpatchify(pred).clamp(0.0, 1.0), "pasted": model.unpatchify(pasted).clamp(0.0, 1.0)}


def _channel_stat(values, channels: int, default: float) -> torch.Tensor:
    """``[1, C, 1, 1]`` float32 of ``values`` (``default`` everywhere when None). Raises ValueError:
    not one value per channel, or (for the std, ``default`` 1) a value <= 0."""
    if values is None:
        return torch.full((1, channels, 1, 1), float(default))
    t = torch.tensor([float(v) for v in values], dtype=torch.float32)
    if t.numel() != channels:
        raise ValueError(f"input mean/std need {channels} values (one per channel), got {t.numel()}")
    if default == 1.0 and not bool((t > 0).all()):
        raise ValueError(f"input std must be positive, got {t.tolist()}")
    return t.reshape(1, channels, 1, 1)
