"""A run's starting point: ``model.init_from`` an imported model, or a fork of another run.

``model.init_from: SOURCE`` names an imported model (``models/<name>/``) or a run (its id; with
``model.init_step: N`` its checkpoint at step N, else its latest). The run then trains, on its own
dataset, masking, objective and schedule, from those weights:

- **An imported model** (or a run that started from one): the run trains that architecture, every
  tensor loaded; with ``train.steps: 0`` it only evaluates and keeps it, which is how a published
  checkpoint is *shown* on a dataset (reconstructions on Run detail and Presentation, the masking and
  fill-in boxes, the evaluation job). The run keeps the model's record in ``task.json``
  (``model_dims["pretrained"]``), so it loads without the imported folder, and its ``input_fit``.
  Images (``image_mim`` with ``mae_vit``) are fitted to the model's input as the image import fits
  them (:func:`fit_images`: Pillow LANCZOS to its size, grey made RGB by repeating the channel, RGB
  made grey by Pillow's ``L`` luma); the model reads ``(x - mean) / std`` of its processor and shows
  pixels back (:class:`~engine.models.mae.MaskedAutoencoderViT`'s ``input_mean`` / ``input_std``).
  Text (``text_mlm`` with ``bert_hf``): the model's own tokenizer replaces the run's
  (:func:`pretrained_tokenizer`, cached with the run tokenizers so every reader finds it by id).
- **A fork of a masklab run**: the run builds its own config's model (same arch; another patch
  size, preset or objective may change some shapes), loads every parent tensor whose name and shape
  fit, and initialises the rest; ``task.json``'s ``init`` and the run's log list both
  (:func:`load_fitting`). A text fork reads with its parent's tokenizer (the ids must mean the same).
"""

from __future__ import annotations

import hashlib
import json
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from engine.errors import ConfigError, RunNotFoundError
from engine.pretrained.registry import PRETRAINED_ARCHS, PretrainedError
from engine.pretrained.store import MODEL_FILE, WEIGHTS_FILE, PretrainedModel, get_pretrained, list_pretrained, models_root

#: ``task.json`` of the run being evaluated or resumed (:func:`recorded_init`), else None.
_RECORDED: ContextVar[dict | None] = ContextVar("masklab_recorded_init", default=None)


@contextmanager
def recorded_init(run_dir: Path) -> Iterator[None]:
    """Within the block, ``model.init_from`` resolves to what the run at ``run_dir`` recorded when it
    started (its ``task.json``: the architecture record, the init report, the tokenizer), not to the
    source itself: an evaluation or a resume of a run whose imported model or parent run was deleted
    since still builds its model, and its random init is a fresh one (its weights come from its own
    checkpoint). A run that recorded no ``init`` resolves as usual."""
    from engine.workspace import read_json  # noqa: PLC0415 (torch-free helper; the store's reader is the fork's)

    try:
        info = read_json(Path(run_dir) / "task.json")
    except (OSError, ValueError):
        info = None
    token = _RECORDED.set(info if isinstance(info, dict) and info.get("init") else None)
    try:
        yield
    finally:
        _RECORDED.reset(token)


@dataclass(frozen=True)
class InitSource:
    """What ``model.init_from`` names, resolved (:func:`resolve_init`).

    Attributes:
        kind: ``"model"`` (an imported model) or ``"run"`` (a run's checkpoint).
        name: the model's name or the run's id. modality: an imported model's (``""`` for a run:
            its ``config``'s task says what it trained).
        record: the imported architecture (:func:`record`): the model's, or that of the run's own
            ``init_from`` model; None for a run of masklab's own architectures.
        weights: the safetensors file of the weights; None when resolved from a run's own record
            (:func:`recorded_init`: nothing is loaded, the run's checkpoint follows).
        step: the run's checkpoint step (None: a model).
        tokenizer_id: a text run's tokenizer (``task.json``); None otherwise.
        config: the run's config (``{}`` for a model). info: the imported model's record (None for a run).
    """

    kind: str
    name: str
    modality: str
    record: dict[str, Any] | None
    weights: Path | None
    step: int | None = None
    tokenizer_id: str | None = None
    config: dict[str, Any] | None = None
    info: PretrainedModel | None = None


