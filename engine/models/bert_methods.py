"""BERT with the targets and extra terms of the methods beside masked-token prediction.

One model, :class:`MethodBertMLM`, a :class:`~engine.models.bert.BertMLM` (its encoder, its MLM head,
its ``forward`` returning the logits at the masked positions, so evaluation, the fill-in box and the
probes read it as any BERT) with what a method adds. Its options are the ``text_mlm`` task's
parameters (:class:`MLMParams`, kept with the model they build, as the image and audio models keep
theirs); a plain run (token target, no contrastive term) builds the plain ``BertMLM``.

- ``target: token`` (BERT): cross-entropy of the MLM head on the masked tokens.
- ``target: latent`` (data2vec for text): an EMA teacher, a frozen copy of the encoder (token and
  position embeddings, blocks, final norm), reads the *unmasked* text; the student reads the masked
  text (BERT's 80/10/10) and a linear head regresses, at the masked positions, the average of the
  teacher's top ``top_k`` block outputs, each instance-normalised per channel over the text's real
  tokens (padding excluded: :func:`engine.methods.teacher.top_k_targets` with ``valid``). The MLM
  head becomes a readout: it reads the *detached* encoder output, so it learns to name the masked
  tokens without sending a gradient into the encoder, and every run still reports masked-token
  accuracy and answers the fill-in box. Its decoder is its own ``[V, D]`` matrix
  (``readout_decoder``), not the tied input embedding: detached, that embedding is a decoder the
  readout cannot shape (the latent loss does not grow it as BERT's cross-entropy does). Measured on
  fortunes (configs/method-data2vec-text.yaml cut to 300 steps, one CPU thread): val top-1 / top-5
  5.2% / 17.1% with its own decoder, 4.4% / 10.6% with the detached tied one (the student's figures
  identical in both), 5.3% / 17.9% for plain BERT MLM.
  data2vec's target is the FFN output before the last residual of each block; masklab's teachers
  take the block outputs (the audio and image models do the same).
- A ``contrastive`` objective term: two independently masked views of each text, the final hidden
  states averaged over the real tokens, a projector (Linear-GELU-Linear to ``proj_dim``), InfoNCE at
  ``temperature`` (``emb_a``, ``emb_b``, ``logit_scale``; :func:`engine.objectives.info_nce`).

Shapes: B batch, L tokens, D width, V vocabulary, M masked positions (``mlm_mask.sum()``, row-major),
E ``proj_dim``.

References: Devlin et al. 2019 (BERT); Baevski et al. 2022, "data2vec: A General Framework for
Self-supervised Learning in Speech, Vision and Language" (sec. 3.3 targets; its language setup:
BERT masking on the student, the top 8 of 12 blocks averaged, tau 0.999 -> 0.9999); Wu et al. 2020, "CLEAR:
Contrastive Learning for Sentence Representation" (MLM plus a contrastive term between two augmented
views); Oord et al. 2018 (InfoNCE).
"""

from __future__ import annotations

import copy
import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from engine.errors import ConfigError
from engine.methods.teacher import TeacherParams, ema_decay_at, ema_update_, frozen_copy, top_k_targets
from engine.models.bert import BertMLM
from engine.models.text_common import bert_init, masked_mean, padding_keys, trim_padding

__all__ = ["MLMParams", "MethodBertMLM", "check_top_k", "text_method"]


class MLMParams(TeacherParams):
    """``text_mlm``'s parameters (``task_params``): BERT's replacement of the predicted tokens
    (Devlin et al. 2019, sec. 3.1), the method's target, the teacher of a latent target
    (:class:`engine.methods.teacher.TeacherParams`) and the contrastive term's head."""

    mask_share: float = Field(0.8, ge=0.0, le=1.0, description="predicted tokens shown as [MASK]")
    random_share: float = Field(0.1, ge=0.0, le=1.0, description="predicted tokens shown as a random token")
    target: Literal["token", "latent"] = Field(
        "token", description="token: the masked tokens (BERT's cross-entropy); latent: an EMA teacher's features "
                             "of the unmasked text at the masked positions (data2vec, MSE)")
    temperature: float = Field(0.2, gt=0.0, le=10.0, description="InfoNCE temperature of a contrastive term")
    proj_dim: int = Field(64, ge=4, le=4096, description="width of the projection head of a contrastive term")

    @model_validator(mode="after")
    def _sum(self) -> "MLMParams":
        if self.mask_share + self.random_share > 1.0 + 1e-12:
            raise ValueError(f"mask_share + random_share must be <= 1 (got {self.mask_share + self.random_share:g})")
        return self

    def plain(self, contrastive: bool = False) -> bool:
        """Whether this is plain BERT MLM (token target, no contrastive term): the plain ``BertMLM``."""
        return self.target == "token" and not contrastive


