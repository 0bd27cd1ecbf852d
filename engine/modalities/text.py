"""The text modality: UTF-8 documents (:class:`~engine.data.dataset.TextDataset`), imported from a
text file (lines, paragraphs), a table (CSV, TSV, JSON lines) or a zip or folder of ``.txt`` files;
masked on token grids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.data import text
from engine.data.dataset import TextDataset
from engine.data.ingest import SourcePlan, check_options
from engine.data.tabular import TABLE_EXTENSIONS
from engine.data.text import TEXT_EXTENSIONS
from engine.modalities import Importer, Modality, register_modality

IMAGE_ONLY = ("image_size", "fill", "geometry", "pad_fill", "progress")
"""Keyword options of :func:`engine.data.import_source` that only images use (dropped for text and audio)."""


def _dataset_type() -> type:
    return TextDataset


def inspect_text(path: Path, options, label: str):
    """:func:`engine.data.text.prepare_text` as a :class:`~engine.data.ingest.SourcePlan` (read and
    cleaned exactly as the import would)."""
    check_options(options, label, "text", "text")
    prep = text.prepare_text(path, options, label)
    src = prep.source
    return SourcePlan(
        label, "text", src.kind, columns=src.columns, roles=src.roles, preview=src.preview,
        class_names=prep.class_names, label_counts=prep.label_counts(), n_items=len(prep.texts),
        cleaning=prep.cleaning.as_dict(), rejected=src.rejected, skipped=src.skipped, notes=src.notes,
    )  # fmt: skip


def import_text(path: Path, name: str | None, options, **kw: Any):
    """:func:`engine.data.text.import_text` (the image-only keywords dropped)."""
    check_options(options, kw.get("source_label") or str(path), "text", "text")
    for k in IMAGE_ONLY:
        kw.pop(k, None)
    return text.import_text(path, name, options, **kw)


TEXT = register_modality(Modality(
    "text", _dataset_type, ui="app.modalities.text", grids=("tokens-1d",), summary="text: documents, tokenised, masked per token",
    importers=(Importer("text", inspect_text, import_text, files=(*TEXT_EXTENSIONS, *TABLE_EXTENSIONS),
                        tree=TEXT_EXTENSIONS, options=("min_chars", "max_chars"), order=50),),
))  # fmt: skip
