"""One import entry point for every modality: look at a source, then import it.

    >>> plan = inspect_source("trec.tsv")          # modality, columns and their roles, preview, classes
    >>> report = import_source("trec.tsv", "trec", ImportOptions(min_chars=10))
    >>> print(report.summary())

:func:`detect_modality` decides from the file itself (its extension, or what a zip or folder holds);
:data:`IMPORTERS` maps each modality to how it is inspected and imported. Images go to
:func:`engine.data.importer.import_archive` unchanged; IDX files (the MNIST format) to
:func:`engine.data.idx.import_idx`; text to :func:`engine.data.text.import_text`; audio to
:func:`engine.data.audio.import_audio`. image-caption pairs to
:func:`engine.data.paired.import_paired`.
"""

from __future__ import annotations

import os
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from engine.access.policy import Identity
from engine.data import audio, idx, importer, paired, storage, text
from engine.data.images import EXTENSIONS as IMAGE_EXTENSIONS
from engine.data.tabular import TABLE_EXTENSIONS, ColumnRoles, ImportOptions
from engine.errors import DatasetError

PathLike = str | os.PathLike[str]


@dataclass
class SourcePlan:
    """What importing a source would do, for the Data page to show before the user confirms.

    Attributes:
        source: how the source is named.
        modality: ``"image"``, ``"text"`` or ``"audio"``.
        kind: how it is read: ``"image zip"`` / ``"image folder"``; ``"lines"``, ``"paragraphs"``,
            ``"csv"``, ``"tsv"``, ``"jsonl"``, ``"txt files"``; ``"audio file"`` / ``"audio zip"`` /
            ``"audio folder"``.
        columns: the table's columns (``[]`` without a table).
        roles: which column has which role and why (None without a table); change them with the
            ``*_column`` fields of :class:`ImportOptions` and inspect again.
        preview: the first few rows or documents (column -> value) or image files (``file``, ``label``).
        class_names: the classes the import would create.
        label_counts: rows (documents, images) per class that the import would keep.
        n_items: rows (documents, images) the import would keep (after text cleaning).
        cleaning: text cleaning counts (``CleaningCounts.as_dict()``); ``{}`` for images.
        rejected: ``(file or file:line, reason)`` known already (images are only decoded on import).
        skipped: ``(file, reason)`` for files that are not used.
        notes: how the source is read.
        sample_rates: audio only: recording rate (Hz) -> clips, from the headers of a sample of
            clips (:func:`engine.data.audio.recorded_rates`); ``{}`` for other modalities.
    """

    source: str
    modality: str
    kind: str
    columns: list[str] = field(default_factory=list)
    roles: ColumnRoles | None = None
    preview: list[dict[str, str]] = field(default_factory=list)
    class_names: tuple[str, ...] = ()
    label_counts: dict[str, int] = field(default_factory=dict)
    n_items: int = 0
    cleaning: dict[str, int] = field(default_factory=dict)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sample_rates: dict[int, int] = field(default_factory=dict)


def _tree_names(path: Path, label: str) -> list[str]:
    """Visible file names in a zip or folder (``__MACOSX`` and hidden files left out), read from the
    directory alone with the archive safeguards (entry count limit)."""
    from engine.data.archive import Members, clean_path, decode_names
    from engine.data.limits import ImportLimits

    if not path.is_dir() and not zipfile.is_zipfile(path):
        if path.stat().st_size == 0:
            raise DatasetError(f"{label}: the file is empty (0 bytes)")
        if path.suffix.lower() == ".zip":
            raise DatasetError(f"{label}: named .zip but not a zip archive (damaged, cut short, or another "
                               f"kind of file renamed); make the zip again")
        raise DatasetError(f"{label}: not a file type masklab imports; give a .zip (images, audio clips or .txt "
                           f"documents), a text file (.txt, {', '.join(TABLE_EXTENSIONS)}) or an audio clip "
                           f"({', '.join(audio.EXTENSIONS)})")  # fmt: skip
    with Members(path, label, ImportLimits.from_env()) as ms:
        decode_names(ms.members)
        names = [clean_path(m.name) for m in ms.members]
    return [n for n in names if (parts := PurePosixPath(n).parts) and parts[0] != "__MACOSX"
            and not any(p.startswith(".") for p in parts)]


FILE_MODALITIES: list[tuple[str, Any]] = [
    ("text", (*text.TEXT_EXTENSIONS, *TABLE_EXTENSIONS)),
    ("audio", (*audio.EXTENSIONS, *audio.UNSUPPORTED)),
]
"""A single file's modality by its extension (first match)."""
TREE_MODALITIES: list[tuple[str, Any]] = [
    ("image", tuple(IMAGE_EXTENSIONS)),
    ("audio", tuple(audio.EXTENSIONS)),
    ("text", text.TEXT_EXTENSIONS),
]
"""A zip's or folder's modality: the first whose extensions it holds (images before audio before text,
so a README.txt beside the clips does not make a text corpus)."""


