"""The paired modality: an image and its caption per row (:class:`~engine.data.dataset.PairedDataset`),
imported from a zip or folder of images with a captions table or same-stem ``.txt`` files. Its tasks
mask each part on that part's grid (image patches, caption tokens), so it declares no grid of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.data import paired
from engine.data.dataset import PairedDataset
from engine.data.ingest import SourcePlan, check_options
from engine.modalities import Importer, Modality, register_modality


def _dataset_type() -> type:
    return PairedDataset


def inspect_paired(path: Path, options, label: str):
    """:func:`engine.data.paired.inspect_paired` as a :class:`~engine.data.ingest.SourcePlan`."""
    check_options(options, label, "paired", "image-caption pairs")
    return SourcePlan(label, "paired", **paired.inspect_paired(path, options, label))


def import_paired(path: Path, name: str | None, options, **kw: Any):
    """:func:`engine.data.paired.import_paired`."""
    check_options(options, kw.get("source_label") or str(path), "paired", "image-caption pairs")
    return paired.import_paired(path, name, options, **kw)


def _holds_pairs(names: list[str]) -> bool:
    return paired.holds_pairs(names)


PAIRED = register_modality(Modality(
    "paired", _dataset_type, ui="app.modalities.paired", summary="image-caption pairs: an image and its caption per row",
    importers=(Importer("paired", inspect_paired, import_paired, claims_tree=_holds_pairs,
                        preload=("PIL.Image",), order=20),),
))  # fmt: skip
