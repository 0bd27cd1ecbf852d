"""The image modality: pixels ``[C, H, W]`` (:class:`~engine.data.dataset.ImageDataset`), imported from
a zip or folder of image files (sub-folders = labels) or MNIST's IDX files, masked on patch grids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.data import idx, importer, storage, text
from engine.data.dataset import ImageDataset
from engine.data.images import EXTENSIONS as IMAGE_EXTENSIONS
from engine.data.ingest import SourcePlan, check_options
from engine.modalities import Importer, Modality, register_modality

DEFAULT_TASK = "image_mim"
"""The task a run config without ``task`` trains (:class:`engine.config.RunConfig`)."""


def _dataset_type() -> type:
    return ImageDataset


def inspect_image(path: Path, options, label: str):
    """:func:`engine.data.importer.scan_archive` as a :class:`~engine.data.ingest.SourcePlan` (nothing decoded)."""
    check_options(options, label, "image", "a zip or folder of images")
    scan = importer.scan_archive(path, name_encoding=options.name_encoding, source_label=label)
    plan = SourcePlan(label, "image", "image folder" if path.is_dir() else "image zip")
    plan.skipped = list(scan.skipped)
    plan.rejected = list(scan.rejected)
    plan.class_names = scan.class_names
    plan.label_counts = dict(scan.class_counts)
    plan.n_items = len(scan.images)
    labels, _ = importer.class_labels(scan.images)
    plan.preview = [{"file": p, "label": c} for p, c in zip(scan.images[: text.PREVIEW_ROWS], labels)]
    plan.notes.append(scan.names.describe())
    plan.notes.append("images are decoded on import; unreadable ones are rejected then")
    return plan


def import_image(path: Path, name: str | None, options, **kw: Any):
    """:func:`engine.data.importer.import_archive` with the options of :func:`engine.data.import_source`."""
    check_options(options, kw.get("source_label") or str(path), "image", "a zip or folder of images")
    report = importer.import_archive(path, name, val_fraction=options.val_fraction, seed=options.seed,
                                     name_encoding=options.name_encoding, **kw)
    if report.dataset is not None:  # the stored info, with its source_hash
        report.dataset = storage.read_info(storage.datasets_dir(kw.get("workspace")) / report.dataset.name)
    return report


def _holds_idx(names: list[str]) -> bool:
    return idx.holds_idx(names)


def _inspect_idx(*a, **kw):
    return idx.inspect_idx(*a, **kw)


def _import_idx(*a, **kw):
    return idx.import_idx(*a, **kw)


IMAGE = register_modality(Modality(
    "image", _dataset_type, ui="app.modalities.image", grids=("patch-2d",), summary="images: pixels [C, H, W], masked in patches",
    importers=(
        Importer("idx", _inspect_idx, _import_idx, claims_tree=_holds_idx, preload=("PIL.Image",), order=10),
        Importer("image", inspect_image, import_image, tree=tuple(IMAGE_EXTENSIONS), columns=False, preload=("PIL.Image",), order=30,
                 lone_file="a single image; put the images in a .zip (sub-folders = labels)"),
    ),
))  # fmt: skip
