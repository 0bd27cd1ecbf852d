"""Imported MAE models (arch ``mae_vit``): the builder, the checks every image importer shares, and
the preprocessing that travels with the model.

An imported MAE is masklab's own :class:`~engine.models.mae.MaskedAutoencoderViT`, built with the
checkpoint's widths, depths, head counts, MLP widths and LayerNorm epsilon, and with
``stored_pos_embed=True`` so that the checkpoint's positional embeddings are loaded as they are.
Its weights are stored under masklab's parameter names (``blocks.N.attn.qkv``, ``decoder_pred``...).

Preprocessing (``model.json``'s ``preprocessing``): ``{"size": [H, W], "channels": C, "mean": [C
floats], "std": [C floats]}``; the model reads ``(x - mean) / std`` of pixels ``x`` in [0, 1].

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import torch

from engine.models.mae import MaskedAutoencoderViT
from engine.pretrained.registry import PretrainedError, register_pretrained_arch

ARCH = "mae_vit"
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

#: The MAE repository's released encoders (models_mae.py): what their shapes cannot say (head counts).
MAE_PRESETS = {
    "ViT-B/16": {"patch_size": 16, "embed_dim": 768, "depth": 12, "num_heads": 12},
    "ViT-L/16": {"patch_size": 16, "embed_dim": 1024, "depth": 24, "num_heads": 16},
    "ViT-H/14": {"patch_size": 14, "embed_dim": 1280, "depth": 32, "num_heads": 16},
}
#: The decoder of every released MAE (512 wide, 8 deep, 16 heads, MLP ratio 4).
MAE_DECODER = {"decoder_embed_dim": 512, "decoder_depth": 8, "decoder_num_heads": 16, "decoder_mlp_hidden_dim": 2048}

#: ``arch_config`` keys (the builder's keyword arguments).
ARCH_KEYS = ("img_size", "in_chans", "patch_size", "embed_dim", "depth", "num_heads", "decoder_embed_dim",
             "decoder_depth", "decoder_num_heads", "mlp_hidden_dim", "decoder_mlp_hidden_dim", "layer_norm_eps",
             "norm_pix_loss")


@register_pretrained_arch(ARCH)
def build_mae_vit(arch_config: dict[str, Any]) -> MaskedAutoencoderViT:
    """An imported MAE's model from its ``arch_config``, in eval mode, positional embeddings stored.

    Its weights are MAE's initialisation at a fixed seed (0), so that a fresh decoder is the same on
    every import; the global RNG is left as it was.

    Raises:
        ValueError: the config does not describe a valid model (a head count that does not divide
            its width, a patch that does not divide the image...).
    """
    cfg = {k: arch_config[k] for k in ARCH_KEYS}
    patch = cfg.pop("patch_size")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return MaskedAutoencoderViT(img_size=tuple(cfg.pop("img_size")), patch_size=patch if isinstance(patch, int)
                                    else tuple(patch), stored_pos_embed=True, **cfg).eval()


def is_decoder_tensor(name: str) -> bool:
    """Whether the masklab parameter ``name`` belongs to the decoder (fresh when only an encoder is imported)."""
    return name.startswith("decoder_") or name == "mask_token"


def fresh_model(arch_config: dict[str, Any], file: Path) -> MaskedAutoencoderViT:
    """:func:`build_mae_vit` of ``arch_config`` (MAE's init at seed 0).

    Raises:
        PretrainedError: the architecture is not valid (naming ``file`` and the problem).
    """
    try:
        return build_mae_vit(arch_config)
    except (ValueError, TypeError, KeyError) as e:
        raise PretrainedError(f"{file}: unsupported MAE architecture ({e})") from e


def assemble_state_dict(file: Path, arch_config: dict[str, Any], tensors: dict[str, torch.Tensor],
                        origin: dict[str, str], expected_name: Callable[[str], str],
                        fresh_decoder: bool) -> tuple[dict[str, torch.Tensor], MaskedAutoencoderViT]:
    """Check a checkpoint's tensors (renamed to masklab's names) against the model of ``arch_config``.

    Args:
        file: the checkpoint, for messages.
        tensors: masklab parameter name -> tensor (q, k, v already fused into ``attn.qkv``).
        origin: masklab name -> the checkpoint's name(s) of that tensor, for messages.
        expected_name: masklab name -> the checkpoint's name it would have (for a missing tensor).
        fresh_decoder: the decoder's tensors come from :func:`fresh_model` (an encoder-only
            checkpoint); a decoder tensor in ``tensors`` is then refused like any stray tensor.

    Returns:
        ``(state_dict, model)``: every tensor of the model, float32, and the model they fit.

    Raises:
        PretrainedError: a tensor that fits nowhere, a missing tensor or a wrong shape, naming the
            file and the checkpoint's tensor.
    """
    model = fresh_model(arch_config, file)
    want = model.state_dict()
    for name in sorted(tensors):
        src = origin.get(name, name)
        if name not in want or (fresh_decoder and is_decoder_tensor(name)):
            raise PretrainedError(f"{file}: tensor {src} fits nowhere in the {ARCH} model of this checkpoint "
                                  f"(its config: {describe_arch(arch_config)})")
        if tuple(tensors[name].shape) != tuple(want[name].shape):
            raise PretrainedError(f"{file}: tensor {src} has shape {list(tensors[name].shape)}, but the model of this "
                                  f"checkpoint needs {list(want[name].shape)} ({describe_arch(arch_config)})")
        if not tensors[name].is_floating_point():
            raise PretrainedError(f"{file}: tensor {src} holds {tensors[name].dtype}, not floating-point weights")
    out = {}
    for name, t in want.items():
        if fresh_decoder and is_decoder_tensor(name):
            out[name] = t
        elif name not in tensors:
            raise PretrainedError(f"{file}: missing tensor {expected_name(name)} (the model of this checkpoint, "
                                  f"{describe_arch(arch_config)}, needs it)")
        else:
            out[name] = tensors[name].detach().to(torch.float32)
    return out, model


def describe_arch(c: dict[str, Any]) -> str:
    """One line: image, patch, encoder and decoder sizes of an ``arch_config``."""
    H, W = c["img_size"]
    return (f"image {H}x{W}x{c['in_chans']}, patch {c['patch_size']}, encoder {c['embed_dim']} wide {c['depth']} deep "
            f"{c['num_heads']} heads, decoder {c['decoder_embed_dim']} wide {c['decoder_depth']} deep "
            f"{c['decoder_num_heads']} heads")


def check_heads(file: Path, width: int, heads: int, option: str, what: str) -> int:
    """``heads`` if it divides ``width``. Raises :class:`PretrainedError` naming the option to change."""
    if heads < 1 or width % heads:
        raise PretrainedError(f"{file}: {option} {heads} does not divide the {what} width {width}; give a head count "
                              f"that divides it")
    return heads


def preprocessing(size: tuple[int, int], channels: int, mean: list[float], std: list[float], file: Path) -> dict:
    """The ``preprocessing`` record. Raises :class:`PretrainedError`: lengths other than ``channels``, a std <= 0."""
    mean, std = [float(v) for v in mean], [float(v) for v in std]
    if len(mean) != channels or len(std) != channels:
        raise PretrainedError(f"{file}: image mean {mean} and std {std} need {channels} values each (one per channel)")
    if not all(math.isfinite(v) for v in mean) or not all(math.isfinite(v) and v > 0 for v in std):
        raise PretrainedError(f"{file}: image std {std} must be positive and mean {mean} finite")
    return {"size": [int(size[0]), int(size[1])], "channels": int(channels), "mean": mean, "std": std}


def mean_std(prep: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, std)`` of a ``preprocessing`` record, each float32 ``[1, C, 1, 1]``."""
    return (torch.tensor(prep["mean"], dtype=torch.float32).reshape(1, -1, 1, 1),
            torch.tensor(prep["std"], dtype=torch.float32).reshape(1, -1, 1, 1))