def detect_source(path: PathLike, source_label: str | None = None) -> str:
    """How a source is imported: a key of :data:`IMPORTERS`, from the file itself.

    Rules: a ``.txt``, ``.csv``, ``.tsv`` or ``.jsonl`` file is ``"text"``; a ``.wav``, ``.flac``,
    ``.ogg`` (or MP3, M4A... refused on import) file is ``"audio"``; a zip or a folder is ``"idx"``
    when it holds an IDX images file and an IDX labels file (MNIST's ``*-idx3-ubyte[.gz]`` +
    ``*-idx1-ubyte[.gz]``), else ``"image"`` when it holds PNG/JPEG files (other files are then
    skipped, as before), else ``"audio"`` when it holds WAV/FLAC/Ogg files (a manifest table beside
    them labels them), else ``"text"`` when it holds ``.txt`` files.

    Raises:
        DatasetError: missing path, an unknown file type, or a zip/folder with none (naming what it holds).
    """
    src = Path(path).expanduser()
    label = source_label or str(path)
    if not src.exists():
        raise DatasetError(f"{label}: no such file or folder")
    ext = src.suffix.lower()
    if src.is_file():
        for modality, exts in FILE_MODALITIES:
            if ext in exts:
                return modality
    if src.is_file() and ext in IMAGE_EXTENSIONS:
        raise DatasetError(f"{label}: a single image; put the images in a .zip (sub-folders = labels)")
    names = _tree_names(src, label)
    if idx.holds_idx(names):
        return "idx"
    if paired.holds_pairs(names):
        return "paired"
    counts = Counter(PurePosixPath(n).suffix.lower() for n in names)
    for modality, exts in TREE_MODALITIES:
        if any(counts.get(e) for e in exts):
            return modality
    found = ", ".join(f"{n} x {e or 'no extension'}" for e, n in sorted(counts.items())) or "no files"
    raise DatasetError(f"{label}: no images (PNG, JPEG, WebP, BMP, TIFF, GIF, IDX), no audio (WAV, FLAC, Ogg) "
                       f"and no .txt documents inside ({found})")


def detect_modality(path: PathLike, source_label: str | None = None) -> str:
    """The modality of a source (``"image"``, ``"text"``, ``"audio"``): that of its importer
    (:func:`detect_source`).

    Raises:
        DatasetError: as :func:`detect_source`.
    """
    return IMPORTER_MODALITY[detect_source(path, source_label)]


#: Options that only one modality reads; the others refuse them (naming the option).
OPTION_MODALITY = {"min_chars": "text", "max_chars": "text", "sample_rate": "audio"}


def _check_options(options: ImportOptions, label: str, modality: str, what: str) -> None:
    unused = [f"{r}_column" for r in options.given_columns()] if modality == "image" else []
    unused += [k for k, m in OPTION_MODALITY.items() if m != modality and getattr(options, k) is not None]
    if unused:
        raise DatasetError(f"{label}: {', '.join(unused)} do not apply to {what}")


def _check_image_options(options: ImportOptions, label: str) -> None:
    _check_options(options, label, "image", "a zip or folder of images")


def _inspect_image(path: Path, options: ImportOptions, label: str) -> SourcePlan:
    _check_image_options(options, label)
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


def _import_image(path: Path, name: str | None, options: ImportOptions, **kw: Any) -> importer.ImportReport:
    _check_image_options(options, kw.get("source_label") or str(path))
    report = importer.import_archive(path, name, val_fraction=options.val_fraction, seed=options.seed,
                                     name_encoding=options.name_encoding, **kw)
    if report.dataset is not None:  # the stored info, with its source_hash
        report.dataset = storage.read_info(storage.datasets_dir(kw.get("workspace")) / report.dataset.name)
    return report


def _inspect_text(path: Path, options: ImportOptions, label: str) -> SourcePlan:
    _check_options(options, label, "text", "text")
    prep = text.prepare_text(path, options, label)
    src = prep.source
    return SourcePlan(
        label, "text", src.kind, columns=src.columns, roles=src.roles, preview=src.preview,
        class_names=prep.class_names, label_counts=prep.label_counts(), n_items=len(prep.texts),
        cleaning=prep.cleaning.as_dict(), rejected=src.rejected, skipped=src.skipped, notes=src.notes,
    )  # fmt: skip


def _import_text(path: Path, name: str | None, options: ImportOptions, **kw: Any) -> text.TextImportReport:
    _check_options(options, kw.get("source_label") or str(path), "text", "text")
    for k in IMAGE_ONLY:
        kw.pop(k, None)
    return text.import_text(path, name, options, **kw)


