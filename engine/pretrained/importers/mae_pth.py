"""Import a checkpoint of the MAE repository (facebookresearch/mae): ``{"model": state_dict}`` in a ``.pth``.

The file is read with ``torch.load(weights_only=True)`` only: a pickle that needs code to load
(an ``argparse.Namespace`` of a training checkpoint, a custom class) is refused. Its names are
timm's (``blocks.N.norm1``, ``attn.qkv`` fused, ``mlp.fc1``, ``patch_embed.proj``, ``decoder_blocks.N...``),
which are masklab's but for ``patch_embed.proj``. The architecture comes from the shapes: patch size
from ``patch_embed.proj.weight``, grid from ``pos_embed``, widths, depths and MLP widths from the
blocks; head counts, which no shape holds, from the released presets (:data:`MAE_PRESETS`, decoder
:data:`MAE_DECODER`) or the options ``num_heads`` / ``decoder_num_heads``. LayerNorm epsilon: MAE's
1e-6. A released encoder-only file (``mae_pretrain_*``, no decoder tensors) gets a fresh MAE decoder
(512 wide, 8 deep, 16 heads). ``norm_pix_loss``, which a ``.pth`` does not record, is taken as True
(the released checkpoints were trained with it) and said so in the notes.

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners" (models_mae.py).
"""

from __future__ import annotations

import math
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from engine.messages import unpickling_reason
from engine.pretrained.image import (
    ARCH,
    IMAGENET_MEAN,
    IMAGENET_STD,
    MAE_DECODER,
    MAE_PRESETS,
    assemble_state_dict,
    check_heads,
    is_decoder_tensor,
    preprocessing,
)
from engine.pretrained.store import PretrainedError, PretrainedModel, save_pretrained

#: Tensors of heads masklab does not use (fine-tuning heads, buffers): ignored and listed.
IGNORED = re.compile(r"^(head|fc_norm|pooler|classifier)\.|(^|\.)position_ids$")
_RENAME = {"patch_embed.proj.weight": "patch_embed.weight", "patch_embed.proj.bias": "patch_embed.bias"}
_BACK = {v: k for k, v in _RENAME.items()}


def mae_name(name: str) -> str:
    """The MAE repository's (timm's) name of masklab's tensor ``name``: the same but for
    ``patch_embed.proj``; the inverse of the importer's renaming."""
    return _BACK.get(name, name)


def load_tensors(file: Path) -> dict[str, torch.Tensor]:
    """The state dict in ``file`` (``{"model": state_dict}``, or a bare state dict), read with
    ``torch.load(weights_only=True)`` on the CPU; a ``module.`` prefix (DDP) is dropped.

    Raises:
        PretrainedError: the file needs code to load (not plain tensors), is unreadable, or holds no
            state dict (naming the file).
    """
    try:
        obj = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise PretrainedError(f"{file}: needs code to load (a pickle of more than tensors: {unpickling_reason(e)}); masklab reads "
                              "checkpoints with torch.load(weights_only=True) only. Save just the weights, "
                              "torch.save({'model': model.state_dict()}, PATH), and import that") from e
    except (OSError, RuntimeError, EOFError, ValueError, AttributeError, TypeError) as e:
        raise PretrainedError(f"{file}: unreadable as a PyTorch checkpoint ({type(e).__name__}: {e})") from e
    sd = obj.get("model", obj) if isinstance(obj, dict) else None
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise PretrainedError(f"{file}: holds no state dict of tensors (the MAE repository's layout is "
                              "{'model': state_dict})")
    return {k.removeprefix("module."): v for k, v in sd.items()}


def import_pth(path: Path, name: str, options: dict[str, Any], workspace=None) -> PretrainedModel:
    """Import the MAE repository's ``.pth`` at ``path`` as the model ``name``.

    Args:
        options: ``num_heads`` / ``decoder_num_heads`` (needed when the shapes match no released
            preset; checked against the widths), ``image_mean`` / ``image_std`` (3 floats; ImageNet's
            by default).

    Returns:
        The published record (``models/<name>/``).

    Raises:
        PretrainedError: a pickle that needs code, shapes that give no architecture, unknown head
            counts (saying which option to give), a tensor that fits nowhere, a missing tensor or a
            wrong shape, naming the file and the tensor; nothing is registered then.

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
    """
    path = Path(path)
    raw = load_tensors(path)
    ignored = sorted(k for k in raw if IGNORED.search(k))
    weights = {k: v for k, v in raw.items() if k not in ignored}
    arch_config, notes, fresh_decoder = infer_arch(path, weights, options)
    tensors = {_RENAME.get(k, k): v for k, v in weights.items()}
    origin = {_RENAME.get(k, k): k for k in weights}
    state, _ = assemble_state_dict(path, arch_config, tensors, origin, mae_name, fresh_decoder)
    C = arch_config["in_chans"]
    if options.get("image_mean") is not None or options.get("image_std") is not None:
        mean, std = options.get("image_mean") or IMAGENET_MEAN, options.get("image_std") or IMAGENET_STD
        notes.append(f"image mean {list(mean)} and std {list(std)} as given")
    elif C == 3:
        mean, std = IMAGENET_MEAN, IMAGENET_STD
        notes.append("inputs normalised with ImageNet's mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225), "
                     "as MAE's training; give --image-mean / --image-std if this model was trained otherwise")
    else:
        mean, std = [0.0] * C, [1.0] * C
        notes.append(f"{C} channels: inputs are not normalised (mean 0, std 1)")
    prep = preprocessing(arch_config["img_size"], C, list(mean), list(std), path)
    notes.append("norm_pix_loss taken as True (a .pth does not record it; the released MAE checkpoints were "
                 "trained with it): predictions are de-normalised with each input patch's own mean and std")
    source = {"path": str(options.get("source_path") or path.resolve()), "format": "mae_pth", "ignored": ignored,
              "fresh": ["decoder"] if fresh_decoder else [], "notes": notes}
    info = PretrainedModel(name=name, arch=ARCH, modality="image", arch_config=arch_config, preprocessing=prep,
                           source=source)
    return save_pretrained(info, state, workspace=workspace)


