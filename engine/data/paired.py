"""Paired data: one image and its caption per row (:class:`~engine.data.dataset.PairedDataset`).

Sources (:func:`import_paired`, through :func:`engine.data.import_source`): a ``.zip`` or (CLI) a
folder holding images and either

- **one captions table** (``.csv``, ``.tsv``, ``.jsonl``, read by :mod:`engine.data.tabular`): each row
  names an image in its file column (a path relative to the table's folder, or a name or stem in any
  folder: :mod:`engine.data.manifest`) and gives its caption
  in the text column, optionally a label; the columns come from the shared import options
  (``--file-column``, ``--text-column``, ``--label-column``) or are detected
  (:func:`engine.data.tabular.detect_roles`; the text column is the one named most like a caption,
  :func:`engine.data.tabular.caption_column`, when there is one). Images the table does not list are skipped; or
- **a same-stem ``.txt`` beside each image** (``cat.png`` + ``cat.txt``): the caption is the file's
  first non-empty line (Tux Paint's stamp descriptions put the English sentence first and
  ``xx.utf8=`` translations after it).

Labels: the label column, else the first sub-folder of the image (after one top folder common to
every image, as for image imports), ``unlabeled`` for images at the top.

Every pair that cannot be used is named in the report and the others are imported: a row or a
caption file whose image is missing (``no image ...``), an image without a caption file, an empty
caption, a caption that is not valid UTF-8 (a table row or a ``.txt``; the first bad byte is named),
an image that cannot be decoded (the reasons of :mod:`engine.data.importer`), a row listing an
image twice.

Images follow the image import's rules (:func:`engine.data.importer.read_image`: formats by
content, every mode to 8-bit, transparency over ``fill``, white by default) and are made square by
``geometry`` (as image imports: centre crop by default; ``pad`` keeps a whole stamp or object in the
picture, which the bundled set and the benchmark use) at ``image_size`` pixels, default :data:`DEFAULT_IMAGE_SIZE` = 32: a caption is about a whole small picture, and a
32x32 image cut into 4x4-pixel patches is 64 image tokens, which, next to a caption's 10 to 30
tokens, keeps a joint encoder trainable on a CPU in minutes. Images are always stored RGB (3
channels). The split is :func:`~engine.data.dataset.seeded_split` over the rows, stratified by
label: a row is a pair, so both members of a pair are always in the same split. Rows are stored in
the seeded order of :func:`engine.data.sampling.import_order`.

Bundled set ``tuxpaint-stamps`` (:func:`build_tuxpaint`): Debian's ``tuxpaint-stamps-default`` in
``/usr/share/tuxpaint/stamps`` (or ``$MASKLAB_TUXPAINT_DIR``): every PNG stamp with its ``.txt``
description; label = the category folder; 10% val, seed 0. SVG-only stamps are skipped (no PNG).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from engine.access.policy import permission
from engine.data import storage
from engine.data.archive import (
    Member,
    Members,
    NameDecoding,
    classify,
    decode_names,
    first_refusals,
    import_outcome,
    import_target,
    read_problem,
    refusal_lines,
    skip_reason,
    some_names,
)
from engine.data.catalog import check_new_name
from engine.data.dataset import DatasetInfo, PairedDataset, classes_text, counted, seeded_split
from engine.data.images import EXTENSIONS as IMAGE_EXTENSIONS
from engine.data.images import GEOMETRIES, Refused, fit_square, isolated, lost_on_fill_text
from engine.data.importer import MAX_SIDE, MIN_SIDE, class_labels, default_name, fill_rgb, parse_pad_fill, read_image
from engine.data.limits import ImportLimits
from engine.data.manifest import MAX_CLOSE_PAIRS, ListedFiles, NearMisses, nfc
from engine.data.sampling import import_order
from engine.data.tabular import (
    TABLE_EXTENSIONS,
    ColumnRoles,
    ImportOptions,
    caption_column,
    detect_roles,
    parse_table_rows,
    text_problem,
)
from engine.errors import DatasetError, NothingImportedError

DEFAULT_IMAGE_SIZE = 32
"""Side in pixels of a paired dataset's images when the import does not say (module docstring)."""
DEFAULT_GEOMETRY = "pad"
"""How the bundled set makes its stamps square (the whole stamp stays in the picture)."""
#: The bundled stamps' colour under transparency and around them: a light gray. Over white, 7 of the
#: 802 stamps vanish (:data:`engine.data.images.NOTE_LOST_ON_FILL`: the lightning bolt, the speech,
#: thought and scream balloons, the clock face, the tooth, the white flag); over this gray none does.
#: It is not the masked patches' grey (:data:`app.components.images.MASK_GREY`, 128), so a masked
#: patch stays apart from the background; 192 would lose two gray gravestones.
TUXPAINT_FILL = (160, 160, 160)
CAPTION_EXTENSION = ".txt"
PREVIEW_ROWS = 8

