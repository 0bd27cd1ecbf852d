"""An imported model as a run's starting point: ``model.init_from: NAME``.

A run whose ``model.init_from`` names an imported model (``models/<name>/``) trains that model's
architecture from its weights, on the run's own dataset; with ``train.steps: 0`` it only evaluates
and keeps it, which is how a published checkpoint is *shown* on a dataset (its reconstructions on
Run detail and Presentation, the masking and fill-in boxes, the evaluation job). The run records the
model's record in ``task.json`` (``model_dims["pretrained"]``), so it loads without the imported
folder, and its ``input_fit`` (how the dataset's images were fitted to the model's input).

- Images (``image_mim`` with ``mae_vit``): the dataset's images are fitted to the model's input as
  the image import fits them (:func:`fit_images`: Pillow LANCZOS to the model's size, grey made RGB
  by repeating the channel, RGB made grey by Pillow's ``L`` luma); the model reads
  ``(x - mean) / std`` of its processor and shows pixels back
  (:class:`~engine.models.mae.MaskedAutoencoderViT`'s ``input_mean`` / ``input_std``).
- Text (``text_mlm`` with ``bert_hf``): the model's own tokenizer replaces the run's
  (:func:`pretrained_tokenizer`, cached with the run tokenizers so that every reader finds it by id).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from engine.errors import ConfigError
from engine.pretrained.registry import PRETRAINED_ARCHS, PretrainedError
from engine.pretrained.store import MODEL_FILE, WEIGHTS_FILE, PretrainedModel, get_pretrained

#: What an imported model of each modality trains as: ``(task, arch)``.
INIT_TASKS = {"image": ("image_mim", "mae_vit"), "text": ("text_mlm", "bert_hf")}
#: Masking ratios a view of an imported model shows, by modality (MAE's 0.75; BERT's 0.15).
VIEW_RATIOS = {"image": 0.75, "text": 0.15}
#: Longest tokenised text a view of an imported BERT reads (bert-base holds 512; the dashboard's
#: sentences are short, and attention's cost grows with the square of the length).
VIEW_MAX_LEN = 128


def init_info(cfg, workspace=None) -> PretrainedModel:
    """The imported model ``cfg.model.init_from``. Raises :class:`ConfigError` naming the field."""
    try:
        return get_pretrained(cfg.model.init_from, workspace)
    except PretrainedError as e:
        raise ConfigError(f"model.init_from: {e}") from None


def check_init(cfg, modality: str, workspace=None) -> PretrainedModel:
    """Pre-flight check of a run that starts from an imported model, against its dataset's modality.

    Raises:
        ConfigError: naming the field: no such model; a model of another modality; ``model.arch``,
            ``model.patch_size`` or ``objective.norm_pix_loss`` other than the model's (the values
            to set are named); ``data.tokenizer.max_len`` longer than the model's positions.
    """
    info = init_info(cfg, workspace)
    if info.modality != modality:
        raise ConfigError(f"model.init_from: {info.name} is {_a(info.modality)} model, but this run's dataset holds "
                          f"{modality}; pick a dataset of {info.modality}")
    if cfg.model.arch != info.arch:
        raise ConfigError(f"model.arch: {info.name} is a {info.arch} model; set model.arch to {info.arch}")
    if info.modality == "image":
        patch = info.arch_config["patch_size"]
        if cfg.model.patch_size != patch:
            raise ConfigError(f"model.patch_size: {info.name} has {patch}x{patch} patches; set model.patch_size "
                              f"to {patch}")
        norm_pix = bool(info.arch_config.get("norm_pix_loss", False))
        if cfg.objective.norm_pix_loss != norm_pix:
            raise ConfigError(f"objective.norm_pix_loss: {info.name} was trained with norm_pix_loss {norm_pix}; "
                              f"set it to {str(norm_pix).lower()}")
    elif info.modality == "text":
        most = int(info.preprocessing["max_len"])
        if cfg.data.tokenizer is not None and cfg.data.tokenizer.max_len > most:
            raise ConfigError(f"data.tokenizer.max_len: {info.name} has {most} positions; set it to at most {most}")
    return info


def _a(word: str) -> str:
    """``word`` with its indefinite article ("an image", "a text")."""
    return ("an " if word[:1] in "aeiou" else "a ") + word


def record(info: PretrainedModel) -> dict[str, Any]:
    """What a run keeps of its imported model (``task.json``'s ``model_dims["pretrained"]``): the
    name, architecture, builder config, preprocessing and source, enough to build the model again
    (:func:`build_from_record`) when the imported folder is gone."""
    return {"name": info.name, "arch": info.arch, "modality": info.modality, "arch_config": info.arch_config,
            "preprocessing": info.preprocessing, "source": {k: info.source.get(k) for k in ("path", "format")}}


def build_from_record(rec: dict[str, Any]) -> torch.nn.Module:
    """The model of an imported-model record (:func:`record`), its weights at their initialisation,
    with the record's input normalisation for an image model.

    Raises:
        PretrainedError: an architecture this masklab does not know.
    """
    import engine.pretrained.archs  # noqa: F401, PLC0415 (registers the builders; they import the model classes)

    try:
        builder = PRETRAINED_ARCHS[rec["arch"]]
    except KeyError:
        raise PretrainedError(f"imported model {rec.get('name')!r}: unknown architecture {rec.get('arch')!r}") from None
    model = builder(rec["arch_config"])
    if rec["modality"] == "image":
        prep = rec["preprocessing"]
        C = len(prep["mean"])
        model.input_norm = True
        model.input_mean = torch.tensor(prep["mean"], dtype=torch.float32).reshape(1, C, 1, 1)
        model.input_std = torch.tensor(prep["std"], dtype=torch.float32).reshape(1, C, 1, 1)
    return model


def init_model(cfg, workspace=None) -> tuple[torch.nn.Module, dict[str, Any]]:
    """``(model, record)``: the imported model ``cfg.model.init_from`` with its weights, ready to
    train (train mode, on the CPU), and its :func:`record`.

    Raises:
        ConfigError: no such model. PretrainedError: its weights do not fit (a damaged folder).
    """
    from safetensors.torch import load_file  # noqa: PLC0415 (with torch, only where weights are read)

    info = init_info(cfg, workspace)
    rec = record(info)
    model = build_from_record(rec)
    weights = info.path / WEIGHTS_FILE
    try:
        model.load_state_dict(load_file(str(weights)))
    except (RuntimeError, OSError) as e:
        raise PretrainedError(f"{weights}: the weights do not fit the {info.arch} model of {MODEL_FILE} ({e})") from e
    return model.train(), rec


def random_init_(task, seed: int) -> bool:
    """Put the model of a task that starts from an imported model (``task.model_dims["pretrained"]``)
    at its architecture's initialisation drawn from ``seed``: the evaluation's ``random_init``
    baseline, which for such a run is not its step 0 (the imported weights). The global RNG is
    left as it was.

    Returns:
        True when the weights were reset; False for any other run (its step 0 is its random init).
    """
    rec = (getattr(task, "model_dims", None) or {}).get("pretrained")
    if rec is None:
        return False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = build_from_record(rec)
        if hasattr(fresh, "initialize_weights"):  # the MAE builder draws at its own fixed seed (a fresh decoder's)
            torch.manual_seed(seed)
            fresh.initialize_weights()
    task.model.load_state_dict(fresh.state_dict())
    return True


def view_config(name: str, dataset: str, workspace=None) -> dict[str, Any]:
    """The run config that shows the imported model ``name`` on ``dataset`` without training it:
    its task and architecture (:data:`INIT_TASKS`), ``model.init_from``, its patch size and
    norm-pix setting (images) or a :data:`VIEW_MAX_LEN` token limit (text), random masking at
    :data:`VIEW_RATIOS`, ``train.steps`` 0. A dict for :meth:`engine.config.RunConfig.from_dict`.

    Raises:
        ConfigError: no such model, or a modality masklab cannot start from.
    """
    try:
        info = get_pretrained(name, workspace)
    except PretrainedError as e:
        raise ConfigError(f"model.init_from: {e}") from None
    if info.modality not in INIT_TASKS:
        raise ConfigError(f"model.init_from: {name} is {_a(info.modality)} model; masklab shows image and text models")
    task, arch = INIT_TASKS[info.modality]
    cfg: dict[str, Any] = {
        "name": f"{name} on {dataset}", "task": task, "data": {"dataset": dataset},
        "model": {"arch": arch, "init_from": name},
        "masking": {"strategy": "random", "ratio": VIEW_RATIOS[info.modality]},
        "train": {"steps": 0, "batch_size": 32, "num_vis": 8},
    }
    if info.modality == "image":
        cfg["model"]["patch_size"] = int(info.arch_config["patch_size"])
        cfg["objective"] = {"norm_pix_loss": bool(info.arch_config.get("norm_pix_loss", False))}
    else:
        cfg["data"]["tokenizer"] = {"max_len": min(VIEW_MAX_LEN, int(info.preprocessing["max_len"]))}
    return cfg


# --------------------------------------------------------------------------- images


def fit_images(x: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    """A dataset's images fitted to a model's input, by the image import's rules.

    Each image becomes 8-bit (``round(x * 255)``; a dataset's pixels are 8-bit already), is resized
    with Pillow LANCZOS to the model's ``H x W`` (a square image to a square input, as the import
    resizes; another aspect is stretched), a grey image is made RGB by repeating its channel and an
    RGB one grey by Pillow's ``L`` (ITU-R 601-2 luma) when the model's channels ask for it.

    Args:
        x: float ``[N, C, H, W]`` in [0, 1], ``C`` 1 or 3. shape: the model's ``(C', H', W')``.

    Returns:
        float32 ``[N, C', H', W']`` in [0, 1]; ``x`` itself when its shape is the model's.

    Raises:
        ValueError: channels other than 1 or 3 on either side.
    """
    from PIL import Image  # noqa: PLC0415 (Pillow loads only where images are fitted)

    C2, H2, W2 = (int(v) for v in shape)
    if tuple(x.shape[1:]) == (C2, H2, W2):
        return x
    C = x.shape[1]
    if C not in (1, 3) or C2 not in (1, 3):
        raise ValueError(f"images of {C} channels cannot be fitted to a model of {C2} (1 or 3 each)")
    a = (x.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()  # (N, H, W, C)
    out = np.empty((len(a), H2, W2, C2), np.uint8)
    mode = "L" if C2 == 1 else "RGB"
    for i, im in enumerate(a):
        img = Image.fromarray(im[..., 0] if C == 1 else im, "L" if C == 1 else "RGB")
        if img.size != (W2, H2):
            img = img.resize((W2, H2), Image.Resampling.LANCZOS)
        out[i] = np.asarray(img.convert(mode)).reshape(H2, W2, C2)
    return torch.from_numpy(out).permute(0, 3, 1, 2).float().div_(255.0).contiguous()


def fit_note(src: tuple[int, int, int], dst: tuple[int, int, int]) -> str:
    """One sentence on what :func:`fit_images` does from ``src (C, H, W)`` to ``dst``; ``""`` when nothing."""
    (C, H, W), (C2, H2, W2) = src, dst
    parts = []
    if (H, W) != (H2, W2):
        parts.append(f"resized from {H}x{W} to {H2}x{W2} pixels (Lanczos"
                     + (", aspect ratio not kept)" if H * W2 != W * H2 else ")"))
    if C != C2:
        parts.append("grey channel repeated to RGB" if C == 1 else "RGB turned grey (luma)")
    return ("the dataset's images were " + ", ".join(parts) + " to fit the model's input") if parts else ""


class FittedImages:
    """An image dataset read as a model of another input shape takes it: ``rows_tensors`` and
    ``tensors`` give :func:`fit_images` of the stored rows, ``info.image_shape`` is the model's; the
    rest (labels, splits, indices) is the dataset's own."""

    def __init__(self, ds, shape: tuple[int, int, int]):
        self._ds = ds
        self.shape = tuple(int(v) for v in shape)
        self.info = replace(ds.info, image_shape=self.shape)
        self.note = fit_note(tuple(ds.info.image_shape), self.shape)

    def __getattr__(self, name: str):
        return getattr(self._ds, name)

    def rows_tensors(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The dataset's ``rows_tensors`` with the images fitted: ``(x [n, C', H', W'], y [n])``."""
        x, y = self._ds.rows_tensors(rows)
        return fit_images(x, self.shape), y

    def tensors(self, split: str, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The dataset's ``tensors`` with the images fitted."""
        return self.rows_tensors(self._ds.indices(split)[:limit])