def _need(file: Path, weights: dict[str, torch.Tensor], key: str, dims: int) -> torch.Tensor:
    if key not in weights:
        raise PretrainedError(f"{file}: missing tensor {key} (the architecture is read from it)")
    t = weights[key]
    if t.dim() != dims:
        raise PretrainedError(f"{file}: tensor {key} has shape {list(t.shape)}; expected {dims} dimensions")
    return t


def _depth(weights: dict[str, torch.Tensor], prefix: str) -> int:
    ids = {int(m.group(1)) for k in weights if (m := re.match(rf"^{prefix}\.(\d+)\.", k))}
    return max(ids) + 1 if ids else 0


def infer_arch(file: Path, weights: dict[str, torch.Tensor], options: dict[str, Any]) -> tuple[dict, list[str], bool]:
    """``(arch_config, notes, fresh_decoder)`` from the shapes of an MAE state dict.

    Raises:
        PretrainedError: a tensor the architecture is read from is missing or malformed, the grid
            is not square, or a head count is unknown (saying which option to give) or does not
            divide its width.
    """
    pw = _need(file, weights, "patch_embed.proj.weight", 4)  # (D, C, P_h, P_w)
    D, C, ph, pwid = (int(v) for v in pw.shape)
    pos = _need(file, weights, "pos_embed", 3)  # (1, 1 + L, D)
    L = int(pos.shape[1]) - 1
    g = math.isqrt(max(L, 0))
    if L < 1 or g * g != L:
        raise PretrainedError(f"{file}: tensor pos_embed has shape {list(pos.shape)}: {L} patch positions after the "
                              "class token, not a square grid; masklab reads square MAE grids only")
    depth = _depth(weights, "blocks")
    if depth < 1:
        raise PretrainedError(f"{file}: missing tensor blocks.0.norm1.weight (no encoder blocks)")
    mlp = int(_need(file, weights, "blocks.0.mlp.fc1.weight", 2).shape[0])
    notes: list[str] = []
    patch = ph if ph == pwid else [ph, pwid]
    preset = next((n for n, p in MAE_PRESETS.items()
                   if (p["embed_dim"], p["depth"], p["patch_size"]) == (D, depth, patch)), None)
    fresh_decoder = not any(is_decoder_tensor(k) for k in weights)
    if fresh_decoder:
        Dd, ddepth, dmlp = MAE_DECODER["decoder_embed_dim"], MAE_DECODER["decoder_depth"], \
            MAE_DECODER["decoder_mlp_hidden_dim"]
    else:
        Dd = int(_need(file, weights, "decoder_embed.weight", 2).shape[0])
        ddepth = _depth(weights, "decoder_blocks")
        dmlp = int(_need(file, weights, "decoder_blocks.0.mlp.fc1.weight", 2).shape[0]) if ddepth else 4 * Dd
    heads = options.get("num_heads")
    dheads = options.get("decoder_num_heads")
    missing = []
    if heads is None:
        if preset is None:
            missing.append("--num-heads N (encoder)")
        else:
            heads = MAE_PRESETS[preset]["num_heads"]
            notes.append(f"encoder shapes match MAE's {preset}: {heads} heads")
    if dheads is None:
        if (Dd, ddepth) == (MAE_DECODER["decoder_embed_dim"], MAE_DECODER["decoder_depth"]):
            dheads = MAE_DECODER["decoder_num_heads"]
        elif ddepth == 0:
            dheads = 1  # no decoder block: no attention to split
        else:
            missing.append("--decoder-num-heads N (decoder)")
    if missing:
        raise PretrainedError(
            f"{file}: head counts are in no tensor's shape, and these shapes (encoder {D} wide {depth} deep, patch "
            f"{patch}; decoder {Dd} wide {ddepth} deep) match none of MAE's released presets "
            f"({', '.join(MAE_PRESETS)}, decoder 512 wide 8 deep); give {' and '.join(missing)}")
    arch_config = {
        "img_size": [g * ph, g * pwid], "in_chans": C, "patch_size": patch, "embed_dim": D, "depth": depth,
        "num_heads": check_heads(file, D, int(heads), "--num-heads", "encoder"),
        "decoder_embed_dim": Dd, "decoder_depth": ddepth,
        "decoder_num_heads": check_heads(file, Dd, int(dheads), "--decoder-num-heads", "decoder"),
        "mlp_hidden_dim": mlp, "decoder_mlp_hidden_dim": dmlp, "layer_norm_eps": 1e-6, "norm_pix_loss": True,
    }
    if fresh_decoder:
        notes.append(f"no decoder tensors (an encoder-only release such as mae_pretrain_*): MAE's default decoder "
                     f"({Dd} wide, {ddepth} deep, {arch_config['decoder_num_heads']} heads) is freshly initialised "
                     "(MAE's init, seed 0); its predictions mean nothing until it is trained")
    return arch_config, notes, fresh_decoder
