"""Import a Hugging Face ``save_pretrained`` folder of ``ViTMAEForPreTraining`` or ``ViTMAEModel``.

The folder holds ``config.json``, the weights (``model.safetensors``, a sharded
``model.safetensors.index.json``, or ``pytorch_model.bin`` read with ``weights_only=True``) and,
when present, ``preprocessor_config.json`` (mean, std, size). Tensor names are accepted in the
Hub's layout (``vit.encoder.layer.N.attention.attention.query``, ``decoder.decoder_layers.N...``),
in what transformers 5 writes (``decoder.decoder_encoder.layer.N...``) and in transformers 5's
module names (``vit.layers.N.attention.q_proj``, ``mlp.fc1``); q, k and v are fused into masklab's
``attn.qkv``. A ``ViTMAEModel`` (encoder only) gets a fresh decoder of the config's decoder sizes.

References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from engine.pretrained.image import (
    ARCH,
    IMAGENET_MEAN,
    IMAGENET_STD,
    assemble_state_dict,
    check_heads,
    is_decoder_tensor,
    preprocessing,
)
from engine.pretrained.store import PretrainedError, PretrainedModel, save_pretrained

# transformers' ViTMAEConfig defaults (5.x), for keys a config.json leaves out.
HF_DEFAULTS: dict[str, Any] = {
    "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
    "hidden_act": "gelu", "layer_norm_eps": 1e-12, "image_size": 224, "patch_size": 16, "num_channels": 3,
    "qkv_bias": True, "decoder_num_attention_heads": 16, "decoder_hidden_size": 512, "decoder_num_hidden_layers": 8,
    "decoder_intermediate_size": 2048, "norm_pix_loss": False,
}
ARCHITECTURES = {"ViTMAEForPreTraining", "ViTMAEModel"}

_ENC_LAYER = re.compile(r"^(?:vit\.)?(?:encoder\.layer|layers)\.(\d+)\.(.+)$")
_DEC_LAYER = re.compile(r"^decoder\.(?:decoder_layers|decoder_encoder\.layer)\.(\d+)\.(.+)$")
# Inside a layer: checkpoint suffix -> (masklab suffix, slot of q/k/v in the fused qkv or None).
_LAYER_PARTS: dict[str, tuple[str, int | None]] = {}
for _p in ("weight", "bias"):
    _LAYER_PARTS.update({
        f"layernorm_before.{_p}": (f"norm1.{_p}", None),
        f"layernorm_after.{_p}": (f"norm2.{_p}", None),
        f"attention.attention.query.{_p}": (f"attn.qkv.{_p}", 0),
        f"attention.attention.key.{_p}": (f"attn.qkv.{_p}", 1),
        f"attention.attention.value.{_p}": (f"attn.qkv.{_p}", 2),
        f"attention.q_proj.{_p}": (f"attn.qkv.{_p}", 0),
        f"attention.k_proj.{_p}": (f"attn.qkv.{_p}", 1),
        f"attention.v_proj.{_p}": (f"attn.qkv.{_p}", 2),
        f"attention.output.dense.{_p}": (f"attn.proj.{_p}", None),
        f"attention.o_proj.{_p}": (f"attn.proj.{_p}", None),
        f"intermediate.dense.{_p}": (f"mlp.fc1.{_p}", None),
        f"mlp.fc1.{_p}": (f"mlp.fc1.{_p}", None),
        f"output.dense.{_p}": (f"mlp.fc2.{_p}", None),
        f"mlp.fc2.{_p}": (f"mlp.fc2.{_p}", None),
    })
_ENC_TOP = {"embeddings.cls_token": "cls_token", "embeddings.position_embeddings": "pos_embed",
            "embeddings.patch_embeddings.projection.weight": "patch_embed.weight",
            "embeddings.patch_embeddings.projection.bias": "patch_embed.bias",
            "layernorm.weight": "norm.weight", "layernorm.bias": "norm.bias"}
_DEC_TOP = {"decoder.mask_token": "mask_token", "decoder.decoder_pos_embed": "decoder_pos_embed",
            **{f"decoder.{m}.{p}": f"{m}.{p}" for m in ("decoder_embed", "decoder_norm", "decoder_pred")
               for p in ("weight", "bias")}}
#: Tensors of heads and buffers masklab does not use: ignored and listed in ``source.ignored``.
IGNORED = re.compile(r"(^|\.)(pooler|classifier|fc_norm|head)\.|(^|\.)position_ids$")
_QKV_NAMES = ("query", "key", "value")
#: The Hub's naming (facebook/vit-mae-*, transformers 4): ``vit.encoder.layer.N.attention.attention.query``,
#: ``decoder.decoder_layers.N...``; transformers 5 loads it too. What :func:`checkpoint_names` gives by default.
HUB_STYLE = {"enc": "vit.encoder.layer.", "dec": "decoder.decoder_layers.", "new": ""}


def import_folder(path: Path, name: str, config: dict[str, Any], options: dict[str, Any],
                  workspace=None) -> PretrainedModel:
    """Import the ``save_pretrained`` folder ``path`` (``config.json`` already read as ``config``) as ``name``.

    Args:
        options: ``image_mean`` / ``image_std`` (C floats) override ``preprocessor_config.json``;
            ``source_format`` / ``hub_id`` when the folder came from the Hub.

    Returns:
        The published record (``models/<name>/``).

    Raises:
        PretrainedError: an unknown architecture, unsupported config values, or weights that do not
            fit (a tensor that fits nowhere, a missing tensor, a wrong shape), naming the file and the
            tensor; nothing is registered then.

    References: He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners".
    """
    path = Path(path)
    cfg_file = path / "config.json"
    cfg = {**HF_DEFAULTS, **config}
    archs = set(cfg.get("architectures") or [])
    if archs - ARCHITECTURES:
        raise PretrainedError(f"{cfg_file}: unknown architecture {sorted(archs - ARCHITECTURES)}; masklab imports "
                              f"{', '.join(sorted(ARCHITECTURES))}")
    if cfg["hidden_act"] != "gelu":
        raise PretrainedError(f"{cfg_file}: hidden_act {cfg['hidden_act']!r} is not supported (masklab's MAE uses the "
                              "exact GELU, 'gelu')")
    if not cfg["qkv_bias"]:
        raise PretrainedError(f"{cfg_file}: qkv_bias false is not supported (MAE's attention has q, k, v biases)")
    weights, wfile = read_weights(path)
    tensors, origin, ignored, style = rename(weights, wfile)
    has_decoder = any(is_decoder_tensor(k) for k in tensors)
    fresh_decoder = not has_decoder and "ViTMAEForPreTraining" not in archs
    arch_config = {
        "img_size": list(_pair(cfg["image_size"])), "in_chans": int(cfg["num_channels"]),
        "patch_size": _patch(cfg["patch_size"]),
        "embed_dim": int(cfg["hidden_size"]), "depth": int(cfg["num_hidden_layers"]),
        "num_heads": check_heads(cfg_file, int(cfg["hidden_size"]), int(cfg["num_attention_heads"]),
                                 "num_attention_heads", "encoder"),
        "decoder_embed_dim": int(cfg["decoder_hidden_size"]), "decoder_depth": int(cfg["decoder_num_hidden_layers"]),
        "decoder_num_heads": check_heads(cfg_file, int(cfg["decoder_hidden_size"]),
                                         int(cfg["decoder_num_attention_heads"]), "decoder_num_attention_heads",
                                         "decoder"),
        "mlp_hidden_dim": int(cfg["intermediate_size"]), "decoder_mlp_hidden_dim": int(cfg["decoder_intermediate_size"]),
        "layer_norm_eps": float(cfg["layer_norm_eps"]), "norm_pix_loss": bool(cfg["norm_pix_loss"]),
    }
    state, _ = assemble_state_dict(wfile, arch_config, tensors, origin, lambda n: expected_name(n, style),
                                   fresh_decoder)
    notes: list[str] = []
    if fresh_decoder:
        notes.append(f"ViTMAEModel holds the encoder only: the decoder ({arch_config['decoder_embed_dim']} wide, "
                     f"{arch_config['decoder_depth']} deep, {arch_config['decoder_num_heads']} heads, from config.json) "
                     "is freshly initialised (MAE's init, seed 0); its predictions mean nothing until it is trained")
    prep = _preprocessing(path, arch_config, options, notes)
    if arch_config["norm_pix_loss"]:
        notes.append("trained with norm_pix_loss: predictions are de-normalised with each input patch's own mean "
                     "and std")
    source = {"path": str(options.get("source_path") or options.get("hub_id") or path.resolve()), "format": options.get("source_format", "hf"),
              "architecture": "ViTMAEForPreTraining" if has_decoder else "ViTMAEModel",
              "ignored": ignored, "fresh": ["decoder"] if fresh_decoder else [], "notes": notes}
    info = PretrainedModel(name=name, arch=ARCH, modality="image", arch_config=arch_config, preprocessing=prep,
                           source=source)
    return save_pretrained(info, state, workspace=workspace)


def read_weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """``(name -> tensor, the weights file)`` of a ``save_pretrained`` folder.

    Raises:
        PretrainedError: no weights file, or one that cannot be read (naming it).
    """
    from safetensors import SafetensorError  # noqa: PLC0415 (only importers read safetensors files)
    from safetensors.torch import load_file  # noqa: PLC0415 (only importers read safetensors files)

    single, index, bin_file = folder / "model.safetensors", folder / "model.safetensors.index.json", \
        folder / "pytorch_model.bin"
    try:
        if single.is_file():
            return load_file(str(single)), single
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
            out: dict[str, torch.Tensor] = {}
            for shard in shards:
                out.update(load_file(str(folder / shard)))
            return out, index
    except (OSError, ValueError, KeyError, SafetensorError) as e:
        raise PretrainedError(f"{single if single.is_file() else index}: unreadable weights ({e})") from e
    if bin_file.is_file():
        from engine.pretrained.importers.mae_pth import load_tensors  # noqa: PLC0415 (a .bin folder is rare)

        return load_tensors(bin_file), bin_file
    raise PretrainedError(f"{folder}: no weights (model.safetensors, model.safetensors.index.json or "
                          "pytorch_model.bin) beside config.json")


def rename(weights: dict[str, torch.Tensor], file: Path) -> tuple[dict, dict, list[str], dict[str, str]]:
    """Checkpoint tensors -> masklab's names, q/k/v fused into ``attn.qkv``.

    Returns:
        ``(tensors, origin, ignored, style)``: masklab name -> tensor; masklab name -> checkpoint
        name(s); the ignored names, sorted; the naming style seen (for :func:`expected_name`).

    Raises:
        PretrainedError: a tensor that fits nowhere, or a q/k/v triple with a member missing (naming it).
    """
    tensors: dict[str, torch.Tensor] = {}
    origin: dict[str, str] = {}
    ignored: list[str] = []
    qkv: dict[str, dict[int, tuple[str, torch.Tensor]]] = {}
    style = dict(HUB_STYLE)
    for key, t in weights.items():
        m_enc, m_dec = _ENC_LAYER.match(key), _DEC_LAYER.match(key)
        m = m_enc or m_dec
        if m and m.group(2) in _LAYER_PARTS:
            part, slot = _LAYER_PARTS[m.group(2)]
            target = f"{'blocks' if m_enc else 'decoder_blocks'}.{m.group(1)}.{part}"
            prefix = key[: len(key) - len(m.group(2)) - len(m.group(1)) - 1]
            style["enc" if m_enc else "dec"] = prefix
            if "_proj." in m.group(2) or m.group(2).startswith("mlp."):
                style["new"] = "new"
        elif key.removeprefix("vit.") in _ENC_TOP:
            target, slot = _ENC_TOP[key.removeprefix("vit.")], None
        elif key in _DEC_TOP:
            target, slot = _DEC_TOP[key], None
        elif IGNORED.search(key):
            ignored.append(key)
            continue
        else:
            raise PretrainedError(f"{file}: tensor {key} fits nowhere in a ViTMAE model (not an encoder, decoder or "
                                  "known head tensor)")
        if slot is None:
            tensors[target], origin[target] = t, key
        else:
            qkv.setdefault(target, {})[slot] = (key, t)
    for target, parts in qkv.items():
        for slot in range(3):
            if slot not in parts:
                key = next(iter(parts.values()))[0]
                have = next(s for s in _QKV_NAMES if f".{s}." in key or f".{s[0]}_proj." in key)
                want = _QKV_NAMES[slot]
                missing = key.replace(f".{have}.", f".{want}.").replace(f".{have[0]}_proj.", f".{want[0]}_proj.")
                raise PretrainedError(f"{file}: missing tensor {missing} (its siblings of the same layer are there)")
        tensors[target] = torch.cat([parts[s][1] for s in range(3)], dim=0)
        origin[target] = " + ".join(parts[s][0] for s in range(3))
    return tensors, origin, sorted(ignored), style


def expected_name(name: str, style: dict[str, str]) -> str:
    """The checkpoint's name of masklab's tensor ``name``, in the naming ``style`` :func:`rename` saw
    (q / k / v joined by `` / `` for a fused ``attn.qkv``)."""
    return " / ".join(checkpoint_names(name, style))


def checkpoint_names(name: str, style: dict[str, str] = HUB_STYLE) -> list[str]:
    """The checkpoint name(s) of masklab's tensor ``name`` in the naming ``style`` (the Hub's by
    default): three, query / key / value in that order, for a fused ``attn.qkv`` (its rows split
    in thirds), one otherwise; ``[name]`` for a name no table knows."""
    m = re.match(r"^(blocks|decoder_blocks)\.(\d+)\.(.+)$", name)
    if m:
        prefix = style["enc"] if m.group(1) == "blocks" else style["dec"]
        parts = [k for k, (v, _) in _LAYER_PARTS.items() if v == m.group(3)
                 and (("_proj." in k or k.startswith("mlp.")) == bool(style["new"]) or k.startswith("layernorm"))]
        return [f"{prefix}{m.group(2)}.{p}" for p in parts] or [name]
    enc_prefix = "vit." if style["enc"].startswith("vit.") else ""
    for k, v in _ENC_TOP.items():
        if v == name:
            return [enc_prefix + k]
    for k, v in _DEC_TOP.items():
        if v == name:
            return [k]
    return [name]


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, (int, float)) else (int(v[0]), int(v[1]))


def _patch(v) -> int | list[int]:
    ph, pw = _pair(v)
    return ph if ph == pw else [ph, pw]


def _preprocessing(folder: Path, arch_config: dict[str, Any], options: dict[str, Any], notes: list[str]) -> dict:
    """Mean, std and size from ``preprocessor_config.json`` (ImageNet's mean/std when absent), the
    options overriding; notes say where each came from."""
    C, size = arch_config["in_chans"], arch_config["img_size"]
    pfile = folder / "preprocessor_config.json"
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    if pfile.is_file():
        try:
            pcfg = json.loads(pfile.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise PretrainedError(f"{pfile}: unreadable ({e})") from e
        if not pcfg.get("do_normalize", True):
            mean, std = [0.0] * C, [1.0] * C
        else:
            mean, std = pcfg.get("image_mean", mean), pcfg.get("image_std", std)
            mean, std = (mean if isinstance(mean, list) else [mean] * C), (std if isinstance(std, list) else [std] * C)
        psize = pcfg.get("size")
        psize = (psize.get("height"), psize.get("width")) if isinstance(psize, dict) else (psize, psize)
        if None not in psize and tuple(int(v) for v in psize) != tuple(size):
            notes.append(f"preprocessor_config.json resizes to {psize[0]}x{psize[1]}, but the model takes "
                         f"{size[0]}x{size[1]}: give images of the model's size")
        if pcfg.get("do_rescale", True) and abs(float(pcfg.get("rescale_factor", 1 / 255)) - 1 / 255) > 1e-9:
            notes.append(f"preprocessor_config.json rescales by {pcfg['rescale_factor']}, not 1/255; masklab feeds "
                         "pixels in [0, 1]")
    elif C == 3:
        notes.append("no preprocessor_config.json: ImageNet's mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225) "
                     "assumed")
    else:
        mean, std = [0.0] * C, [1.0] * C
        notes.append(f"no preprocessor_config.json and {C} channels: inputs are not normalised (mean 0, std 1)")
    if options.get("image_mean") is not None or options.get("image_std") is not None:
        mean, std = options.get("image_mean") or mean, options.get("image_std") or std
        notes.append(f"image mean {list(mean)} and std {list(std)} as given")
    return preprocessing(size, C, list(mean), list(std), folder / "preprocessor_config.json")
