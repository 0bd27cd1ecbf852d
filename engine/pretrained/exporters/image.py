"""Export an image MAE (:class:`~engine.models.mae.MaskedAutoencoderViT`, arch ``mae_vit``): a
``transformers`` ``ViTMAEForPreTraining`` folder, or the MAE repository's ``.pth``.

- :func:`vitmae_files`: ``config.json`` (``ViTMAEConfig``'s fields, written by hand),
  ``model.safetensors`` under the Hub's names (:func:`~engine.pretrained.importers.hf_vitmae.checkpoint_names`:
  ``vit.encoder.layer.N.attention.attention.query``, ``decoder.decoder_layers.N...``, which
  transformers 4 and 5 both load; q, k and v are the thirds of masklab's fused ``attn.qkv`` rows)
  and ``preprocessor_config.json`` (``ViTImageProcessor``: size, mean, std, rescale 1/255).
- :func:`mae_pth_file`: ``{"model": state_dict}`` with timm's names and the fused ``qkv``
  (:func:`~engine.pretrained.importers.mae_pth.mae_name`), what
  :mod:`engine.pretrained.importers.mae_pth` reads; what that file cannot say (head counts, mean,
  std, ``norm_pix_loss``, LayerNorm epsilon) comes back as the importer's options and notes.

Both write the positional embeddings as tensors (``vit.embeddings.position_embeddings`` and
``decoder.decoder_pos_embed``; ``pos_embed`` / ``decoder_pos_embed`` in the ``.pth``): transformers
zeroes a ``decoder_pos_embed`` missing from the file, and masklab's own runs keep theirs as
recomputed sin-cos buffers outside the state dict, so they are read from the model object.

Shapes: D encoder width, Dd decoder width, P patch side, h = w patch grid side, C channels.

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (models_mae.py).
"""

from __future__ import annotations

import io
import json
from typing import Any

import torch
from safetensors.torch import save as safetensors_bytes

from engine.models.mae import MaskedAutoencoderViT, patch_hw
from engine.pretrained.image import IMAGENET_MEAN, IMAGENET_STD, MAE_DECODER, MAE_PRESETS
from engine.pretrained.importers.hf_vitmae import checkpoint_names
from engine.pretrained.importers.mae_pth import mae_name
from engine.pretrained.registry import PretrainedError

#: The file of a ``--format mae`` export (the MAE repository saves ``checkpoint-<epoch>.pth``).
PTH_FILE = "checkpoint.pth"
#: ``ViTImageProcessor``'s resampling when an image is not the model's size: PIL's BICUBIC, as the
#: published MAE processors (facebook/vit-mae-*) say.
BICUBIC = 3


def check_exportable(model: Any, what: str) -> None:
    """Refuse a model that ``ViTMAEForPreTraining`` and the MAE repository cannot express.

    Args:
        model: the loaded model. what: names it in messages (``run X`` / ``imported model Y``).

    Raises:
        PretrainedError: not a :class:`MaskedAutoencoderViT`; rectangular ``P_h x P_w`` patches
            (one ``patch_size`` there); a non-square ``h x w`` grid (ViTMAE's sin-cos positions and
            ``patchify`` take square images); attention without q/k/v biases; LayerNorms of
            different epsilons (one ``layer_norm_eps`` there).
    """
    if not isinstance(model, MaskedAutoencoderViT):
        raise PretrainedError(f"{what}: a {type(model).__name__}, not an image MAE (MaskedAutoencoderViT)")
    ph, pw = patch_hw(model.patch_size)
    if ph != pw:
        raise PretrainedError(f"{what}: rectangular {ph}x{pw} patches; transformers' ViTMAE and the MAE repository "
                              "cut square patches (one patch_size), so this model cannot be exported")
    h, w = model.grid_size
    if h != w:
        H, W = model.img_size
        raise PretrainedError(f"{what}: a {h}x{w} patch grid ({H}x{W} pixels); transformers' ViTMAE takes square "
                              "images (its patchify and sin-cos positions need a square grid), so this model "
                              "cannot be exported")
    blocks = [*model.blocks, *model.decoder_blocks]
    if any(b.attn.qkv.bias is None for b in blocks):
        raise PretrainedError(f"{what}: attention without q/k/v biases; ViTMAE's config has qkv_bias, MAE's blocks "
                              "have them")
    eps = {m.eps for m in model.modules() if isinstance(m, torch.nn.LayerNorm)}
    if len(eps) > 1:
        raise PretrainedError(f"{what}: LayerNorms of epsilons {sorted(eps)}; ViTMAE has one layer_norm_eps")