TUXPAINT_ENV = "MASKLAB_TUXPAINT_DIR"
TUXPAINT_DEFAULT_DIR = "/usr/share/tuxpaint/stamps"
TUXPAINT_VAL_FRACTION, TUXPAINT_SEED = 0.1, 0
TUXPAINT_HOW_TO = (
    "install the Debian package tuxpaint-stamps-default (sudo apt-get install tuxpaint-stamps-default), which puts "
    f"the stamps in {TUXPAINT_DEFAULT_DIR}; or set ${TUXPAINT_ENV} to a folder of PNG images with a .txt caption beside each"
)
TUXPAINT_DESCRIPTION = (
    "Tux Paint stamps (Debian's tuxpaint-stamps-default): about 800 pictures (photos and clip art of animals, "
    "food, vehicles, symbols...) each with a one-line English description, label = the category folder; "
    f"{DEFAULT_IMAGE_SIZE}x{DEFAULT_IMAGE_SIZE} RGB, on light gray. Licence: GPL-2 (Bill Kendrick and "
    "contributors), see /usr/share/doc/tuxpaint-stamps-default/copyright."
)


@dataclass
class PairedImportReport:
    """What :func:`import_paired` did with every pair and file.

    Attributes:
        source: the archive or folder as named in messages.
        dataset: the registered dataset's info (None before it is written).
        accepted: pairs imported.
        rejected: ``(where, reason)`` of each pair not imported, ``where`` the image, the caption
            file or ``table:line``; sorted.
        skipped: ``(path, reason)`` for files that are not used (other extensions, unlisted images).
        names: how the member names were decoded.
        roles: the captions table's columns and roles (None with ``.txt`` captions).
        converted: ``(path, note)`` for images converted by a rule worth knowing.
        details: the decoding library's own message for a rejected image, where there is one.
        notes: how the source was read.
        geometry_counts: images per action of :func:`engine.data.images.fit_square`.
    """

    source: str
    dataset: DatasetInfo | None = None
    accepted: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    names: NameDecoding | None = None
    roles: ColumnRoles | None = None
    converted: list[tuple[str, str]] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    geometry_counts: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        """Multi-line report: counts, the dataset, how it was read, every rejected pair with its reason."""
        lines = [f"Import of {self.source}: {self.accepted} image-caption pairs accepted, "
                 f"{len(self.rejected)} rejected, {counted(len(self.skipped), 'file')} skipped."]
        if self.dataset is not None:
            d = self.dataset
            c, h, w = d.image_shape
            lines.append(f"Dataset {d.name!r}: {d.n_train} train + {d.n_val} val pairs, images {c}x{h}x{w}, "
                         f"{classes_text(len(d.class_names))}.")
        lines += self.notes
        return "\n".join(lines + refusal_lines(self.rejected, self.skipped, "Skipped (not used)"))


@dataclass
class PairSource:
    """The pairs a source holds, from its directory and captions alone (no image decoded yet).

    Attributes:
        source: how messages name it; kind: ``"pairs zip"`` or ``"pairs folder"``.
        images: the image members, one per pair, in order; captions, labels: one per pair.
        rejected, skipped: ``(where, reason)``; names: how member names were decoded.
        columns, roles: the captions table's columns and roles (``[]`` / None with ``.txt`` captions).
        notes: how the source is read.
    """

    source: str
    kind: str
    images: list[Member] = field(default_factory=list)
    captions: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    names: NameDecoding | None = None
    columns: list[str] = field(default_factory=list)
    roles: ColumnRoles | None = None
    notes: list[str] = field(default_factory=list)

    def preview(self) -> list[dict[str, str]]:
        """The first pairs (``file``, ``caption``, ``label``) for the Data page."""
        return [{"file": m.name, "caption": c, "label": y}
                for m, c, y in zip(self.images[:PREVIEW_ROWS], self.captions, self.labels)]


def _skip_reason(rel: str) -> str | None:
    return skip_reason(rel, (*IMAGE_EXTENSIONS, *TABLE_EXTENSIONS, CAPTION_EXTENSION),
                       "an image, a caption .txt or a captions table")