def resolve_init(cfg, workspace=None) -> InitSource:
    """Resolve ``cfg.model.init_from`` (and ``model.init_step``): an imported model of that name
    first, else a run of that id.

    Raises:
        ConfigError: naming the field: neither exists; ``model.init_step`` given for an imported
            model, or a step the run keeps no complete checkpoint of (the kept steps are listed).
    """
    from engine.store import get_run  # noqa: PLC0415 (the store's run reader: only a fork needs it)
    from engine.store.checkpoints import checkpoint_complete, list_checkpoints  # noqa: PLC0415 (as above)
    from engine.workspace import read_json  # noqa: PLC0415 (as the store)

    name, step = cfg.model.init_from, cfg.model.init_step
    recorded = _RECORDED.get()
    if recorded is not None and recorded["init"].get("from") == name:
        init, rec = recorded["init"], (recorded.get("model_dims") or {}).get("pretrained")
        return InitSource(init.get("kind", "model"), name, (rec or {}).get("modality", ""), rec, None,
                          init.get("step"), recorded.get("tokenizer_id"))
    if (models_root(workspace) / name / MODEL_FILE).is_file():
        if step is not None:
            raise ConfigError(f"model.init_step: {name} is an imported model, which has no checkpoint steps; "
                              "remove model.init_step (it picks a run's checkpoint)")
        info = _imported(name, workspace)
        return InitSource("model", name, info.modality, record(info), info.path / WEIGHTS_FILE, info=info)
    try:
        rec = get_run(name, workspace)
    except RunNotFoundError:
        known = ", ".join(m.name for m in list_pretrained(workspace)) or "none"
        raise ConfigError(f"model.init_from: no imported model or run named {name!r} (imported models: {known}); "
                          "give a model's name (python -m engine models list) or a run's id") from None
    kept = {int(p.name.split("-")[1]): p for p in list_checkpoints(rec.path) if checkpoint_complete(p)}
    if not kept:
        raise ConfigError(f"model.init_from: run {name} keeps no complete checkpoint to start from")
    if step is None:
        step = max(kept)
    elif step not in kept:
        raise ConfigError(f"model.init_step: run {name} keeps checkpoints at steps {sorted(kept)}, not {step}")
    try:
        info = read_json(rec.path / "task.json")
    except (OSError, ValueError):
        info = {}
    return InitSource("run", name, "", (info.get("model_dims") or {}).get("pretrained"),
                      kept[step] / WEIGHTS_FILE, step, info.get("tokenizer_id"), dict(rec.config))


def _imported(name: str, workspace=None) -> PretrainedModel:
    try:
        return get_pretrained(name, workspace)
    except PretrainedError as e:
        raise ConfigError(f"model.init_from: {e}") from None


def check_init(cfg, task=None, workspace=None) -> InitSource:
    """Pre-flight check of a run that starts from ``model.init_from``.

    Args:
        task: the run's :class:`~engine.tasks.base.Task` class, whose ``init_fit`` / ``fork_fit``
            check the fields the source fixes; None: resolve only (a task's own check does the rest).

    Raises:
        ConfigError: naming the field: no such model or run (:func:`resolve_init`); an imported model
            of another modality than the task's, or a run of another task; ``model.arch`` other than
            the source's; what the task's ``init_fit`` / ``fork_fit`` refuse (the values to set are named).
    """
    src = resolve_init(cfg, workspace)
    if src.weights is None or task is None:  # the run's own record (recorded_init): checked when it was submitted
        return src
    if src.kind == "model" and src.modality != task.modality:
        raise ConfigError(f"model.init_from: {src.name} is {_a(src.modality)} model, but this run's dataset holds "
                          f"{task.modality}; pick a dataset of {src.modality}")
    if src.kind == "run" and (src.config or {}).get("task") != cfg.task:
        raise ConfigError(f"model.init_from: run {src.name} trained {(src.config or {}).get('task')}; a fork trains "
                          f"the same task (this run: {cfg.task})")
    rec = src.record
    if rec is not None:
        if cfg.model.arch != rec["arch"]:
            raise ConfigError(f"model.arch: {src.name} is a {rec['arch']} model; set model.arch to {rec['arch']}")
        task.init_fit(cfg, rec, src.name)
        return src
    parent = (src.config or {}).get("model") or {}
    if cfg.model.arch != parent.get("arch"):
        raise ConfigError(f"model.arch: run {src.name} trains {parent.get('arch')}; a fork keeps the architecture "
                          f"(set model.arch to {parent.get('arch')})")
    task.fork_fit(cfg, src.config or {}, src.name)
    return src


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
    prep = rec["preprocessing"]
    if "mean" in prep and hasattr(model, "input_mean"):  # an image processor's statistics, read by the model
        C = len(prep["mean"])
        model.input_norm = True
        model.input_mean = torch.tensor(prep["mean"], dtype=torch.float32).reshape(1, C, 1, 1)
        model.input_std = torch.tensor(prep["std"], dtype=torch.float32).reshape(1, C, 1, 1)
    return model