def model_tensors(model: MaskedAutoencoderViT) -> dict[str, torch.Tensor]:
    """Every tensor of ``model`` under masklab's names, float32: its state dict plus ``pos_embed``
    ``[1, 1 + L, D]`` and ``decoder_pos_embed`` ``[1, 1 + L, Dd]`` taken from the model object (a
    masklab run's are non-persistent buffers)."""
    sd = dict(model.state_dict())
    sd["pos_embed"], sd["decoder_pos_embed"] = model.pos_embed, model.decoder_pos_embed
    return {k: v.detach().to(torch.float32) for k, v in sd.items()}


def _sizes(model: MaskedAutoencoderViT) -> dict[str, Any]:
    """Widths, depths, head counts and MLP widths of ``model`` (a depth of 0: 1 head, MLP ratio 4)."""
    D, Dd = int(model.cls_token.shape[-1]), int(model.mask_token.shape[-1])
    enc, dec = list(model.blocks), list(model.decoder_blocks)
    return {
        "D": D, "depth": len(enc), "heads": enc[0].attn.num_heads if enc else 1,
        "mlp": enc[0].mlp.fc1.out_features if enc else 4 * D,
        "Dd": Dd, "ddepth": len(dec), "dheads": dec[0].attn.num_heads if dec else 1,
        "dmlp": dec[0].mlp.fc1.out_features if dec else 4 * Dd,
        "eps": float(model.norm.eps), "P": patch_hw(model.patch_size)[0],
    }


def vitmae_config(model: MaskedAutoencoderViT, mask_ratio: float) -> dict[str, Any]:
    """``config.json`` of a ``ViTMAEForPreTraining``: ``ViTMAEConfig``'s fields for ``model``.

    ``hidden_act`` is ``gelu`` (masklab's blocks use the exact GELU), ``qkv_bias`` true, no dropout;
    ``mask_ratio`` is what transformers masks when it draws the mask itself.
    """
    s = _sizes(model)
    H, _ = model.img_size
    return {
        "architectures": ["ViTMAEForPreTraining"], "model_type": "vit_mae",
        "hidden_size": s["D"], "num_hidden_layers": s["depth"], "num_attention_heads": s["heads"],
        "intermediate_size": s["mlp"],
        "decoder_hidden_size": s["Dd"], "decoder_num_hidden_layers": s["ddepth"],
        "decoder_num_attention_heads": s["dheads"], "decoder_intermediate_size": s["dmlp"],
        "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02, "layer_norm_eps": s["eps"], "qkv_bias": True,
        "image_size": int(H), "patch_size": s["P"], "num_channels": int(model.in_chans),
        "mask_ratio": float(mask_ratio), "norm_pix_loss": bool(model.norm_pix_loss),
    }


def vitmae_state_dict(model: MaskedAutoencoderViT) -> dict[str, torch.Tensor]:
    """``model``'s tensors under ``ViTMAEForPreTraining``'s (Hub) names, float32, each its own
    contiguous copy (safetensors refuses tensors that share memory); ``attn.qkv`` ``[3D, ...]`` split
    into query, key and value ``[D, ...]`` (rows 0..D, D..2D, 2D..3D, as MAE's attention reads them).

    Raises:
        PretrainedError: a tensor that no name table maps (a model masklab's importer could not read back).
    """
    out: dict[str, torch.Tensor] = {}
    for name, t in model_tensors(model).items():
        names = checkpoint_names(name)
        if names == [name]:
            raise PretrainedError(f"tensor {name} of this MAE has no ViTMAEForPreTraining name")
        for hf, part in zip(names, t.chunk(3, dim=0) if len(names) == 3 else (t,)):
            out[hf] = part.clone(memory_format=torch.contiguous_format)
    return out