def _ext(name: str) -> str:
    return PurePosixPath(name).suffix.lower()


def holds_pairs(names: list[str]) -> bool:
    """Whether a zip's or folder's file names (cleaned, visible) make a paired source: images and
    one captions table, or images of which at least half have a same-stem ``.txt`` beside them."""
    images = [n for n in names if _ext(n) in IMAGE_EXTENSIONS]
    if not images:
        return False
    if any(_ext(n) in TABLE_EXTENSIONS for n in names):
        return True
    stems = {_stem(n) for n in names if _ext(n) == CAPTION_EXTENSION}
    return 2 * sum(_stem(n) in stems for n in images) >= len(images)


def _stem(name: str) -> str:
    """The path without its extension, in Unicode normal form C (an image and its caption pair even
    when one name is stored decomposed, as macOS writes zips, and the other composed)."""
    return nfc(str(PurePosixPath(name).with_suffix("")))


def caption_of(data: bytes) -> str:
    """The caption in a ``.txt`` caption file: its first non-empty line, stripped (``""`` if none).

    Raises:
        Refused: the file is not valid UTF-8 (naming the line and the byte) nor UTF-16/32 text, or its
            content is another format (:mod:`engine.data.sniff`).
    """
    return _caption(data)[0]


def _caption(data: bytes) -> tuple[str, list[str]]:
    """:func:`caption_of` and what decoding did (a converted encoding, a removed byte-order mark)."""
    text, problem, notes = text_problem(data)
    if text is None:
        raise Refused(f"caption {problem}")
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), ""), notes


@contextmanager
def open_pairs(path: Path, label: str, options: ImportOptions, limits: ImportLimits) -> Iterator[PairSource]:
    """Open a zip or folder, classify its members and read its captions (table or ``.txt`` files);
    the members stay readable inside the ``with`` block.

    Raises:
        DatasetError: not a zip / folder, too many entries, a bad name encoding, several tables,
            column options without a table, a table without a file or text column (naming its
            columns), no pair at all.
    """
    with Members(path, label, limits) as ms:
        src = PairSource(label, "pairs folder" if path.is_dir() else "pairs zip")
        src.names = decode_names(ms.members, options.name_encoding)
        candidates, src.rejected, src.skipped = classify(ms.members, limits, _skip_reason)
        tables = [m for m in candidates if _ext(m.name) in TABLE_EXTENSIONS]
        images = [m for m in candidates if _ext(m.name) in IMAGE_EXTENSIONS]
        texts = [m for m in candidates if _ext(m.name) == CAPTION_EXTENSION]
        if len(tables) > 1:
            raise DatasetError(f"{label}: holds {len(tables)} tables ({', '.join(m.name for m in tables[:4])}); "
                               "keep one captions table (or none, with a .txt caption beside each image)")
        given_labels: list[str | None] = []
        if tables:
            given_labels = _captions_from_table(src, tables[0], images, options)
            src.skipped += [(m.name, f"captions come from the table {tables[0].name}") for m in texts]
        else:
            if options.given_columns():
                given = ", ".join(f"{r}_column" for r in options.given_columns())
                raise DatasetError(f"{label}: {given} apply to a captions table (.csv, .tsv, .jsonl) and this "
                                   "source has none; captions come from a .txt beside each image")
            _captions_from_txt(src, images, texts)
            given_labels = [None] * len(src.images)
        # folders judged over every image of the source, not only the kept ones
        folder = dict(zip((m.name for m in images), class_labels([m.name for m in images])[0])) if images else {}
        src.labels = [g or folder[m.name] for g, m in zip(given_labels, src.images)]
        if src.names.noteworthy:
            src.notes.append(src.names.describe())
        yield src


