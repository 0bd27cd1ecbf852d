"""Imported (pretrained) models in the workspace: ``models/<name>/``.

A folder holds ``model.json`` (written last: the folder's marker), ``model.safetensors`` (the
weights under masklab's own parameter names, float32) and, for a text model, the tokenizer files
it came with (``tokenizer.json`` or ``vocab.txt``). Folders are published atomically
(:func:`engine.workspace.publish_folder`): a reader sees a whole model or none, and a refused
import leaves nothing behind.

``model.json``::

    {"name": "mae-b", "arch": "mae_vit", "modality": "image",
     "arch_config": {...},            # the builder's keyword arguments (PRETRAINED_ARCHS[arch])
     "preprocessing": {...},          # image: {"size": [H, W], "channels": C, "mean": [..], "std": [..]}
                                      # text: {"tokenizer": "tokenizer.json" | "vocab.txt", "lowercase": bool,
                                      #        "special": {"pad": id, "unk": id, "cls": id, "sep": id, "mask": id},
                                      #        "max_len": N}
     "source": {"path": "...", "format": "hf" | "mae_pth" | "hub", "ignored": [tensor names],
                "fresh": [what was initialised fresh, e.g. "decoder"], "notes": [sentences]},
     "created": "2026-12-06T16:30:00Z", "n_params": int}
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.pretrained.registry import PRETRAINED_ARCHS, PretrainedError, register_pretrained_arch
from engine.workspace import atomic_write_json, publish_folder, read_json, workspace_root

MODEL_FILE = "model.json"
WEIGHTS_FILE = "model.safetensors"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
__all__ = ["PRETRAINED_ARCHS", "PretrainedError", "PretrainedModel", "get_pretrained", "list_pretrained",
           "load_pretrained", "models_root", "register_pretrained_arch", "save_pretrained"]


@dataclass
class PretrainedModel:
    """One imported model's record (``models/<name>/model.json``); see the module docstring."""

    name: str
    arch: str
    modality: str
    arch_config: dict[str, Any]
    preprocessing: dict[str, Any]
    source: dict[str, Any]
    created: str = ""
    n_params: int = 0
    path: Path | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path")
        return d


def models_root(workspace=None) -> Path:
    """``<workspace>/models``: one folder per imported model."""
    return workspace_root(workspace) / "models"


def check_name(name: str) -> str:
    """``name`` if it can name a model folder. Raises :class:`PretrainedError`."""
    if not NAME_RE.match(name or ""):
        raise PretrainedError(f"model name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a "
                              "letter or digit")
    return name


def save_pretrained(info: PretrainedModel, state_dict: dict[str, Any], files: dict[str, bytes] | None = None,
                    workspace=None) -> PretrainedModel:
    """Publish an imported model as ``models/<info.name>/`` (atomically; never over an existing one).

    Args:
        info: the record; ``created`` and ``n_params`` are filled in here.
        state_dict: masklab parameter name -> tensor; stored float32 contiguous with safetensors.
        files: extra files to keep beside the weights (tokenizer files), name -> bytes.

    Raises:
        PretrainedError: the name is malformed or taken.
    """
    import torch  # noqa: PLC0415 (the store's readers do not need torch)
    from safetensors.torch import save_file  # noqa: PLC0415 (with torch, only where weights are written)

    check_name(info.name)
    target = models_root(workspace) / info.name
    if (target / MODEL_FILE).exists():
        raise PretrainedError(f"a model named {info.name!r} is already imported ({target}); pick another --name "
                              "or delete it first")
    info.created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tensors = {k: v.detach().to(torch.float32).contiguous() if v.is_floating_point() else v.detach().contiguous()
               for k, v in state_dict.items()}
    info.n_params = int(sum(t.numel() for t in tensors.values()))

    def fill(tmp: Path) -> None:
        save_file(tensors, str(tmp / WEIGHTS_FILE))
        for fname, data in (files or {}).items():
            (tmp / fname).write_bytes(data)
        atomic_write_json(tmp / MODEL_FILE, info.to_json())

    if not publish_folder(target, fill, marker=MODEL_FILE):
        raise PretrainedError(f"a model named {info.name!r} was imported meanwhile ({target})")
    info.path = target
    return info


def _read(folder: Path) -> PretrainedModel:
    try:
        d = read_json(folder / MODEL_FILE)
        return PretrainedModel(**d, path=folder)
    except (OSError, ValueError, TypeError) as e:
        raise PretrainedError(f"{folder / MODEL_FILE}: unreadable imported model ({e})") from e


def list_pretrained(workspace=None) -> list[PretrainedModel]:
    """Imported models, by name (a damaged folder is skipped)."""
    root = models_root(workspace)
    out = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.name.startswith(".") or not (folder / MODEL_FILE).exists():
            continue
        try:
            out.append(_read(folder))
        except PretrainedError:
            continue
    return out


def get_pretrained(name: str, workspace=None) -> PretrainedModel:
    """The imported model ``name``. Raises :class:`PretrainedError` naming the known ones."""
    folder = models_root(workspace) / name
    if not NAME_RE.match(name or "") or not (folder / MODEL_FILE).exists():
        known = ", ".join(m.name for m in list_pretrained(workspace)) or "none"
        raise PretrainedError(f"no imported model named {name!r} (imported: {known}); import one with "
                              "python -m engine models import PATH --name NAME")
    return _read(folder)


def load_pretrained(name: str, workspace=None):
    """``(model, info)``: the imported model ``name`` built and loaded, in eval mode on the CPU.

    Raises:
        PretrainedError: unknown name or arch, or weights that do not fit the architecture.
    """
    from safetensors.torch import load_file  # noqa: PLC0415 (with torch, only where weights are read)

    import engine.pretrained.archs  # noqa: F401, PLC0415 (registers the builders)

    info = get_pretrained(name, workspace)
    try:
        builder = PRETRAINED_ARCHS[info.arch]
    except KeyError:
        raise PretrainedError(f"{info.path / MODEL_FILE}: unknown architecture {info.arch!r}") from None
    model = builder(info.arch_config)
    weights = info.path / WEIGHTS_FILE
    try:
        model.load_state_dict(load_file(str(weights)))
    except (RuntimeError, OSError) as e:
        raise PretrainedError(f"{weights}: the weights do not fit the {info.arch} model of {MODEL_FILE} ({e})") from e
    return model.eval(), info