def preprocessor_config(size: tuple[int, int], mean: list[float], std: list[float]) -> dict[str, Any]:
    """``preprocessor_config.json`` of a ``ViTImageProcessor``: resize to ``size`` ``(H, W)``,
    rescale by 1/255 (8-bit pixels to [0, 1], what masklab's models read), then ``(x - mean) / std``."""
    return {"image_processor_type": "ViTImageProcessor", "do_resize": True,
            "size": {"height": int(size[0]), "width": int(size[1])}, "resample": BICUBIC,
            "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
            "image_mean": [float(v) for v in mean], "image_std": [float(v) for v in std]}


def vitmae_files(model: MaskedAutoencoderViT, mean: list[float], std: list[float],
                 mask_ratio: float) -> dict[str, bytes]:
    """The files of a ``ViTMAEForPreTraining.from_pretrained`` folder of ``model`` (see the module
    docstring); ``mean`` / ``std``: the ``C`` per-channel statistics its input is normalised with.

    Raises:
        PretrainedError: see :func:`vitmae_state_dict`.

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
    """
    return {
        "config.json": _json(vitmae_config(model, mask_ratio)),
        "model.safetensors": safetensors_bytes(vitmae_state_dict(model), metadata={"format": "pt"}),
        "preprocessor_config.json": _json(preprocessor_config(model.img_size, mean, std)),
    }


def mae_pth_file(model: MaskedAutoencoderViT, mean: list[float],
                 std: list[float]) -> tuple[bytes, dict[str, Any], list[str]]:
    """``(file bytes, importer options, notes)`` of the MAE repository's ``.pth`` of ``model``.

    The options are what :func:`engine.pretrained.importers.import_model` needs to read the file
    back as this model (``num_heads`` / ``decoder_num_heads`` when the shapes match none of MAE's
    released presets, ``image_mean`` / ``image_std`` when they are not the importer's default);
    the notes say what the file cannot carry (``norm_pix_loss`` false, an epsilon other than 1e-6).

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (models_mae.py).
    """
    tensors = {mae_name(k): v.clone() for k, v in model_tensors(model).items()}
    buf = io.BytesIO()
    torch.save({"model": tensors}, buf)
    s = _sizes(model)
    options: dict[str, Any] = {}
    preset = next((p for p in MAE_PRESETS.values() if (p["embed_dim"], p["depth"], p["patch_size"])
                   == (s["D"], s["depth"], s["P"])), None)
    if preset is None or preset["num_heads"] != s["heads"]:
        options["num_heads"] = s["heads"]
    released = (MAE_DECODER["decoder_embed_dim"], MAE_DECODER["decoder_depth"], MAE_DECODER["decoder_num_heads"])
    if s["ddepth"] and (s["Dd"], s["ddepth"], s["dheads"]) != released:
        options["decoder_num_heads"] = s["dheads"]
    C = int(model.in_chans)
    default = (IMAGENET_MEAN, IMAGENET_STD) if C == 3 else ([0.0] * C, [1.0] * C)
    notes: list[str] = []
    if not _close(mean, default[0]) or not _close(std, default[1]):
        options["image_mean"], options["image_std"] = [float(v) for v in mean], [float(v) for v in std]
        if C != 3:
            notes.append(f"this model normalises its {C} channel(s) with mean {mean} and std {std}: give them as "
                         "import_model's image_mean / image_std options (the command line's --image-mean takes 3)")
    if not model.norm_pix_loss:
        notes.append("this model was trained without norm_pix_loss, which a .pth does not record: masklab's "
                     "importer takes it as True (the released MAE checkpoints), so a re-import de-normalises its "
                     "predictions wrongly; the Hugging Face export (--format hf) keeps it")
    if abs(s["eps"] - 1e-6) > 1e-12:
        notes.append(f"LayerNorm epsilon {s['eps']:g}, which a .pth does not record: MAE's (and masklab's importer's) "
                     "is 1e-6; the Hugging Face export (--format hf) keeps it")
    return buf.getvalue(), options, notes


def _close(a, b) -> bool:
    return len(a) == len(b) and all(abs(float(x) - float(y)) < 1e-9 for x, y in zip(a, b))


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode("utf-8")