def text_method(cfg) -> tuple[MLMParams, bool]:
    """A ``text_mlm`` config's method: ``(task_params as MLMParams, a contrastive term in
    objective.terms)``. A term of weight 0 counts: the objective still evaluates it (and logs
    ``loss/contrastive``), so the model must give its inputs; a sweep's weight-0 point is then the
    same model with the term switched off."""
    contrastive = any(t.loss == "contrastive" for t in cfg.objective.terms)
    return MLMParams(**(cfg.task_params or {})), contrastive


def check_top_k(prm: MLMParams, depth: int, preset: str) -> None:
    """Refuse a latent target averaging more teacher blocks than the model has.

    Raises:
        ConfigError: naming ``task_params.top_k``.
    """
    if prm.target == "latent" and prm.top_k > depth:
        raise ConfigError(f"task_params.top_k: {prm.top_k} is more than the {depth} blocks of preset {preset!r}; "
                          f"set it to at most {depth}")


class MethodBertMLM(BertMLM):
    """BERT MLM with a latent target's EMA teacher and regression head, and a contrastive term's
    projector (module docstring).

    Args:
        (every :class:`~engine.models.bert.BertMLM` argument), and
        params: :class:`MLMParams`.
        contrastive: add the projection head; :meth:`forward_outputs` then returns ``emb_a``,
            ``emb_b``, ``logit_scale``.

    Raises:
        ValueError: ``top_k`` outside ``[1, depth]`` with the latent target.

    References: Baevski et al. 2022 (data2vec); Wu et al. 2020 (CLEAR).
    """

    def __init__(self, *args, params: MLMParams, contrastive: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.params = params
        D = self.norm.normalized_shape[0]
        self.teacher = self.latent_head = self.readout_decoder = None
        if params.target == "latent":
            if not 1 <= params.top_k <= len(self.blocks):
                raise ValueError(f"top_k must be in [1, depth={len(self.blocks)}] (got {params.top_k})")
            self.teacher = nn.Module()
            for name in ("tok_embed", "blocks", "norm"):  # the encoder, as the student has it
                setattr(self.teacher, name, copy.deepcopy(getattr(self, name)))
            frozen_copy(self.teacher)
            self.teacher.eval()
            self.latent_head = nn.Linear(D, D)  # data2vec's regression head on the student's output
            self.readout_decoder = nn.Linear(D, self.vocab_size, bias=False)  # the readout's own (module docstring)
        self.projector = (nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, params.proj_dim))
                          if contrastive else None)
        self.register_buffer("logit_scale", torch.tensor(math.log(1.0 / params.temperature)), persistent=False)
        for m in (self.latent_head, self.readout_decoder, self.projector):
            if m is not None:
                m.apply(bert_init)

    def train(self, mode: bool = True) -> "MethodBertMLM":
        """Train mode for the student; the teacher always runs as in evaluation (no dropout), as data2vec's."""
        super().train(mode)
        if self.teacher is not None:
            self.teacher.eval()
        return self

    # --- teacher ----------------------------------------------------------------------------------

    def _encoder_params(self, enc: nn.Module) -> list[torch.Tensor]:
        return [*enc.tok_embed.parameters(), *enc.blocks.parameters(), *enc.norm.parameters()]

    @torch.no_grad()
    def teacher_layers(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        """The teacher's block outputs on the unmasked text ``input_ids [B, L]`` (padding keys
        ignored, ``attention_mask [B, L]``): ``[B, L, D]`` each, first block first."""
        t = self.teacher
        x = t.tok_embed(input_ids)
        key_padding = padding_keys(attention_mask, tuple(input_ids.shape)).to(x.device)
        layers = []
        for blk in t.blocks:
            x = blk(x, key_padding)
            layers.append(x)
        return layers

    @torch.no_grad()
    def teacher_targets(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """data2vec's targets, float32 ``[B, L, D]``: the teacher's top ``top_k`` block outputs, each
        instance-normalised per channel over each text's real tokens, averaged; 0 at padding."""
        valid = attention_mask.to(input_ids.device).bool()
        return top_k_targets(self.teacher_layers(input_ids, attention_mask), self.params.top_k, valid)

    def ema_decay_at(self, step: int) -> float:
        """The teacher's tau after ``step`` updates (:func:`engine.methods.teacher.ema_decay_at`)."""
        p = self.params
        return ema_decay_at(step, p.ema_decay, p.ema_decay_end, p.ema_anneal_steps)

    @torch.no_grad()
    def ema_update(self, step: int) -> None:
        """``teacher <- tau * teacher + (1 - tau) * encoder`` (embeddings, blocks, final norm); nothing
        without a teacher."""
        if self.teacher is None:
            return
        ema_update_(self._encoder_params(self.teacher), self._encoder_params(self), self.ema_decay_at(step))

    # --- forward ----------------------------------------------------------------------------------

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        """BERT's MLM head ``[M, D] -> [M, V]``; with the latent target a readout: detached features,
        its own decoder (:attr:`readout_decoder`), so the head trains and the encoder gets nothing from it."""
        if self.teacher is None:
            return super()._head(h)
        h = self.head_norm(F.gelu(self.head_dense(h.detach())))
        return F.linear(h, self.readout_decoder.weight, self.head_bias)

    def forward_outputs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        mlm_mask: torch.Tensor,
        clean_ids: torch.Tensor | None = None,
        input_ids_b: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """The named outputs the method's objective reads (:data:`engine.objectives.OUTPUTS`).

        Args:
            input_ids: ``[B, L]`` the corrupted text (:func:`engine.masking.mlm.apply_mlm`): view a.
            attention_mask: ``[B, L]`` (True / 1 = real token).
            mlm_mask: ``[B, L]`` bool, the predicted positions.
            clean_ids: ``[B, L]`` the text before corruption: the teacher's input (latent target).
            input_ids_b: ``[B, L]`` a second, independently masked corruption of the same texts
                (contrastive term; None: no embeddings, e.g. in validation).

        Returns:
            ``logits [M, V]`` (the MLM head at ``mlm_mask``; a readout on detached features with
            the latent target); with the latent target ``pred [B, L, D]`` (0 where not masked),
            ``target [B, L, D]`` float32, ``mask [B, L]``; with the projector and ``input_ids_b``
            ``emb_a``, ``emb_b`` ``[B, E]`` (the views' final hidden states averaged over the real
            tokens, projected) and ``logit_scale`` ``[]``. Trailing all-padding columns are cut
            first (:func:`~engine.models.text_common.trim_padding`).

        Raises:
            ValueError: ``clean_ids`` missing with the latent target, ``input_ids_b`` without a
                projector, or shapes that do not match (:meth:`BertMLM.forward_encoder`).
        """
        if self.teacher is not None and clean_ids is None:
            raise ValueError("clean_ids: the latent target needs the unmasked text for the teacher")
        if self.projector is None and input_ids_b is not None:
            raise ValueError("input_ids_b: this model has no projection head (built without a contrastive term)")
        if tuple(mlm_mask.shape) != tuple(input_ids.shape):
            raise ValueError(f"mlm_mask must be a bool [B, L] = {tuple(input_ids.shape)} tensor "
                             f"(got {mlm_mask.dtype} {tuple(mlm_mask.shape)})")
        extra = [t for t in (clean_ids, input_ids_b) if t is not None]
        ids, att, mask, *extra = trim_padding(attention_mask, input_ids, attention_mask, mlm_mask, *extra, keep=mlm_mask)
        clean = extra.pop(0) if clean_ids is not None else None
        ids_b = extra.pop(0) if input_ids_b is not None else None
        mask = mask.to(ids.device)
        hidden = self.forward_encoder(ids, att)  # (B, L, D)
        h = hidden[mask]  # (M, D)
        out = {"logits": self._head(h)}
        if self.teacher is not None:
            pred = hidden.new_zeros(hidden.shape)
            pred[mask] = self.latent_head(h).to(pred.dtype)
            out.update(pred=pred, target=self.teacher_targets(clean, att), mask=mask)
        if ids_b is not None:
            att_d = att.to(hidden.device)
            out["emb_a"] = self.projector(masked_mean(hidden, att_d))
            out["emb_b"] = self.projector(masked_mean(self.forward_encoder(ids_b, att), att_d))
            out["logit_scale"] = self.logit_scale
        return out
