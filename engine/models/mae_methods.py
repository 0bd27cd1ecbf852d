"""MAE with the targets, corruptions and extra terms of the methods beside pixel reconstruction.

One model, :class:`MethodMAE`, a :class:`~engine.models.mae.MaskedAutoencoderViT` whose decoder head
predicts what the method asks for; everything else (the encoder on the visible patches, the light
decoder) is MAE's. Its options are the ``image_mim`` task's parameters (:class:`ImageParams`, kept
with the model they build, as the audio frame model keeps its own):

- ``target: pixel`` (MAE, SimMIM), ``hog`` (MaskFeat: the masked patches' HOG,
  :func:`engine.methods.hog.patch_hog`) or ``latent`` (data2vec: an EMA teacher's top-K-block average
  at the masked patches, :mod:`engine.methods.teacher`; data2vec 2.0's MAE-style student). With a
  non-pixel target a readout head learns the pixels from the *detached* decoder features, so every
  run still shows reconstructions and pixel figures without the readout training the encoder.
- ``corruption: noise``: the selected patches are not hidden but get Gaussian noise of
  ``noise_sigma`` (pixel units) and stay visible; the target is still the clean input (a denoising
  autoencoder, Vincent et al. 2008).
- A ``contrastive`` objective term: InfoNCE between the projected, pooled encodings of two masked
  views of the same image (CMAE-style), temperature ``temperature``.
- ``masking.strategy: attention`` (AttMask): masks from the teacher's class-token attention; the
  model keeps an EMA teacher for it whatever its target.

Shapes as in :mod:`engine.models.mae`: B batch, L patches, D encoder width, Dd decoder width.

References: Wei et al. 2022 (MaskFeat); Baevski et al. 2022, 2023 (data2vec, data2vec 2.0); Huang
et al. 2023, "Contrastive Masked Autoencoders are Stronger Vision Learners" (CMAE); Kakogeorgiou et
al. 2022 (AttMask); Vincent et al. 2008, "Extracting and Composing Robust Features with Denoising
Autoencoders".
"""

from __future__ import annotations

import copy
import math
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from engine.methods.hog import hog_dim, patch_hog
from engine.methods.teacher import TeacherParams, ema_decay_at, ema_update_, frozen_copy, top_k_targets
from engine.models.mae import MaskedAutoencoderViT, display_images, pool

#: The model outputs beyond pred / target / mask: the readout's pixels and the two views' embeddings.
READOUT = ("px_pred", "px_target")


class ImageParams(TeacherParams):
    """``image_mim``'s parameters (``task_params``): the method's target, corruption and teacher."""

    target: Literal["pixel", "hog", "latent"] = Field(
        "pixel", description="pixel: the masked patches' pixels (MAE, SimMIM); hog: their HOG (MaskFeat); latent: an "
                             "EMA teacher's features (data2vec)")
    hog_bins: int = Field(9, ge=2, le=36, description="HOG orientation bins over [0, 180) degrees (MaskFeat: 9)")
    hog_cells: int = Field(1, ge=1, le=8, description="HOG cells per patch side (1: one histogram per patch, 2: 2x2)")
    corruption: Literal["mask", "noise"] = Field(
        "mask", description="mask: hide the selected patches (masked modeling); noise: add Gaussian noise to them and "
                            "keep them visible (denoising)")
    noise_sigma: float = Field(0.5, gt=0.0, le=10.0, description="noise standard deviation in pixel units ([0, 1] "
                               "pixels), corruption: noise")
    temperature: float = Field(0.2, gt=0.0, le=10.0, description="InfoNCE temperature of a contrastive term (CMAE, "
                               "SimCLR: 0.1-0.2)")
    proj_dim: int = Field(64, ge=4, le=4096, description="width of the projection head of a contrastive term")

    def plain(self, uses_attention: bool = False, contrastive: bool = False) -> bool:
        """Whether this is plain MAE (pixel target, masking, no teacher, no contrastive term)."""
        return self.target == "pixel" and self.corruption == "mask" and not uses_attention and not contrastive