def _captions_from_table(src: PairSource, table_member: Member, images: list[Member],
                         options: ImportOptions) -> list[str | None]:
    """Pairs from the captions table (module docstring); returns the label column's value per pair
    (None: no label column)."""
    where = table_member.name
    try:
        data = table_member.read()
    except Exception as e:  # noqa: BLE001 - a bad CRC, an unsupported compression...
        raise DatasetError(f"{src.source}: the captions table {where} {read_problem(e)}") from None
    table = parse_table_rows(data, where, TABLE_EXTENSIONS[_ext(where)])
    roles = detect_roles(table, options)
    if options.text_column is None and (named := caption_column(table, roles)) is not None:
        roles.text, roles.reasons["text"] = named
    for role in ("file", "text"):
        if getattr(roles, role) is None:
            raise DatasetError(f"{where}: no {role} column ({roles.reasons.get(role)}); columns: "
                               f"{', '.join(map(repr, table.columns))}; name it with {role}_column (--{role}-column)")
    src.columns, src.roles = table.columns, roles
    src.rejected += table.rejected
    listed = ListedFiles(images, where, "image", src.source, ": the pair has no image")  # engine.data.manifest
    col = {r: (table.columns.index(getattr(roles, r)) if getattr(roles, r) else None) for r in ("file", "text", "label")}
    labels: list[str | None] = []
    for row, line in zip(table.rows, table.lines):
        m = listed.find(row[col["file"]], line)
        if m is None:
            continue
        caption = row[col["text"]].strip()
        if not caption:
            src.rejected.append((f"{where}:{line}", f"{m.name}: empty caption"))
            continue
        listed.keep(m, line)
        src.images.append(m)
        src.captions.append(caption)
        labels.append(row[col["label"]].strip() or None if col["label"] is not None else None)
    rejected, skipped, notes = listed.finish(f"not listed in the captions table {where}")
    src.rejected += rejected
    src.skipped += skipped
    src.notes += table.notes + notes
    src.notes.append(f"captions table {where}: {roles.describe()}")
    return labels


def _captions_from_txt(src: PairSource, images: list[Member], texts: list[Member]) -> None:
    """Pairs from same-stem ``.txt`` files beside the images (module docstring)."""
    by_stem = {_stem(m.name): m for m in texts}
    used: set[str] = set()
    refused = {_stem(w) for w, _ in src.rejected if _ext(w) == CAPTION_EXTENSION}  # e.g. an empty file: named already
    lonely: list[tuple[int, Member]] = []  # (index in src.rejected, image without a caption file)
    converted: dict[str, list[str]] = {}
    for m in images:
        t = by_stem.get(_stem(m.name))
        if t is None and _stem(m.name) in refused:
            continue
        if t is None:
            lonely.append((len(src.rejected), m))
            src.rejected.append((m.name, f"no caption: no {PurePosixPath(m.name).with_suffix(CAPTION_EXTENSION)} "
                                         "beside the image"))  # fmt: skip
            continue
        used.add(t.name)
        try:
            try:
                data = t.read()
            except Exception as e:  # noqa: BLE001 - a bad CRC, a broken link...
                raise Refused(read_problem(e)) from None
            caption, notes = _caption(data)
        except Refused as r:
            src.rejected.append((t.name, r.reason))
            continue
        for n in notes:
            converted.setdefault(n, []).append(t.name)
        if not caption:
            src.rejected.append((t.name, f"empty caption (for {m.name})"))
            continue
        src.images.append(m)
        src.captions.append(caption)
    unused = [t for t in texts if t.name not in used]
    near = NearMisses(unused)
    hints: dict[str, str] = {}
    for i, m in lonely:
        if (found := near.near(_stem(m.name), spelling=len(lonely) * len(unused) <= MAX_CLOSE_PAIRS)) is not None:
            how, ts = found
            src.rejected[i] = (m.name, f"{src.rejected[i][1]}; did you mean {' or '.join(repr(t.name) for t in ts)} ({how})?")
            hints.update({t.name: f"; did you mean it for {m.name!r} ({how})?" for t in ts})
    src.rejected += [(t.name, "a caption without an image: no image file of the same name beside it" + hints.get(t.name, ""))
                     for t in unused]  # fmt: skip
    src.notes.append(f"captions: the first line of the {CAPTION_EXTENSION} file beside each image")
    src.notes += [f"{n} in {counted(len(fs), 'caption file')}: {some_names(fs, 5)}" for n, fs in converted.items()]


@dataclass
class DecodedPairs:
    """Images of a :class:`PairSource` decoded and made square: ``pixels`` uint8 ``[N, S, S, 3]``
    with their ``captions`` and ``labels`` (class names), pairs whose image failed left out."""

    pixels: np.ndarray
    captions: list[str]
    labels: list[str]


