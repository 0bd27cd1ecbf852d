"""Models: masked-modeling architectures, registered by ``model.arch``, with size presets.

Public API:
    PRESETS — widths/depths by ``model.preset``
    MODEL_REGISTRY, register_model — builders by ``model.arch`` (later archs plug in here)
    build_model(cfg, image_shape) -> nn.Module
    count_parameters(model) -> int
    MaskedAutoencoderViT
    BertMLM, TEXT_PRESETS — masked language model (BERT) and its sizes
    SpanInfiller, SPAN_PRESETS, span_corrupt — T5-style span infilling and its sizes

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners"; Devlin et al. 2019,
"BERT"; Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer" (T5).
"""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.masking import grid_shape
from engine.models.mae import MaskedAutoencoderViT
from engine.models.bert import TEXT_PRESETS, BertMLM
from engine.models.span_infill import SPAN_PRESETS, SpanInfiller, span_corrupt
from engine.registry import registrar

__all__ = [
    "MODEL_REGISTRY", "PRESETS", "SPAN_PRESETS", "TEXT_PRESETS", "BertMLM", "MaskedAutoencoderViT", "SpanInfiller",
    "build_model", "count_parameters", "register_model", "span_corrupt",
]

# Widths/depths of the ``mae_vit`` arch. "base" is MAE's ViT-B/16 (encoder ~86M parameters at 224x224).
PRESETS: dict[str, dict[str, Any]] = {
    # ~1 min on a 2-core CPU for 8x8 digits with P=2 (L=16).
    "tiny": dict(embed_dim=96, depth=4, num_heads=4, decoder_embed_dim=64, decoder_depth=2, decoder_num_heads=4),
    "small": dict(embed_dim=192, depth=6, num_heads=6, decoder_embed_dim=128, decoder_depth=2, decoder_num_heads=4),
    "base": dict(embed_dim=768, depth=12, num_heads=12, decoder_embed_dim=512, decoder_depth=8, decoder_num_heads=16),
}

ModelBuilder = Callable[[RunConfig, tuple[int, int, int]], nn.Module]
MODEL_REGISTRY: dict[str, ModelBuilder] = {}


def register_model(arch: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Decorator: register a builder ``(cfg, image_shape) -> nn.Module`` under ``arch`` (``model.arch``).

    Raises:
        ValueError: ``arch`` is already registered.
    """
    return registrar(MODEL_REGISTRY, "model arch", arch)


@register_model("mae_vit")
def _build_mae_vit(cfg: RunConfig, image_shape: tuple[int, int, int]) -> MaskedAutoencoderViT:
    C, H, W = image_shape
    P = cfg.model.patch_size
    grid_shape((H, W), P)  # ConfigError naming model.patch_size
    try:
        sizes = PRESETS[cfg.model.preset]
    except KeyError:
        raise ConfigError(
            f"model.preset: unknown preset {cfg.model.preset!r}; known presets: {', '.join(PRESETS)}"
        ) from None
    if cfg.objective.norm_pix_loss and P * P * C < 2:
        raise ConfigError(
            f"objective.norm_pix_loss: needs at least 2 values per patch, but model.patch_size={P} with "
            f"{C} channel(s) gives {P * P * C}; use a larger patch or turn norm_pix_loss off"
        )
    return MaskedAutoencoderViT(
        img_size=(H, W), in_chans=C, patch_size=P, norm_pix_loss=cfg.objective.norm_pix_loss, **sizes
    )


def build_model(cfg: RunConfig, image_shape: tuple[int, int, int]) -> nn.Module:
    """Build the model of a run for images of ``image_shape = (C, H, W)``.

    Weights are initialised from the global torch RNG; seed it first for a reproducible init.

    Raises:
        ConfigError: unknown ``model.arch`` or ``model.preset`` (lists the known ones), a
            ``model.patch_size`` that does not divide ``H x W``, or ``objective.norm_pix_loss`` with
            one value per patch.
    """
    try:
        builder = MODEL_REGISTRY[cfg.model.arch]
    except KeyError:
        raise ConfigError(
            f"model.arch: unknown arch {cfg.model.arch!r}; known: {', '.join(sorted(MODEL_REGISTRY))}"
        ) from None
    return builder(cfg, tuple(int(s) for s in image_shape))


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of parameters (trainable ones by default; the fixed sin-cos embeddings are buffers, not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