def init_model(cfg, build: Callable[[], torch.nn.Module], workspace=None
               ) -> tuple[torch.nn.Module, dict[str, Any], dict[str, Any]]:
    """The model a run starts from: ``(model, model_dims, report)``, in train mode on the CPU.

    An imported architecture (:attr:`InitSource.record`) is built from its record and takes every
    tensor of the source; ``model_dims`` is then ``{"pretrained": record}``. A fork of a masklab
    run is ``build()`` (the run's own config, at its seeded initialisation) with the parent's
    tensors that fit loaded (:func:`load_fitting`); ``model_dims`` is ``{}``. The report
    (``task.json``'s ``init``, printed to the run's log): the source, its step, how many tensors
    were loaded, which were initialised fresh and which of the source's were left out.

    Raises:
        ConfigError: as :func:`resolve_init`. PretrainedError: the source's weights do not fit its
            own architecture (a damaged file).
    """
    from safetensors.torch import load_file  # noqa: PLC0415 (with torch, only where weights are read)

    src = resolve_init(cfg, workspace)
    if src.weights is None:  # recorded_init: the architecture only (seeded init); the caller loads the checkpoint
        model = build_from_record(src.record) if src.record is not None else build()
        return model.train(), ({"pretrained": src.record} if src.record is not None else {}), dict(_RECORDED.get()["init"])
    try:
        weights = load_file(str(src.weights))
    except OSError as e:
        raise PretrainedError(f"{src.weights}: unreadable weights ({e})") from e
    if src.record is not None:
        model, dims = build_from_record(src.record), {"pretrained": src.record}
        try:
            model.load_state_dict(weights)
        except RuntimeError as e:
            raise PretrainedError(f"{src.weights}: the weights do not fit the {src.record['arch']} model of "
                                  f"{src.name} ({e})") from e
        report = {"loaded": len(weights), "fresh": [], "unused": []}
    else:
        model, dims = build(), {}
        report = load_fitting(model, weights)
    report = {"from": src.name, "kind": src.kind, "step": src.step, **report}
    print(f"masklab: starting from {'run' if src.kind == 'run' else 'imported model'} {src.name}"
          + (f" at step {src.step}" if src.step is not None else "") + f": {report['loaded']} tensors loaded"
          + (f"; initialised fresh: {', '.join(report['fresh'])}" if report["fresh"] else "")
          + (f"; left out of the source: {', '.join(report['unused'])}" if report["unused"] else ""), file=sys.stderr)
    return model.train(), dims, report


def load_fitting(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Load into ``model`` every tensor of ``weights`` whose name and shape fit; the others stay at
    the model's initialisation.

    Returns:
        ``{"loaded": n, "fresh": [the model's tensors not loaded, with the shapes that did not
        fit], "unused": [the source's tensors that fit nowhere]}``.
    """
    own = model.state_dict()
    take, fresh = {}, []
    for k, t in own.items():
        w = weights.get(k)
        if w is not None and tuple(w.shape) == tuple(t.shape):
            take[k] = w
        else:
            fresh.append(k if w is None else f"{k} ({list(w.shape)} in the source, {list(t.shape)} here)")
    model.load_state_dict(take, strict=False)
    return {"loaded": len(take), "fresh": fresh, "unused": sorted(k for k in weights if k not in own)}


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