def decode_pairs(src: PairSource, report: PairedImportReport, limits: ImportLimits, image_size: int,
                 geometry: str, pad_fill, fill: tuple[int, int, int],
                 progress: Callable[[int, int], None] | None = None) -> DecodedPairs:
    """Decode each pair's image (:func:`engine.data.importer.read_image`), make it ``image_size``
    square by ``geometry`` and RGB; a refused image rejects its pair in ``report``."""
    left, stored = limits.max_decoded_bytes, image_size * image_size * 3
    pixels, captions, labels = [], [], []
    for i, (m, caption, y) in enumerate(zip(src.images, src.captions, src.labels)):
        if progress is not None:
            progress(i, len(src.images))
        try:
            img, note, left = isolated(functools.partial(read_image, m, limits, fill, left, stored))
            fitted, action = isolated(functools.partial(fit_square, img, image_size, geometry, pad_fill))
        except Refused as r:
            r.record(report, m.name)
            continue
        report.geometry_counts[action] += 1
        if note is not None:
            report.converted.append((m.name, note))
        pixels.append(np.asarray(fitted.convert("RGB"), dtype=np.uint8))
        captions.append(caption)
        labels.append(y)
    if progress is not None:
        progress(len(src.images), len(src.images))
    arr = np.stack(pixels) if pixels else np.zeros((0, image_size, image_size, 3), np.uint8)
    return DecodedPairs(arr, captions, labels)


def build_paired(dec: DecodedPairs, info: DatasetInfo, val_fraction: float, seed: int) -> PairedDataset:
    """The dataset of decoded pairs: class names sorted, seeded split stratified by label (one row
    per pair), rows in the seeded :func:`import_order`; ``info``'s counts and classes are filled in."""
    class_names = tuple(sorted(set(dec.labels)))
    y = np.array([class_names.index(c) for c in dec.labels], dtype=np.int64)
    split = seeded_split(y, val_fraction, seed)
    order = import_order(len(y), seed)
    info = dataclasses.replace(info, class_names=class_names, n_train=int((split == 0).sum()),
                               n_val=int((split == 1).sum()))
    return PairedDataset.from_pairs(info, dec.pixels[order], [dec.captions[i] for i in order], y[order], split[order])


@permission("data.import", import_target, import_outcome)
def import_paired(
    path: Path,
    name: str | None,
    options: ImportOptions,
    *,
    workspace=None,
    overwrite: bool = False,
    source_label: str | None = None,
    image_size: int | None = None,
    fill: str = "white",
    geometry: str = "crop",
    pad_fill: str = "edge",
    progress: Callable[[int, int], None] | None = None,
    limits: ImportLimits | None = None,
) -> PairedImportReport:
    """Import a zip or folder of image-caption pairs (module docstring) and register it as ``name``.

    Args:
        path: a ``.zip`` or a folder.
        name: dataset name (default: from the file name, as image imports).
        options: the shared import options: ``file_column``, ``text_column``, ``label_column``
            (detected when None), ``val_fraction``, ``seed``, ``name_encoding``.
        image_size: side in pixels, default :data:`DEFAULT_IMAGE_SIZE`; geometry: ``crop``
            (default), ``stretch`` or ``pad``; pad_fill, fill: as image imports.
        progress: ``progress(done, total)`` per image.

    Returns:
        A :class:`PairedImportReport` naming every rejected pair.

    Raises:
        DatasetError: as :func:`open_pairs`; a bad name, size or geometry; no usable pair (naming the
            first reasons). Nothing is written then.
        PermissionDeniedError: the actor may not import (checked first).
    """
    label = source_label or str(path)
    if not path.exists():
        raise DatasetError(f"{label}: no such file or folder")
    name = check_new_name(name if name is not None else default_name(path), workspace, overwrite)
    size = DEFAULT_IMAGE_SIZE if image_size is None else image_size
    if not (isinstance(size, int) and MIN_SIDE <= size <= MAX_SIDE):
        raise DatasetError(f"image size must be a whole number of pixels from {MIN_SIDE} to {MAX_SIDE}, not {size!r}")
    if geometry not in GEOMETRIES:
        raise DatasetError(f"geometry {geometry!r} is not one of {', '.join(GEOMETRIES)}")
    limits = limits or ImportLimits.from_env()
    report = PairedImportReport(source=label)
    with open_pairs(path, label, options, limits) as src:
        report.names, report.roles, report.notes = src.names, src.roles, list(src.notes)
        report.rejected, report.skipped = list(src.rejected), list(src.skipped)
        dec = decode_pairs(src, report, limits, size, geometry, parse_pad_fill(pad_fill), fill_rgb(fill), progress)
    report.rejected.sort()
    report.skipped.sort()
    if not dec.captions:
        refused = first_refusals(report.rejected) or "no image with a caption"
        raise NothingImportedError(f"{label}: no usable image-caption pair; {refused}", report.rejected, report.skipped)
    info = DatasetInfo(name=name, modality="paired", source=f"upload:{path.name}", image_shape=(3, size, size),
                       class_names=(), n_train=0, n_val=0, created_at=storage.utc_now(),
                       description=f"Imported from {path.name}: {len(dec.captions)} image-caption pairs, "
                                   f"images {size}x{size} RGB ({GEOMETRIES[geometry]})."
                                   f"{lost_on_fill_text(report.converted)}")
    ds = build_paired(dec, info, options.val_fraction, options.seed)
    storage.save_dataset(ds, workspace, overwrite=overwrite)
    report.dataset = storage.read_info(storage.datasets_dir(workspace) / name)
    report.accepted = len(dec.captions)
    return report