def input_shape(rec: dict[str, Any]) -> tuple[int, int, int]:
    """``(C, H, W)`` an imported image model's record takes."""
    c = rec["arch_config"]
    return int(c["in_chans"]), int(c["img_size"][0]), int(c["img_size"][1])


# --------------------------------------------------------------------------- text


def pretrained_tokenizer(info: PretrainedModel, workspace=None):
    """``(tokenizer, tokenizer_id)``: the imported text model's own tokenizer, cached with the run
    tokenizers (``tokenizers/<id>/``, id ``pt-`` + 16 hex digits of sha256 over its ``tokenizer.json``
    and special tokens) so that :func:`engine.text.tokenizer.load_tokenizer` loads it for any reader.

    Raises:
        PretrainedError: the tokenizer cannot be read (naming the file).
    """
    from engine.pretrained.text import load_text_tokenizer  # noqa: PLC0415 (tokenizers loads with the text path only)
    from engine.text.tokenizer import cache_tokenizer  # noqa: PLC0415 (as above)

    tok = load_text_tokenizer(info)
    key = json.dumps({"tokenizer": tok.to_str(), "special": tok.special_tokens, "max_len": tok.settings.max_len},
                     sort_keys=True)
    tok_id = "pt-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return cache_tokenizer(tok, tok_id, {"dataset": f"imported model {info.name}", "model": info.name}, workspace), tok_id
