"""Pretrained models in: published MAE and BERT checkpoints imported exactly (issue 32).

Modules: ``store`` (``models/<name>/`` in the workspace), ``archs`` (the builders of imported
architectures), ``importers`` (Hugging Face folders and Hub ids, the MAE repository's ``.pth``),
``predict`` (``python -m engine predict``), ``cli`` (``python -m engine models``).
"""

from engine.pretrained.store import (
    PRETRAINED_ARCHS,
    PretrainedError,
    PretrainedModel,
    get_pretrained,
    list_pretrained,
    load_pretrained,
    models_root,
    register_pretrained_arch,
    save_pretrained,
)

__all__ = ["PRETRAINED_ARCHS", "PretrainedError", "PretrainedModel", "get_pretrained", "list_pretrained",
           "load_pretrained", "models_root", "register_pretrained_arch", "save_pretrained"]