def inspect_paired(path: Path, options: ImportOptions, label: str) -> dict:
    """What :func:`import_paired` would take, images not decoded: the fields of
    :class:`engine.data.ingest.SourcePlan` after ``source`` and ``modality``."""
    limits = ImportLimits.from_env()
    with open_pairs(path, label, options, limits) as src:
        counts = dict(Counter(src.labels))
        return dict(kind=src.kind, columns=src.columns, roles=src.roles, preview=src.preview(),
                    class_names=tuple(sorted(counts)), label_counts=counts, n_items=len(src.images),
                    rejected=list(src.rejected), skipped=list(src.skipped),
                    notes=src.notes + ["images are decoded on import; unreadable ones are rejected then"])


# --------------------------------------------------------------------------- bundled tuxpaint-stamps


def tuxpaint_dir() -> Path:
    """Folder of the Tux Paint stamps: ``$MASKLAB_TUXPAINT_DIR``, else the Debian package's."""
    return Path(os.environ.get(TUXPAINT_ENV) or TUXPAINT_DEFAULT_DIR)


def tuxpaint_available() -> bool:
    """True when the stamps folder exists (contents are checked when it is built)."""
    return tuxpaint_dir().is_dir()


def _tuxpaint_base(created_at: str) -> DatasetInfo:
    return DatasetInfo(name="tuxpaint-stamps", modality="paired", source="bundled:tuxpaint-stamps",
                       image_shape=(3, DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE), class_names=(), n_train=0, n_val=0,
                       created_at=created_at, description=TUXPAINT_DESCRIPTION)


def tuxpaint_info(created_at: str = "") -> DatasetInfo:
    """The info :func:`build_tuxpaint` gives, from the captions and file names alone (read once per
    process and folder state; assumes every PNG decodes, as the Debian package's do).

    Raises:
        DatasetError: the stamps are not installed.
    """
    if not tuxpaint_available():
        raise DatasetError(f"bundled dataset 'tuxpaint-stamps' is not available: {TUXPAINT_HOW_TO}")
    d = tuxpaint_dir()
    return dataclasses.replace(_tuxpaint_info(str(d), d.stat().st_mtime_ns), created_at=created_at)


@functools.lru_cache(maxsize=2)
def _tuxpaint_info(folder: str, mtime_ns: int) -> DatasetInfo:
    with open_pairs(Path(folder), folder, ImportOptions(), ImportLimits.from_env()) as src:
        dec = DecodedPairs(np.zeros((len(src.captions), 1, 1, 3), np.uint8), src.captions, src.labels)
    return build_paired(dec, _tuxpaint_base(""), TUXPAINT_VAL_FRACTION, TUXPAINT_SEED).info


def build_tuxpaint(created_at: str = "") -> PairedDataset:
    """The bundled ``tuxpaint-stamps`` dataset (module docstring), decoded in memory (about 10 s).

    Raises:
        DatasetError: the stamps are not installed, or no stamp has a PNG and a caption.
    """
    d = tuxpaint_dir()
    if not tuxpaint_available():
        raise DatasetError(f"bundled dataset 'tuxpaint-stamps' is not available: {TUXPAINT_HOW_TO}")
    limits = ImportLimits.from_env()
    report = PairedImportReport(source=str(d))
    with open_pairs(d, str(d), ImportOptions(), limits) as src:
        dec = decode_pairs(src, report, limits, DEFAULT_IMAGE_SIZE, DEFAULT_GEOMETRY, TUXPAINT_FILL, TUXPAINT_FILL)
    if not dec.captions:
        raise DatasetError(f"{d}: no stamp with a PNG and a caption; {TUXPAINT_HOW_TO}")
    return build_paired(dec, _tuxpaint_base(created_at), TUXPAINT_VAL_FRACTION, TUXPAINT_SEED)