class MethodMAE(MaskedAutoencoderViT):
    """MAE with a method's target head, readout, EMA teacher and projection head (module docstring).

    Args:
        (every :class:`~engine.models.mae.MaskedAutoencoderViT` argument), and
        params: :class:`ImageParams`.
        teacher: keep an EMA teacher (a latent target or attention-guided masking).
        contrastive: add the projection head and return ``emb_a``, ``emb_b``, ``logit_scale``.

    Raises:
        ValueError: HOG cells that do not divide the patch, a ``top_k`` above the depth, ``norm_pix_loss``
            with a non-pixel target, or a rectangular patch with a HOG target.
    """

    def __init__(self, *args, params: ImageParams, teacher: bool = False, contrastive: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.params = params
        ph, pw = (self.patch_size, self.patch_size) if isinstance(self.patch_size, int) else tuple(self.patch_size)
        if params.target != "pixel" and self.norm_pix_loss:
            raise ValueError("norm_pix_loss applies to the pixel target only")
        dd = self.decoder_pred.in_features
        if params.target == "hog":
            if ph != pw:
                raise ValueError("a HOG target needs square patches")
            if ph % params.hog_cells:
                raise ValueError(f"hog_cells {params.hog_cells} does not divide the {ph}-pixel patch")
            self.decoder_pred = nn.Linear(dd, hog_dim(params.hog_bins, params.hog_cells))
        elif params.target == "latent":
            self.decoder_pred = nn.Linear(dd, self.cls_token.shape[-1])
        self.readout = nn.Linear(dd, ph * pw * self.in_chans) if params.target != "pixel" else None
        if params.target == "latent" or teacher:
            if not 1 <= params.top_k <= len(self.blocks):
                raise ValueError(f"top_k must be in [1, depth={len(self.blocks)}] (got {params.top_k})")
            self.teacher = nn.Module()
            for name in ("patch_embed", "blocks", "norm"):
                setattr(self.teacher, name, copy.deepcopy(getattr(self, name)))
            self.teacher.cls_token = nn.Parameter(self.cls_token.detach().clone())
            frozen_copy(self.teacher)
        else:
            self.teacher = None
        D = self.cls_token.shape[-1]
        self.projector = (nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, params.proj_dim))
                          if contrastive else None)
        self.register_buffer("logit_scale", torch.tensor(math.log(1.0 / params.temperature)), persistent=False)
        for m in (self.decoder_pred, self.readout, self.projector):
            if m is not None:
                m.apply(self.init_module)

    # --- teacher ----------------------------------------------------------------------------------

    def _student_modules(self):
        return (self.patch_embed, self.blocks, self.norm)

    @torch.no_grad()
    def teacher_layers(self, imgs: torch.Tensor) -> list[torch.Tensor]:
        """The teacher's block outputs on every patch of ``imgs [B, C, H, W]``: ``[B, L, D]`` each
        (class token dropped)."""
        t = self.teacher
        patches = self.patchify(self.normalize_input(imgs))
        w = t.patch_embed.weight
        x = torch.nn.functional.linear(patches, w.permute(0, 2, 3, 1).reshape(w.shape[0], -1), t.patch_embed.bias)
        x = x + self.pos_embed[:, 1:]
        cls = (t.cls_token + self.pos_embed[:, :1]).expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        layers = []
        for blk in t.blocks:
            x = blk(x)
            layers.append(x[:, 1:])
        return layers

    @torch.no_grad()
    def teacher_targets(self, imgs: torch.Tensor) -> torch.Tensor:
        """data2vec's targets ``[B, L, D]`` (:func:`engine.methods.teacher.top_k_targets`)."""
        return top_k_targets(self.teacher_layers(imgs), self.params.top_k)

    def ema_decay_at(self, step: int) -> float:
        """The teacher's tau after ``step`` updates (:func:`engine.methods.teacher.ema_decay_at`)."""
        p = self.params
        return ema_decay_at(step, p.ema_decay, p.ema_decay_end, p.ema_anneal_steps)

    @torch.no_grad()
    def ema_update(self, step: int) -> None:
        """``teacher <- tau * teacher + (1 - tau) * encoder``; nothing without a teacher."""
        if self.teacher is None:
            return
        t = self.teacher
        student = [self.cls_token, *self.patch_embed.parameters(), *self.blocks.parameters(), *self.norm.parameters()]
        teacher = [t.cls_token, *t.patch_embed.parameters(), *t.blocks.parameters(), *t.norm.parameters()]
        ema_update_(teacher, student, self.ema_decay_at(step))

    # --- forward ----------------------------------------------------------------------------------

    def _encode(self, patches: torch.Tensor, mask: torch.Tensor, noise: torch.Tensor | None):
        """Encode: with ``noise [B, L, P*P*C]`` the selected patches are noised and every patch is
        visible; else the selected patches are hidden (MAE)."""
        if noise is None:
            return self._encode_patches(patches, mask)
        noisy = patches + noise * mask.unsqueeze(-1).to(patches.dtype)
        return self._encode_patches(noisy, torch.zeros_like(mask))

    def forward(self, imgs: torch.Tensor, mask: torch.Tensor, every_patch: bool | None = None,
                noise: torch.Tensor | None = None, mask_b: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The method's outputs for ``imgs [B, C, H, W]`` with the selected patches ``mask [B, L]``.

        Args:
            noise: ``[B, L, P*P*C]`` Gaussian noise for ``corruption: noise`` (pixel units).
            mask_b: ``[B, L]`` the second view's mask (a contrastive term).
            every_patch: as :meth:`MaskedAutoencoderViT.forward`.

        Returns:
            ``pred``, ``target`` ``[B, L, E]`` (E: pixels of a patch, HOG values, or D), ``mask``;
            with a non-pixel target also ``px_pred``, ``px_target`` ``[B, L, P*P*C]`` (the readout,
            on detached features); with a contrastive term ``emb_a``, ``emb_b`` ``[B, proj_dim]`` and
            ``logit_scale``.
        """
        mask = self.flat_mask(mask, imgs.device)
        B, L = mask.shape
        patches = self.patchify(self.normalize_input(imgs))
        latent, ids_restore, pad = self._encode(patches, mask, noise)
        if every_patch is None:
            every_patch = not torch.is_grad_enabled()
        rows = None if every_patch else mask
        h = self.decoder_features(latent, ids_restore, pad, rows)
        pred = self.place(self.decoder_pred(h), rows, B, L)
        p = self.params
        if p.target == "pixel":
            from engine.objectives import normalize_patches  # noqa: PLC0415 (kept out of the hot import path)

            target = normalize_patches(patches) if self.norm_pix_loss else patches
        elif p.target == "hog":
            ph = self.patch_size if isinstance(self.patch_size, int) else self.patch_size[0]
            target = patch_hog(self.normalize_input(imgs), ph, p.hog_bins, p.hog_cells)
        else:
            target = self.teacher_targets(imgs)
        out = {"pred": pred, "target": target.to(pred.dtype) if target.dtype != pred.dtype else target, "mask": mask}
        if self.readout is not None:
            out["px_pred"] = self.place(self.readout(h.detach()), rows, B, L)
            out["px_target"] = patches
        if self.projector is not None:
            if mask_b is None:
                mask_b = mask
            mask_b = self.flat_mask(mask_b, imgs.device)
            latent_b, _, pad_b = self._encode(patches, mask_b, noise)
            out["emb_a"] = self.projector(pool(latent[:, 1:], None if pad is None else ~pad))
            out["emb_b"] = self.projector(pool(latent_b[:, 1:], None if pad_b is None else ~pad_b))
            out["logit_scale"] = self.logit_scale
        return out

    def pixel_prediction(self, out: dict[str, torch.Tensor]) -> torch.Tensor:
        """The pixels ``[B, L, P*P*C]`` a forward's outputs predict: the readout, or the pixel head."""
        return out["px_pred"] if "px_pred" in out else out["pred"]

    def fixed_noise(self, imgs: torch.Tensor, seed: int = 0) -> torch.Tensor | None:
        """The noise of ``corruption: noise`` for evaluation and display: ``[B, L, P*P*C]`` from a
        generator seeded with ``seed`` (the same images get the same noise); None for masking."""
        if self.params.corruption != "noise":
            return None
        B, L = imgs.shape[0], self.num_patches
        g = torch.Generator().manual_seed(seed)
        n = torch.randn(B, L, self.patchify(imgs[:1]).shape[-1], generator=g)
        return (n * self.params.noise_sigma).to(imgs.device)

    @torch.no_grad()
    def reconstruct(self, imgs: torch.Tensor, mask: torch.Tensor, noise: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """:meth:`MaskedAutoencoderViT.reconstruct` through the method (the readout's pixels for a
        non-pixel target; with ``corruption: noise``, the denoised prediction of the image noised
        with ``noise``, by default :meth:`fixed_noise`)."""
        mask = self.flat_mask(mask, imgs.device)
        if noise is None:
            noise = self.fixed_noise(imgs)
        out = self.forward(imgs, mask, every_patch=True, noise=noise)
        return display_images(self, imgs, self.pixel_prediction(out).float(), mask)