IMAGE_ONLY = ("image_size", "fill", "geometry", "pad_fill", "progress")
"""Keyword options of :func:`import_source` that only images use (ignored for text and audio)."""


def _inspect_audio(path: Path, options: ImportOptions, label: str) -> SourcePlan:
    _check_options(options, label, "audio", "audio")
    return SourcePlan(label, "audio", **audio.inspect_audio(path, options, label))


def _import_audio(path: Path, name: str | None, options: ImportOptions, **kw: Any) -> audio.AudioImportReport:
    _check_options(options, kw.get("source_label") or str(path), "audio", "audio")
    for k in IMAGE_ONLY:
        kw.pop(k, None)
    return audio.import_audio(path, name, options, **kw)


def _inspect_paired(path: Path, options: ImportOptions, label: str) -> SourcePlan:
    _check_options(options, label, "paired", "image-caption pairs")
    return SourcePlan(label, "paired", **paired.inspect_paired(path, options, label))


def _import_paired(path: Path, name: str | None, options: ImportOptions, **kw: Any) -> paired.PairedImportReport:
    _check_options(options, kw.get("source_label") or str(path), "paired", "image-caption pairs")
    return paired.import_paired(path, name, options, **kw)


IMPORTERS: dict[str, tuple[Callable[..., SourcePlan], Callable[..., Any]]] = {
    "image": (_inspect_image, _import_image),
    "idx": (idx.inspect_idx, idx.import_idx),
    "text": (_inspect_text, _import_text),
    "audio": (_inspect_audio, _import_audio),
    "paired": (_inspect_paired, _import_paired),
}
"""source kind (:func:`detect_source`) -> ``(inspect(path, options, label) -> SourcePlan,
import(path, name, options, **kw) -> report)``."""
IMPORTER_MODALITY = {"image": "image", "idx": "image", "text": "text", "audio": "audio", "paired": "paired"}
"""The dataset modality each importer produces."""


def inspect_source(
    path: PathLike, options: ImportOptions | None = None, *, source_label: str | None = None
) -> SourcePlan:
    """Look at a source without importing it: modality, columns and their roles, preview, classes.

    For text the source is read and cleaned exactly as :func:`import_source` would (so the
    counts are the import's); for images and audio the files are listed (and an audio manifest
    read), not decoded.

    Args:
        path: a ``.zip`` or folder (images, audio clips or ``.txt`` files), a ``.txt`` / ``.csv`` /
            ``.tsv`` / ``.jsonl`` file, or one ``.wav`` / ``.flac`` / ``.ogg`` clip.
        options: column options and filters (default: detect everything).
        source_label: how messages name the source (the dashboard passes the uploaded file's name).
    Raises:
        DatasetError: as :func:`detect_modality` and the modality's reader (invalid UTF-8 with the
            line, an unknown column listing the columns, ...).
    """
    label = source_label or str(path)
    inspect, _ = IMPORTERS[detect_source(path, label)]
    return inspect(Path(path).expanduser(), options or ImportOptions(), label)


def import_source(
    path: PathLike,
    name: str | None = None,
    options: ImportOptions | None = None,
    *,
    workspace: PathLike | None = None,
    overwrite: bool = False,
    source_label: str | None = None,
    image_size: int | None = None,
    fill: str = "white",
    geometry: str = "crop",
    pad_fill: str = "edge",
    actor: Identity | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> importer.ImportReport | text.TextImportReport | audio.AudioImportReport:
    """Import any source as a dataset: images with :func:`engine.data.importer.import_archive`
    (``image_size`` (None: the data's own size), ``geometry``, ``pad_fill``, ``fill``,
    ``options.val_fraction``, ``options.seed``, ``options.name_encoding``, ``progress(done, total)``
    per image file), text with :func:`engine.data.text.import_text` (columns, filters, split), audio with
    :func:`engine.data.audio.import_audio` (manifest columns, ``options.sample_rate``, split). Every
    report has ``summary()``, ``dataset``, ``accepted``, ``rejected`` and ``skipped``.

    Raises:
        DatasetError: as :func:`detect_modality` and the modality's importer; options that do not
            apply to the source (column options or length filters for images, ``sample_rate`` for
            images and text, length filters for audio). Nothing is written then.
        PermissionDeniedError: ``actor`` (default :func:`engine.access.policy.current_identity`) is not an
            editor, or demo mode; nothing is written (the importer checks before it reads a file).
    """
    label = source_label or str(path)
    _, do_import = IMPORTERS[detect_source(path, label)]
    return do_import(Path(path).expanduser(), name, options or ImportOptions(), workspace=workspace,
                     overwrite=overwrite, source_label=label, image_size=image_size, fill=fill,
                     geometry=geometry, pad_fill=pad_fill, actor=actor, progress=progress)  # fmt: skip
