"""Published-style MAE checkpoints for the image import tests, made with transformers from random configs.

- :func:`hf_model`: a tiny ``ViTMAEForPreTraining`` / ``ViTMAEModel`` whose every tensor (positional
  embeddings included) is moved away from its initialisation, so that nothing passes by luck of an init;
- :func:`save_hf_folder`: its ``save_pretrained`` folder (+ ``preprocessor_config.json``);
- :func:`save_mae_pth`: the same weights in the MAE repository's layout (``{"model": state_dict}``,
  timm names, q/k/v fused into ``qkv``): the conversion the importer undoes;
- :func:`hf_prediction`: transformers' own prediction of every patch under a given mask, in pixels,
  as ``python -m engine predict`` must give it.

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from transformers import ViTMAEConfig, ViTMAEForPreTraining, ViTMAEModel

#: A tiny ViTMAE with MAE's LayerNorm epsilon (transformers' default is 1e-12), encoder and decoder
#: MLP widths that no single ratio gives.
TINY = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=96, decoder_hidden_size=32, decoder_num_hidden_layers=2, decoder_num_attention_heads=4,
            decoder_intermediate_size=80, layer_norm_eps=1e-6)
MEAN = [0.45, 0.5, 0.4]
STD = [0.25, 0.2, 0.3]


def hf_model(cls=ViTMAEForPreTraining, seed: int = 0, **overrides):
    """A ``cls`` (``ViTMAEForPreTraining`` or ``ViTMAEModel``) of :data:`TINY` + ``overrides``, every
    tensor plus ``0.02 * randn``, in eval mode."""
    torch.manual_seed(seed)
    model = cls(ViTMAEConfig(**{**TINY, **overrides}))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    return model.eval()


def save_hf_folder(model, folder: Path, mean=MEAN, std=STD) -> Path:
    """``model.save_pretrained(folder)`` and a ``preprocessor_config.json`` (``mean``/``std``; none when None)."""
    model.save_pretrained(folder)
    if mean is not None:
        size = model.config.image_size
        (folder / "preprocessor_config.json").write_text(json.dumps({
            "image_processor_type": "ViTImageProcessor", "do_normalize": True, "do_rescale": True,
            "rescale_factor": 1 / 255, "do_resize": True, "image_mean": list(mean), "image_std": list(std),
            "size": {"height": size, "width": size}}), encoding="utf-8")
    return folder


_LAYER = {"layernorm_before": "norm1", "layernorm_after": "norm2", "attention.o_proj": "attn.proj",
          "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
_TOP = {"vit.embeddings.cls_token": "cls_token", "vit.embeddings.position_embeddings": "pos_embed",
        "vit.embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
        "vit.embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
        "vit.layernorm.weight": "norm.weight", "vit.layernorm.bias": "norm.bias"}


def mae_state_dict(model: ViTMAEForPreTraining) -> dict[str, torch.Tensor]:
    """The weights of a transformers ``ViTMAEForPreTraining`` under the MAE repository's (timm's) names,
    q, k and v fused into ``qkv`` as ``cat([q, k, v])`` along the output dimension."""
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out: dict[str, torch.Tensor] = {}
    for key, t in sd.items():
        m = re.match(r"^(vit\.layers|decoder\.decoder_layers)\.(\d+)\.(.+)\.(weight|bias)$", key)
        if m:
            blocks = "blocks" if m.group(1) == "vit.layers" else "decoder_blocks"
            part, wb = m.group(3), m.group(4)
            if part in ("attention.q_proj", "attention.k_proj", "attention.v_proj"):
                if part.endswith("q_proj"):
                    stem = f"{m.group(1)}.{m.group(2)}.attention"
                    out[f"{blocks}.{m.group(2)}.attn.qkv.{wb}"] = torch.cat(
                        [sd[f"{stem}.{x}_proj.{wb}"] for x in "qkv"], dim=0)
                continue
            out[f"{blocks}.{m.group(2)}.{_LAYER[part]}.{wb}"] = t
        elif key in _TOP:
            out[_TOP[key]] = t
        elif key.startswith("decoder."):
            out[key.removeprefix("decoder.")] = t
        else:
            raise KeyError(f"no MAE name for {key}")
    return out


def save_mae_pth(state_dict: dict[str, torch.Tensor], file: Path) -> Path:
    """``torch.save({"model": state_dict}, file)``, the MAE repository's checkpoint layout."""
    torch.save({"model": state_dict}, file)
    return file


def noise_for(mask: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """transformers' ``noise [B, L]`` that removes exactly the masked patches: argsort puts every
    visible patch (noise < 0.5) before every masked one (noise >= 1)."""
    g = torch.Generator().manual_seed(seed)
    return mask.float() + 0.5 * torch.rand(mask.shape, generator=g)


def set_kept(model, n_visible: int, L: int) -> None:
    """Make transformers keep exactly ``n_visible`` of ``L`` patches (``len_keep = int(L * (1 - mask_ratio))``)."""
    model.config.mask_ratio = (L - n_visible - 0.5) / L
    assert int(L * (1 - model.config.mask_ratio)) == n_visible


@torch.no_grad()
def hf_prediction(model: ViTMAEForPreTraining, images: torch.Tensor, mask: torch.Tensor, mean, std) -> torch.Tensor:
    """transformers' prediction of every patch in pixels: ``images [B, C, H, W]`` in [0, 1] normalised
    by ``mean``/``std``, masked by ``mask [B, L]`` (the same number of patches per row), ``logits``
    de-normalised per patch when ``norm_pix_loss``, unpatchified, ``* std + mean``, clamped to [0, 1]."""
    mean = torch.tensor(mean).reshape(1, -1, 1, 1)
    std = torch.tensor(std).reshape(1, -1, 1, 1)
    x = (images - mean) / std
    B, L = mask.shape
    n_visible = int((~mask[0]).sum())
    assert bool(((~mask).sum(dim=1) == n_visible).all()), "transformers keeps the same count in every row"
    set_kept(model, n_visible, L)
    out = model(pixel_values=x, noise=noise_for(mask))
    assert torch.equal(out.mask.bool(), mask), "transformers masked other patches than asked"
    pred = out.logits  # (B, L, P*P*C), normalised units
    if model.config.norm_pix_loss:
        target = model.patchify(x)
        pred = pred * (target.var(dim=-1, keepdim=True) + 1e-6) ** 0.5 + target.mean(dim=-1, keepdim=True)
    return (model.unpatchify(pred) * std + mean).clamp(0.0, 1.0)


__all__ = ["MEAN", "STD", "TINY", "ViTMAEForPreTraining", "ViTMAEModel", "hf_model", "hf_prediction",
           "mae_state_dict", "noise_for", "save_hf_folder", "save_mae_pth", "set_kept"]
