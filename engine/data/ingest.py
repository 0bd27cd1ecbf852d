"""One import entry point for every modality: look at a source, then import it.

    >>> plan = inspect_source("trec.tsv")          # modality, columns and their roles, preview, classes
    >>> report = import_source("trec.tsv", "trec", ImportOptions(min_chars=10))
    >>> print(report.summary())

:func:`detect_modality` decides from the file itself (its extension, or what a zip or folder holds),
asking the importers of the registered modalities (:func:`engine.modalities.importers`: the files
each claims, in their order) which one reads it. Images go to
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
from engine.data import audio, importer, text
from engine.data.archive import Members, clean_path, decode_names
from engine.data.limits import ImportLimits
from engine.data.tabular import TABLE_EXTENSIONS, ColumnRoles, ImportOptions
from engine.errors import DatasetError
from engine.modalities import get_importer, importers

PathLike = str | os.PathLike[str]


@dataclass
class SourcePlan:
    """What importing a source would do, for the Data page to show before the user confirms.

    Attributes:
        source: how the source is named.
        modality: the dataset modality its importer writes (:class:`engine.modalities.Importer`).
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


def detect_source(path: PathLike, source_label: str | None = None) -> str:
    """How a source is imported: the name of the registered importer that claims it
    (:class:`engine.modalities.Importer`), from the file itself.

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
    imps = importers()
    if src.is_file():
        for imp in imps:
            if ext in imp.files and (imp.claims_file is None or imp.claims_file(src)):
                return imp.name
        for imp in imps:
            if imp.lone_file and ext in imp.tree:
                raise DatasetError(f"{label}: {imp.lone_file}")
    names = _tree_names(src, label)
    for imp in imps:
        if imp.claims_tree is not None and imp.claims_tree(names):
            return imp.name
    counts = Counter(PurePosixPath(n).suffix.lower() for n in names)
    for imp in imps:
        if any(counts.get(e) for e in imp.tree):
            return imp.name
    found = ", ".join(f"{n} x {e or 'no extension'}" for e, n in sorted(counts.items())) or "no files"
    raise DatasetError(f"{label}: no images (PNG, JPEG, WebP, BMP, TIFF, GIF, IDX), no audio (WAV, FLAC, Ogg) "
                       f"and no .txt documents inside ({found})")


def detect_modality(path: PathLike, source_label: str | None = None) -> str:
    """The modality of a source (``"image"``, ``"text"``, ``"audio"``): that of its importer
    (:func:`detect_source`).

    Raises:
        DatasetError: as :func:`detect_source`.
    """
    return get_importer(detect_source(path, source_label)).modality


def check_options(options: ImportOptions, label: str, kind: str, what: str) -> None:
    """Refuse the options that importer ``kind`` does not read: column options when it reads no
    table (:attr:`~engine.modalities.Importer.columns`), and the options only other importers read
    (:attr:`~engine.modalities.Importer.options`, e.g. ``min_chars`` for text).

    Raises:
        DatasetError: ``"<label>: <options> do not apply to <what>"``.
    """
    imp = get_importer(kind)
    unused = [] if imp.columns else [f"{r}_column" for r in options.given_columns()]
    others = dict.fromkeys(o for i in importers() for o in i.options if o not in imp.options)
    unused += [k for k in others if getattr(options, k, None) is not None]
    if unused:
        raise DatasetError(f"{label}: {', '.join(unused)} do not apply to {what}")


def importer_of(kind: str) -> tuple[Callable[..., SourcePlan], Callable[..., Any]]:
    """``(inspect, import)`` of source kind ``kind`` (:func:`detect_source`), from the modality registry
    (:attr:`engine.modalities.Importer.inspect`, :attr:`~engine.modalities.Importer.run`)."""
    imp = get_importer(kind)
    return imp.inspect, imp.run


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
    inspect, _ = importer_of(detect_source(path, label))
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
    _, do_import = importer_of(detect_source(path, label))
    return do_import(Path(path).expanduser(), name, options or ImportOptions(), workspace=workspace,
                     overwrite=overwrite, source_label=label, image_size=image_size, fill=fill,
                     geometry=geometry, pad_fill=pad_fill, actor=actor, progress=progress)  # fmt: skip
