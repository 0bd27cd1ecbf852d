"""What the paired tasks (image-caption ``paired``, audio-text ``paired_audio``), their previews and
their retrieval box share: the constants, the task parameters of the caption's masking and the
cross-modal completion, and the caption masks of the visualisation pairs."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from engine.config import MaskingConfig, RunConfig
from engine.errors import ConfigError
from engine.masking import get_masking, strategies_on
from engine.tasks.text.common import draw_text_mask, ensure_one_masked

EVAL_MAX_ROWS = 2048
EVAL_CHUNK = 256
PROBE_ROWS = 256
DEFAULT_PATCH = 4
#: The objective when the config gives none: M3AE's pixel and token losses (token weight 0.5 as
#: M3AE) and CLIP's InfoNCE on the unimodal embeddings, at the measured recipe's weight 0.5
#: (configs/paired-tuxpaint.yaml; 0.1 retrieved worse, bench/README.md).
DEFAULT_TERMS = (("mse", 1.0), ("cross_entropy", 0.5), ("contrastive", 0.5))
#: Tokenizer defaults for captions (short: Tux Paint's are 2 to 30 words).
DEFAULT_TOKENIZER = {"vocab_size": 2000, "max_len": 48}
OUTPUTS = {"pred", "target", "mask", "logits", "labels", "emb_a", "emb_b", "logit_scale"}


class PairedParams(BaseModel):
    """The caption's masking and the cross-modal completion shares (:mod:`engine.tasks.paired`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text_strategy: str = Field("random", description="masking strategy of the caption tokens")
    text_ratio: float = Field(0.15, ge=0.0, le=1.0, description="share of caption tokens hidden (M3AE: 0.15)")
    text_params: dict = Field(default_factory=dict, validate_default=True, description="the text strategy's own parameters")
    caption_completion: float = Field(0.25, ge=0.0, le=1.0,
                                      description="share of training pairs whose whole caption is hidden (their image shown whole)")
    image_completion: float = Field(0.0, ge=0.0, le=1.0, description="share of training pairs whose whole image is hidden (their caption shown whole)")

    @field_validator("text_strategy")
    @classmethod
    def _strategy(cls, name: str) -> str:
        text = ", ".join(strategies_on("tokens-1d"))
        try:
            s = get_masking(name)
        except ConfigError:
            raise ValueError(f"unknown strategy {name!r}; strategies for text: {text}") from None
        if not s.works_on("tokens-1d"):
            raise ValueError(f"{name!r} does not apply to token sequences; strategies for text: {text}")
        return name

    @field_validator("text_params")
    @classmethod
    def _params(cls, params: dict, info: ValidationInfo) -> dict:
        if "text_strategy" not in info.data:  # the strategy was refused already
            return params
        try:
            return get_masking(info.data["text_strategy"]).parse_params(params).model_dump(mode="json")
        except ConfigError as e:
            raise ValueError(str(e).split(": ", 1)[-1]) from None

    @model_validator(mode="after")
    def _shares(self) -> "PairedParams":
        if self.caption_completion + self.image_completion > 1.0 + 1e-12:
            raise ValueError("caption_completion + image_completion must be <= 1 (a pair hides one whole modality at most)")
        return self

    @classmethod
    def of(cls, task_params: dict) -> "PairedParams":
        """The caption and completion fields of either paired task's ``task_params`` (the audio-text
        task's own fields, e.g. ``text_source``, left out)."""
        return cls(**{k: v for k, v in task_params.items() if k in cls.model_fields})

    def text_masking(self) -> MaskingConfig:
        """The caption's masking as a ``masking`` config (for :func:`engine.masking.draw_mask`)."""
        return MaskingConfig(strategy=self.text_strategy, ratio=self.text_ratio, params=self.text_params)


def caption_vis_masks(cfg: RunConfig, rows: dict[str, torch.Tensor]) -> torch.Tensor:
    """The caption masks of the run's fixed visualisation pairs, ``[N, L_t]`` bool: ``task_params.text_*``
    from ``torch.Generator().manual_seed(train.seed)``, at least one hidden token per caption.
    ``rows``: the captions' :func:`~engine.tasks.text.common.text_rows`."""
    g = torch.Generator().manual_seed(cfg.train.seed)
    text_cfg = caption_masking(cfg)
    txt = draw_text_mask(text_cfg, rows, g)
    return ensure_one_masked(txt, rows["eligible"], g)


def caption_masking(cfg: RunConfig) -> MaskingConfig:
    """The caption's masking of paired config ``cfg`` (``task_params.text_*``) as a ``masking`` section."""
    return PairedParams.of(cfg.task_params).text_masking()
