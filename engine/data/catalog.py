"""The bundled datasets' names and modalities (known without reading them), and the names an import
may take: the bundled names are reserved (:mod:`engine.data.bundled` builds the sets)."""

from __future__ import annotations

import os

from engine.data import storage
from engine.data.dataset import validate_name
from engine.errors import DatasetError

BUNDLED = ("digits", "fashion-mnist", "fortunes", "asterisk-prompts", "tuxpaint-stamps")
"""Names of the bundled datasets, in listing order. These names are reserved for imports."""
MODALITY = {"digits": "image", "fashion-mnist": "image", "fortunes": "text", "asterisk-prompts": "audio",
            "tuxpaint-stamps": "paired"}
"""Modality of each bundled dataset (known without reading it)."""


def check_new_name(name: str, workspace: str | os.PathLike[str] | None = None, overwrite: bool = False) -> str:
    """Return ``name`` if a new import may register it, else raise :class:`DatasetError`.

    Refused: an invalid name (:func:`~engine.data.dataset.validate_name`), a bundled dataset's name,
    and an existing dataset's name unless ``overwrite`` (the import then replaces it atomically).
    """
    validate_name(name)
    if name in BUNDLED:
        raise DatasetError(f"dataset name {name!r} is reserved for a bundled dataset; choose another name")
    if storage.is_registered(name, workspace) and not overwrite:
        raise DatasetError(f"dataset {name!r} already exists; choose another name or replace it"
                           f" (`data add --overwrite`, or tick 'Replace' on the Data page)")  # fmt: skip
    return name