def normalize(images: torch.Tensor, prep: dict[str, Any]) -> torch.Tensor:
    """The model's input: ``(images - mean) / std``, ``images [B, C, H, W]`` in [0, 1]."""
    mean, std = mean_std(prep)
    return (images - mean) / std


@torch.no_grad()
def predict_pixels(model: MaskedAutoencoderViT, images: torch.Tensor, mask: torch.Tensor,
                   prep: dict[str, Any]) -> torch.Tensor:
    """An imported MAE's prediction of every patch, in pixels.

    ``images`` are normalised (:func:`normalize`), the encoder sees the visible patches, the decoder
    predicts every patch; with ``norm_pix_loss`` the prediction is mapped back with each input
    patch's own mean and std (of the normalised pixels, unbiased variance + 1e-6, as MAE's loss
    and demo); then ``* std + mean`` and a clamp to [0, 1].

    Args:
        images: float32 ``[B, C, H, W]`` in [0, 1]; mask: bool ``[B, L]``, True = masked.

    Returns:
        float32 ``[B, C, H, W]`` in [0, 1].

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (sec. 4, norm-pix).
    """
    mean, std = mean_std(prep)
    x = (images - mean) / std
    latent, ids_restore, pad = model.forward_encoder(x, mask)
    pred = model.forward_decoder(latent, ids_restore, pad).float()  # (B, L, P*P*C), normalised units
    if model.norm_pix_loss:
        target = model.patchify(x)
        pred = pred * (target.var(dim=-1, keepdim=True) + 1e-6).sqrt() + target.mean(dim=-1, keepdim=True)
    return (model.unpatchify(pred) * std + mean).clamp(0.0, 1.0)
