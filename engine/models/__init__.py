"""Models: masked-modeling architectures, registered by ``model.arch``, each with size presets.

Public API:
    MODEL_REGISTRY, register_model, get_model_spec — architectures by ``model.arch``
    PRESETS — the ``mae_vit`` presets (also the encoder sizes of ``simmim_vit``)
    build_model(cfg, **dims) -> nn.Module
    count_parameters(model) -> int
    MaskedAutoencoderViT, SimMIMViT — image models
    BertMLM, TEXT_PRESETS — masked language model (BERT) and its sizes
    HFBertMLM, BERT_HF_PRESETS (``bert_hf``) — BERT exactly as published (imported checkpoints)
    SpanInfiller, SPAN_PRESETS, span_corrupt — T5-style span infilling and its sizes
    AUDIO_MAE_PRESETS (``audio_mae_vit``: MaskedAutoencoderViT on spectrogram patches),
    FrameTransformer, FRAME_PRESETS (``frame_transformer``) — audio models and their sizes
    M3AE, M3AE_PRESETS (``m3ae``) — joint image-text masked autoencoder and its sizes
    FLAVA, FLAVA_PRESETS (``flava``) — image and text encoders with a fusion encoder, M3AE's decoder

A builder takes the run config and the data-dependent dimensions its task passes
(``image_shape=(C, H, W)`` for image models, ``vocab_size`` and ``max_len`` for text models,
``n_mels``, ``frames`` and ``patch=(P_f, P_t)`` for audio models, ``image_shape``, ``vocab_size``
and ``max_len`` for the paired model).
Models encode and decode; they never draw masks (the mask is an argument) and never own the loss
(they return named outputs, see :data:`engine.objectives.OUTPUTS`).

References: He et al. 2022 (MAE); Xie et al. 2022 (SimMIM); Devlin et al. 2019 (BERT); Raffel et al.
2020 (T5); Huang et al. 2022 (AudioMAE); Baevski et al. 2020, 2022 (wav2vec 2.0, data2vec); Geng et al.
2022 (M3AE); Singh et al. 2022 (FLAVA).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from torch import nn

from engine.errors import ConfigError
from engine.masking import get_masking, grid_shape
from engine.models.audio_frames import FrameParams, FrameTransformer
from engine.models.bert import TEXT_PRESETS, BertMLM
from engine.models.bert_hf import BERT_HF_PRESETS, HFBertMLM
from engine.models.bert_methods import MethodBertMLM, check_top_k, text_method
from engine.models.flava import FLAVA
from engine.models.m3ae import M3AE
from engine.models.mae import MaskedAutoencoderViT
from engine.models.mae_methods import ImageParams, MethodMAE
from engine.models.simmim import SimMIMViT
from engine.models.span_infill import SPAN_PRESETS, SpanInfiller, span_corrupt
from engine.registry import registrar
from engine.text.tokenizer import CLS_ID, PAD_ID, SEP_ID

__all__ = [
    "AUDIO_MAE_PRESETS", "BERT_HF_PRESETS", "FLAVA", "FLAVA_PRESETS", "FRAME_PRESETS", "M3AE", "M3AE_PRESETS", "MODEL_REGISTRY", "PRESETS", "SPAN_PRESETS", "TEXT_PRESETS", "BertMLM", "HFBertMLM",
    "FrameTransformer", "MaskedAutoencoderViT", "ModelSpec", "SimMIMViT", "SpanInfiller", "build_model",
    "count_parameters", "get_model_spec", "register_model", "span_corrupt",
]

# Widths/depths of the ``mae_vit`` arch. "base" is MAE's ViT-B/16 (encoder ~86M parameters at 224x224).
PRESETS: dict[str, dict[str, Any]] = {
    # ~1 min on a 2-core CPU for 8x8 digits with P=2 (L=16).
    "tiny": dict(embed_dim=96, depth=4, num_heads=4, decoder_embed_dim=64, decoder_depth=2, decoder_num_heads=4),
    "small": dict(embed_dim=192, depth=6, num_heads=6, decoder_embed_dim=128, decoder_depth=2, decoder_num_heads=4),
    "base": dict(embed_dim=768, depth=12, num_heads=12, decoder_embed_dim=512, decoder_depth=8, decoder_num_heads=16),
}

ModelBuilder = Callable[..., nn.Module]


@dataclass(frozen=True)
class ModelSpec:
    """A registered architecture: its builder ``(cfg, **dims) -> nn.Module``, presets and a summary."""

    name: str
    builder: ModelBuilder
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    summary: str = ""


MODEL_REGISTRY: dict[str, ModelSpec] = {}


def register_model(arch: str, presets: dict[str, dict[str, Any]], summary: str = "") -> Callable[[ModelBuilder], ModelBuilder]:
    """Decorator: register a builder ``(cfg, **dims) -> nn.Module`` as ``model.arch`` ``arch``.

    Raises:
        ValueError: ``arch`` is already registered.
    """

    def deco(fn: ModelBuilder) -> ModelBuilder:
        registrar(MODEL_REGISTRY, "model arch", arch)(ModelSpec(arch, fn, presets, summary))
        return fn

    return deco


def get_model_spec(arch: str) -> ModelSpec:
    """The registered architecture ``arch``. Raises :class:`ConfigError` naming ``model.arch``."""
    try:
        return MODEL_REGISTRY[arch]
    except KeyError:
        raise ConfigError(f"model.arch: unknown arch {arch!r}; known: {', '.join(sorted(MODEL_REGISTRY))}") from None


def _preset(cfg) -> dict[str, Any]:
    presets = get_model_spec(cfg.model.arch).presets
    try:
        return presets[cfg.model.preset]
    except KeyError:
        raise ConfigError(f"model.preset: unknown preset {cfg.model.preset!r}; known presets: {', '.join(presets)}") from None


def _image_dims(cfg, image_shape: tuple[int, int, int]) -> tuple[int, int, int, int]:
    """``(C, H, W, P)`` after the checks every patch model needs (ConfigError naming the field)."""
    C, H, W = image_shape
    P = cfg.model.patch_size
    grid_shape((H, W), P)  # ConfigError naming model.patch_size
    if cfg.objective.norm_pix_loss and P * P * C < 2:
        raise ConfigError(
            f"objective.norm_pix_loss: needs at least 2 values per patch, but model.patch_size={P} with "
            f"{C} channel(s) gives {P * P * C}; use a larger patch or turn norm_pix_loss off"
        )
    return C, H, W, P


@register_model("mae_vit", PRESETS, "MAE: ViT encoder on the visible patches, light decoder (He et al. 2022)")
def _build_mae_vit(cfg, *, image_shape: tuple[int, int, int]) -> MaskedAutoencoderViT:
    C, H, W, P = _image_dims(cfg, image_shape)
    kw = dict(img_size=(H, W), in_chans=C, patch_size=P, norm_pix_loss=cfg.objective.norm_pix_loss, **_preset(cfg))
    prm, attention, contrastive = image_method(cfg)
    if prm.plain(attention, contrastive):
        return MaskedAutoencoderViT(**kw)
    if prm.target != "pixel" and cfg.objective.norm_pix_loss:
        raise ConfigError(f"objective.norm_pix_loss: applies to the pixel target only (task_params.target is "
                          f"{prm.target!r}); turn it off")
    if prm.target == "hog" and P % prm.hog_cells:
        raise ConfigError(f"task_params.hog_cells: {prm.hog_cells} cells do not tile a {P}-pixel patch; use a divisor "
                          f"of model.patch_size ({P})")
    if (prm.target == "latent" or attention) and prm.top_k > kw["depth"]:
        raise ConfigError(f"task_params.top_k: {prm.top_k} is more than the {kw['depth']} blocks of preset "
                          f"{cfg.model.preset!r}")
    return MethodMAE(**kw, params=prm, teacher=attention, contrastive=contrastive)


def image_method(cfg) -> tuple[ImageParams, bool, bool]:
    """An ``image_mim`` config's method: ``(task_params as ImageParams, masks from attention, a
    contrastive term)``."""
    prm = ImageParams(**(cfg.task_params or {}))
    attention = "attention" in get_masking(cfg.masking.strategy).needs
    contrastive = any(t.loss == "contrastive" for t in cfg.objective.terms)  # weight 0 too: the objective reads it
    return prm, attention, contrastive


SIMMIM_PRESETS = {k: {n: v[n] for n in ("embed_dim", "depth", "num_heads")} for k, v in PRESETS.items()}


@register_model("simmim_vit", SIMMIM_PRESETS,
                "SimMIM: one ViT encoder over all patches, mask tokens, linear pixel head (Xie et al. 2022)")
def _build_simmim_vit(cfg, *, image_shape: tuple[int, int, int]) -> SimMIMViT:
    C, H, W, P = _image_dims(cfg, image_shape)
    return SimMIMViT(img_size=(H, W), in_chans=C, patch_size=P, norm_pix_loss=cfg.objective.norm_pix_loss,
                     **_preset(cfg))


@register_model("bert", TEXT_PRESETS, "BERT: pre-LN encoder, learned positions, tied MLM head at masked tokens (Devlin et al. 2019)")
def _build_bert(cfg, *, vocab_size: int, max_len: int) -> BertMLM:
    kw = dict(vocab_size=vocab_size, max_len=max_len, pad_id=PAD_ID, **_preset(cfg))
    prm, contrastive = text_method(cfg)  # text_mlm's method (engine.models.bert_methods)
    if prm.plain(contrastive):
        return BertMLM(**kw)
    check_top_k(prm, kw["depth"], cfg.model.preset)
    return MethodBertMLM(**kw, params=prm, contrastive=contrastive)


@register_model("bert_hf", BERT_HF_PRESETS, "BERT as published: post-LN encoder, embedding LayerNorm, token types, "
                "tied MLM head; what an imported BertForMaskedLM runs on (Devlin et al. 2019)")
def _build_bert_hf(cfg, *, vocab_size: int, max_len: int) -> HFBertMLM:
    return HFBertMLM(vocab_size=vocab_size, max_len=max_len, pad_id=PAD_ID, **_preset(cfg))


@register_model("t5_span", SPAN_PRESETS, "T5-style encoder-decoder infilling one sentinel span (Raffel et al. 2020)")
def _build_t5_span(cfg, *, vocab_size: int, max_len: int) -> SpanInfiller:
    return SpanInfiller(vocab_size=vocab_size, max_len=max_len, pad_id=PAD_ID, bos_id=CLS_ID, eos_id=SEP_ID,
                        **_preset(cfg))


# Audio sizes. "base" is AudioMAE's ViT-B (Huang et al. 2022: 768 wide, 12 blocks; decoder 512 x 16).
AUDIO_MAE_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(embed_dim=128, depth=4, num_heads=4, decoder_embed_dim=64, decoder_depth=2, decoder_num_heads=4),
    "small": dict(embed_dim=192, depth=6, num_heads=6, decoder_embed_dim=128, decoder_depth=2, decoder_num_heads=4),
    "base": dict(embed_dim=768, depth=12, num_heads=12, decoder_embed_dim=512, decoder_depth=16, decoder_num_heads=16),
}
# "base" is the size of wav2vec 2.0 / data2vec Base's Transformer (768 wide, 12 blocks).
FRAME_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(embed_dim=128, depth=4, num_heads=4),
    "small": dict(embed_dim=192, depth=6, num_heads=6),
    "base": dict(embed_dim=768, depth=12, num_heads=12),
}


@register_model("audio_mae_vit", AUDIO_MAE_PRESETS,
                "AudioMAE: ViT encoder on the visible spectrogram patches, light decoder (Huang et al. 2022)")
def _build_audio_mae(cfg, *, n_mels: int, frames: int, patch: tuple[int, int]) -> MaskedAutoencoderViT:
    pf, pt = patch
    if n_mels % pf or frames % pt:
        raise ConfigError(f"model.patch_size: a {pf} x {pt} patch does not tile {n_mels} mel bins x {frames} frames; "
                          "use a patch size that divides data.audio.n_mels")
    if cfg.objective.norm_pix_loss and pf * pt < 2:
        raise ConfigError("objective.norm_pix_loss: needs at least 2 values per patch; use a larger patch")
    return MaskedAutoencoderViT(img_size=(n_mels, frames), in_chans=1, patch_size=(pf, pt),
                                norm_pix_loss=cfg.objective.norm_pix_loss, **_preset(cfg))


@register_model("frame_transformer", FRAME_PRESETS,
                "frame Transformer: masked frames replaced by a mask embedding; predicts the frames or an EMA "
                "teacher's features (wav2vec 2.0 / data2vec)")
def _build_frame_transformer(cfg, *, n_mels: int, frames: int, patch: tuple[int, int]) -> FrameTransformer:
    prm = FrameParams(**cfg.task_params)
    if prm.top_k > _preset(cfg)["depth"]:
        raise ConfigError(f"task_params.top_k: {prm.top_k} is more than the {_preset(cfg)['depth']} blocks of preset "
                          f"{cfg.model.preset!r}")
    return FrameTransformer(n_mels, frames, patch[1], target=prm.target, top_k=prm.top_k, ema_decay=prm.ema_decay,
                            ema_decay_end=prm.ema_decay_end, ema_anneal_steps=prm.ema_anneal_steps, **_preset(cfg))


# Joint image-text sizes; "base" is M3AE's ViT-B encoder (768 wide, 12 blocks) with a light decoder.
M3AE_PRESETS: dict[str, dict[str, Any]] = {
    # ~1 M encoder parameters: trains on a CPU in minutes (32x32 images, 4x4 patches, short captions).
    "tiny": dict(embed_dim=128, depth=4, num_heads=4, decoder_embed_dim=96, decoder_depth=2, decoder_num_heads=4,
                 proj_dim=64),
    "small": dict(embed_dim=192, depth=6, num_heads=6, decoder_embed_dim=128, decoder_depth=2, decoder_num_heads=4,
                  proj_dim=128),
    "base": dict(embed_dim=768, depth=12, num_heads=12, decoder_embed_dim=512, decoder_depth=8, decoder_num_heads=16,
                 proj_dim=512),
}


@register_model("m3ae", M3AE_PRESETS,
                "M3AE: one encoder over visible image patches and caption tokens, light decoder, pixel and "
                "token heads, contrastive projections (Geng et al. 2022)")
def _build_m3ae(cfg, *, image_shape: tuple[int, int, int], vocab_size: int, max_len: int) -> M3AE:
    C, H, W, P = _image_dims(cfg, image_shape)
    return M3AE(img_size=(H, W), in_chans=C, patch_size=P, vocab_size=vocab_size, max_len=max_len, **_preset(cfg))


# FLAVA-style sizes: the image and text encoders and the fusion encoder share one width; "base" is
# FLAVA's (Singh et al. 2022: ViT-B/16 image and text encoders of 12 blocks, a fusion encoder of 6,
# 768 wide) with M3AE's light decoder. Image + text + fusion blocks: "tiny" 2 + 2 + 1 where M3AE's
# tiny has 4 (1.33 M encoder parameters against 1.10 M at 32x32, 8 px patches, 2,000 tokens),
# "small" 3 + 3 + 2 where M3AE's has 6 (4.11 M against 3.15 M); the decoders are the same.
FLAVA_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(embed_dim=128, image_depth=2, text_depth=2, fusion_depth=1, num_heads=4, decoder_embed_dim=96,
                 decoder_depth=2, decoder_num_heads=4, proj_dim=64),
    "small": dict(embed_dim=192, image_depth=3, text_depth=3, fusion_depth=2, num_heads=6, decoder_embed_dim=128,
                  decoder_depth=2, decoder_num_heads=4, proj_dim=128),
    "base": dict(embed_dim=768, image_depth=12, text_depth=12, fusion_depth=6, num_heads=12, decoder_embed_dim=512,
                 decoder_depth=8, decoder_num_heads=16, proj_dim=512),
}


@register_model("flava", FLAVA_PRESETS,
                "FLAVA-style: image and text encoders over their visible patches and tokens, a fusion encoder "
                "over both, M3AE's light decoder and heads, contrastive embeddings from the unimodal encoders "
                "(Singh et al. 2022)")
def _build_flava(cfg, *, image_shape: tuple[int, int, int], vocab_size: int, max_len: int) -> FLAVA:
    C, H, W, P = _image_dims(cfg, image_shape)
    return FLAVA(img_size=(H, W), in_chans=C, patch_size=P, vocab_size=vocab_size, max_len=max_len, **_preset(cfg))


def build_model(cfg, **dims: Any) -> nn.Module:
    """Build the model of a run; ``dims`` are the data-dependent sizes its task passes
    (``image_shape=(C, H, W)`` for image archs).

    Weights are initialised from the global torch RNG; seed it first for a reproducible init.

    A run that starts from an imported model (``model.init_from``) passes ``pretrained=`` its
    record (:func:`engine.pretrained.runs.record`, kept in ``task.json``): its architecture is
    built, not a preset (random weights: the caller loads them).

    Raises:
        ConfigError: unknown ``model.arch`` or ``model.preset`` (lists the known ones), a
            ``model.patch_size`` that does not divide ``H x W``, or ``objective.norm_pix_loss`` with
            one value per patch.
    """
    if "pretrained" in dims:
        from engine.pretrained.runs import build_from_record  # noqa: PLC0415 (engine.pretrained imports this package: a cycle at the top)

        return build_from_record(dims["pretrained"])
    return get_model_spec(cfg.model.arch).builder(cfg, **dims)


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of parameters (trainable ones by default; the fixed sin-cos embeddings are buffers, not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
