"""Importers of published checkpoints: which one reads ``PATH`` is decided from what it is.

- a folder with ``config.json`` (Hugging Face ``save_pretrained``): its ``model_type`` picks
  ``vit_mae`` (:mod:`.hf_vitmae`) or ``bert`` (:mod:`.hf_bert`);
- a ``.pth`` / ``.pt`` file: the MAE repository's layout (:mod:`.mae_pth`);
- ``owner/name`` that is no path here: a Hugging Face Hub id (:mod:`.hub`), fetched then read as a folder.

Every importer refuses (``PretrainedError`` naming the file and the tensor) before anything is
registered; what it ignores or initialises fresh is listed in the record's ``source``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.pretrained.store import PretrainedError, PretrainedModel, check_name, get_pretrained, models_root

HF_TYPES = {"vit_mae": "engine.pretrained.importers.hf_vitmae", "bert": "engine.pretrained.importers.hf_bert"}


def import_model(path: str, name: str, options: dict[str, Any] | None = None, workspace=None) -> PretrainedModel:
    """Import the checkpoint at ``path`` (folder, ``.pth`` or Hub id) as the model ``name``.

    Internal, with no permission check: callers go through :func:`engine.pretrained.manage.import_path`
    or :func:`~engine.pretrained.manage.import_upload` (``model.import``, audited), as the CLI does.

    Args:
        options: importer options from the CLI or the dashboard (``num_heads``, ``decoder_num_heads``,
            ``image_mean``, ``image_std``: lists of 3 floats; ``source_path``: what the record names
            as the source instead of ``path``, e.g. the files of an upload).

    Raises:
        PretrainedError: the name is taken or malformed, or the checkpoint is refused (the message
            names the file and the problem).
    """
    import importlib  # noqa: PLC0415 (an importer loads torch and its format's reader only when its format is asked for)

    check_name(name)
    if (models_root(workspace) / name / "model.json").exists():
        get_pretrained(name, workspace)
        raise PretrainedError(f"a model named {name!r} is already imported; pick another --name or delete it first")
    options = dict(options or {})
    p = Path(path).expanduser()
    if not p.exists():
        if _looks_like_hub_id(path):
            from engine.pretrained.importers.hub import fetch  # noqa: PLC0415 (an importer loads torch and its format's reader only when its format is asked for)

            p = fetch(path, workspace)
            options.setdefault("source_format", "hub")
            options.setdefault("hub_id", path)
        else:
            raise PretrainedError(f"{path}: no such file or folder")
    if p.is_dir():
        cfg_file = p / "config.json"
        if not cfg_file.is_file():
            raise PretrainedError(f"{p}: not a Hugging Face model folder (no config.json); give the folder that "
                                  "save_pretrained wrote, or the MAE repository's .pth file")
        try:
            config = json.loads(cfg_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise PretrainedError(f"{cfg_file}: unreadable ({e})") from e
        mtype = config.get("model_type") if isinstance(config, dict) else None
        if mtype not in HF_TYPES:
            raise PretrainedError(f"{cfg_file}: unknown architecture (model_type {mtype!r}); masklab imports "
                                  f"{', '.join(sorted(HF_TYPES))} (ViTMAEForPreTraining, ViTMAEModel, BertForMaskedLM)")
        mod = importlib.import_module(HF_TYPES[mtype])
        return mod.import_folder(p, name, config, options, workspace)
    if p.suffix in (".pth", ".pt", ".bin"):
        from engine.pretrained.importers.mae_pth import import_pth  # noqa: PLC0415 (an importer loads torch and its format's reader only when its format is asked for)

        return import_pth(p, name, options, workspace)
    raise PretrainedError(f"{p}: not a checkpoint masklab reads (a Hugging Face folder with config.json, or the MAE "
                          "repository's .pth)")


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~"))
