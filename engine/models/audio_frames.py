"""Frame-level masked prediction on log-mel spectrograms: a Transformer encoder over frame tokens
that predicts the masked frames or an EMA teacher's features (design: docs/architecture.md,
"Models and objectives").

Shapes: B batch, F mel bins, T frames, k frames per token (``patch_size``), L = T / k tokens, D width.

- **Input** ``[B, 1, F, T]`` (normalised log-mel); token ``l`` is frames ``l*k .. l*k + k - 1``
  flattened as (frame, mel bin), ``[B, L, k*F]``, projected to ``D`` plus 1-D sin-cos positions.
  A masked token's embedding is replaced by one learned mask embedding (mask over ``[B, L]``).
- ``target="mel"``: ``pred`` / ``target`` ``[B, L, k*F]``, scored by the run's objective on the
  masked tokens.
- ``target="ema"``: ``target`` ``[B, L, D]`` is the mean of the teacher's top ``top_k`` block
  outputs, each instance-normalised over time; ``pred`` ``[B, L, D]``; ``mel_pred`` ``[B, L, k*F]``
  from a readout head on the detached student. The teacher (:meth:`FrameTransformer.ema_update`)
  has frozen parameters: saved with the weights, not in the optimizer.

References: Baevski et al. 2020, "wav2vec 2.0" (masked frames replaced by a learned embedding);
Baevski et al. 2022, "data2vec: A General Framework for Self-supervised Learning in Speech, Vision
and Language" (EMA teacher, top-K instance-normalised targets, tau annealed from tau_0 to tau_e);
Hsu et al. 2021 (HuBERT).
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from engine.methods.teacher import TeacherParams, ema_decay_at, ema_update_, frozen_copy, top_k_targets
from engine.models.layers import Block
from engine.models.mae import MaskedAutoencoderViT, pool, pool_stats
from engine.models.pos_embed import sincos_1d


class FrameParams(TeacherParams):
    """Parameters of ``audio_frames`` (its ``task_params``): the prediction target and data2vec's teacher
    (:class:`engine.methods.teacher.TeacherParams`). Kept with the model they build
    (:func:`engine.models.build_model` reads them), the task re-exports them."""

    target: Literal["mel", "ema"] = Field("mel", description="mel: the masked frames; ema: an EMA teacher's features "
                                                             "(data2vec)")


class FrameEncoder(nn.Module):
    """Frame tokens -> contextual features: ``[B, L, k*F] -> [B, L, D]`` (and every block's output).

    Args:
        in_dim: ``k*F``; max_tokens: ``L`` (positions are fixed sin-cos of ``0..L-1``);
        embed_dim, depth, num_heads, mlp_ratio: the Transformer (pre-norm blocks, final LayerNorm).
    """

    def __init__(self, in_dim: int, max_tokens: int, embed_dim: int, depth: int, num_heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.proj = nn.Linear(in_dim, embed_dim)
        self.mask_emb = nn.Parameter(torch.zeros(embed_dim))
        self.register_buffer("pos_embed", sincos_1d(embed_dim, torch.arange(max_tokens)).float()[None], persistent=False)
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Encode ``tokens [B, L, k*F]``; masked positions (``mask [B, L]`` bool, True = masked) get
        the mask embedding instead of their frames.

        Returns:
            ``(out [B, L, D] after the final norm, [each block's output [B, L, D]])``.
        """
        x = self.proj(tokens)
        if mask is not None:
            x = torch.where(mask[..., None], self.mask_emb.to(x.dtype), x)
        x = x + self.pos_embed[:, : x.shape[1]]
        layers = []
        for blk in self.blocks:
            x = blk(x)
            layers.append(x)
        return self.norm(x), layers


class FrameTransformer(nn.Module):
    """Masked frame prediction (module docstring): ``forward(spec, mask) -> pred, target, mask``.

    Args:
        n_mels: ``F``; frames: ``T`` (a multiple of ``patch_size``); patch_size: ``k`` frames per token.
        embed_dim, depth, num_heads, mlp_ratio: the encoder.
        target: ``"mel"`` or ``"ema"``.
        top_k: data2vec's K, the teacher blocks averaged into the target (``1 <= top_k <= depth``).
        ema_decay, ema_decay_end, ema_anneal_steps: the teacher's tau, linear from ``ema_decay`` to
            ``ema_decay_end`` over ``ema_anneal_steps`` updates, then constant (data2vec: 0.999 ->
            0.9999 over 30k updates for speech).

    Raises:
        ValueError: ``patch_size`` does not divide ``frames``, a bad ``target`` or ``top_k``.

    References: Baevski et al. 2020 (wav2vec 2.0); Baevski et al. 2022 (data2vec).
    """

    def __init__(self, n_mels: int, frames: int, patch_size: int, embed_dim: int, depth: int, num_heads: int,
                 mlp_ratio: float = 4.0, target: str = "mel", top_k: int = 2, ema_decay: float = 0.999,
                 ema_decay_end: float = 0.9999, ema_anneal_steps: int = 1000):
        super().__init__()
        if frames % patch_size:
            raise ValueError(f"patch_size {patch_size} does not divide the {frames} frames of a window")
        if target not in ("mel", "ema"):
            raise ValueError(f"target must be 'mel' or 'ema', not {target!r}")
        if not 1 <= top_k <= depth:
            raise ValueError(f"top_k must be in [1, depth={depth}] (got {top_k})")
        self.n_mels, self.frames, self.patch_size = n_mels, frames, patch_size
        self.num_tokens = frames // patch_size
        self.target_kind, self.top_k = target, top_k
        self.ema_decay, self.ema_decay_end, self.ema_anneal_steps = ema_decay, ema_decay_end, ema_anneal_steps
        tok_dim = patch_size * n_mels
        self.encoder = FrameEncoder(tok_dim, self.num_tokens, embed_dim, depth, num_heads, mlp_ratio)
        self.head = nn.Linear(embed_dim, tok_dim if target == "mel" else embed_dim)
        self.readout = nn.Linear(embed_dim, tok_dim) if target == "ema" else None
        self.apply(_init)
        self.teacher = None
        if target == "ema":
            self.teacher = copy.deepcopy(self.encoder)
            frozen_copy(self.teacher)

    # --- frames -----------------------------------------------------------------------------------

    def tokenize(self, spec: torch.Tensor) -> torch.Tensor:
        """``spec [B, 1, F, T] (or [B, F, T]) -> [B, L, k*F]``, token ``l`` = frames ``l*k..l*k+k-1``."""
        if spec.dim() == 4:
            spec = spec[:, 0]
        B, Fm, T = spec.shape
        k = self.patch_size
        return spec.transpose(1, 2).reshape(B, T // k, k * Fm)

    def untokenize(self, tokens: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`tokenize`: ``[B, L, k*F] -> [B, 1, F, T]``."""
        B, L, _ = tokens.shape
        return tokens.reshape(B, L * self.patch_size, self.n_mels).transpose(1, 2)[:, None]

    # --- model ------------------------------------------------------------------------------------

    @torch.no_grad()
    def teacher_targets(self, tokens: torch.Tensor) -> torch.Tensor:
        """data2vec targets ``[B, L, D]``: the teacher on the unmasked tokens, the top ``top_k`` block
        outputs each instance-normalised over time (per channel), averaged."""
        _, layers = self.teacher(tokens)
        return top_k_targets(layers, self.top_k)

    def forward(self, spec: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """Predict the masked tokens of ``spec [B, 1, F, T]`` from the rest.

        Args:
            spec: normalised log-mel; mask: ``[B, L]`` bool, True = masked (moved to ``spec.device``).

        Returns:
            ``pred``, ``target`` ``[B, L, k*F]`` (mel) or ``[B, L, D]`` (ema), ``mask [B, L]``; with the
            EMA target also ``mel_pred`` and ``mel_target`` ``[B, L, k*F]`` (the readout head on the
            detached encoder output, and the frames).
        """
        mask = mask.reshape(mask.shape[0], -1).to(device=spec.device, dtype=torch.bool)
        tokens = self.tokenize(spec)
        out, _ = self.encoder(tokens, mask)
        pred = self.head(out)
        if self.target_kind == "mel":
            return {"pred": pred, "target": tokens, "mask": mask}
        return {"pred": pred, "target": self.teacher_targets(tokens), "mask": mask,
                "mel_pred": self.readout(out.detach()), "mel_target": tokens}

    def reconstruct_tokens(self, spec: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The predicted frames of every token ``[B, L, k*F]`` (the mel head, or the readout)."""
        out = self.forward(spec, mask)
        return out["pred"] if self.target_kind == "mel" else out["mel_pred"]

    def ema_decay_at(self, step: int) -> float:
        """tau after ``step`` updates: linear from ``ema_decay`` to ``ema_decay_end`` over
        ``ema_anneal_steps``, then ``ema_decay_end`` (data2vec)."""
        return ema_decay_at(step, self.ema_decay, self.ema_decay_end, self.ema_anneal_steps)

    @torch.no_grad()
    def ema_update(self, step: int) -> None:
        """``teacher <- tau * teacher + (1 - tau) * encoder`` (every parameter), tau of
        :meth:`ema_decay_at`; nothing without a teacher."""
        if self.teacher is None:
            return
        ema_update_(self.teacher.parameters(), self.encoder.parameters(), self.ema_decay_at(step))

    @torch.no_grad()
    def features(self, spec: torch.Tensor, keep: torch.Tensor | None = None, stats: bool = False) -> torch.Tensor:
        """Frozen features for probes: the (student) encoder on the unmasked input, tokens averaged
        (over ``keep [B, L]`` when given, e.g. not the padding), or with ``stats`` their mean and
        standard deviation (:func:`engine.models.mae.pool_stats`). Returns ``[B, D]`` (``[B, 2D]``)."""
        out, _ = self.encoder(self.tokenize(spec))
        return (pool_stats if stats else pool)(out, keep)


def _init(m: nn.Module) -> None:
    """MAE's init (Linear xavier-uniform with zero bias, LayerNorm (1, 0)); the mask embedding N(0, 0.02)."""
    MaskedAutoencoderViT.init_module(m)
    if isinstance(m, FrameEncoder):
        nn.init.normal_(m.mask_emb, std=0.02)
