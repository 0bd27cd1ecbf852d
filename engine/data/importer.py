"""Import a folder or a .zip of images as a labelled dataset, with a per-file report.

Rules (see :func:`import_archive`; the details live in the modules named):

- Members are read in memory, never extracted; their names are decoded and checked by
  :mod:`engine.data.archive` (UTF-8 flag, Unicode Path field, UTF-8, detected or chosen encoding;
  absolute and ``..`` names are refused as leaving the archive).
- Directories are ignored; hidden files, ``__MACOSX/`` entries and files whose extension is not an
  image extension (``.png .jpg .jpeg .jpe .jfif .webp .bmp .dib .tif .tiff .gif``) are *skipped*
  unread, even if their content is an image. Image files are *rejected* with a reason when the zip
  directory already shows a problem (empty, encrypted, a link, too large, compressed beyond the
  ratio limit), when their content is of no accepted format or another format than their name says,
  when their header declares more pixels or bytes than the limits (:mod:`engine.data.limits`),
  or when they cannot be decoded. The good files are kept.
- Pixels follow the decoding rules of :mod:`engine.data.images` (every Pillow mode to 8-bit gray or
  RGB; transparency over the ``fill`` colour, white by default).
- Labels are first-level sub-folder names, after stripping one top folder common to every image
  (``zip -r stamps.zip stamps/`` makes one). Images not in a sub-folder get the class ``unlabeled``.
- The dataset has 1 channel if every image is gray after the rules (and the fill is gray or no image
  needed padding), else 3. Each image is resized to ``image_size`` x ``image_size`` keeping its aspect
  ratio, padding the short side with the fill colour (``ImageOps.contain`` then ``ImageOps.pad``, LANCZOS).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image, ImageColor, ImageOps

from engine.data import bundled, storage
from engine.data.archive import Member, Members, NameDecoding, decode_names, read_problem
from engine.data.archive import classify, refusal_lines, skip_reason
from engine.data.dataset import DatasetInfo, seeded_split, validate_name
from engine.data.images import EXTENSIONS, Refused, check_format, decode, open_header
from engine.data.limits import ImportLimits, budget_reason
from engine.errors import DatasetError

UNLABELED = "unlabeled"
Fill = str | tuple[int, int, int]


@dataclass
class ImportReport:
    """What :func:`import_archive` did with every file.

    Attributes:
        source: the archive or folder path as given.
        dataset: the registered dataset's info.
        accepted: number of images in the dataset.
        rejected: ``(path inside the archive, reason)`` for image files that could not be used, by path.
        skipped: ``(path, reason)`` for files that are not images (``__MACOSX/``, hidden, other extensions).
        names: how the member names were decoded (encoding, detected / ambiguous / chosen).
        converted: ``(path, note)`` for images converted by a rule worth knowing (32-bit pixels scaled
            from their own range, CMYK with or without its ICC profile, 16-bit colour TIFF).
        details: the decoding library's own message for a rejected path, where there is one.
        fill: the RGB fill colour transparency and padding were composited over.
    """

    source: str
    dataset: DatasetInfo | None = None
    accepted: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    names: NameDecoding | None = None
    converted: list[tuple[str, str]] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)
    fill: tuple[int, int, int] = (255, 255, 255)

    def summary(self) -> str:
        """Multi-line report: the dataset, how names were decoded, conversions by kind, every rejected
        file with its reason, skipped files by reason."""
        lines = [f"Import of {self.source}: {self.accepted} images accepted, "
                 f"{len(self.rejected)} rejected, {len(self.skipped)} skipped."]  # fmt: skip
        if self.dataset is not None:
            d = self.dataset
            c, h, w = d.image_shape
            lines.append(
                f"Dataset {d.name!r}: {d.n_train} train + {d.n_val} val images, {c}x{h}x{w}, "
                f"{len(d.class_names)} classes ({', '.join(d.class_names)})."
            )
        if self.names is not None and self.names.how != "ascii":
            lines.append(("Warning: " if self.names.ambiguous else "") + self.names.describe() + ".")
        if self.converted:
            lines.append("Converted:")
            lines += [f"  {n} x {note}" for note, n in Counter(n for _, n in self.converted).most_common()]
        return "\n".join(lines + refusal_lines(self.rejected, self.skipped, "Skipped (not images)"))


@dataclass
class ArchiveScan:
    """What an archive holds, from its directory alone (no image is read): what the Data page shows
    before the import is confirmed.

    Attributes:
        source: the archive or folder as reports name it.
        names: how the member names were decoded.
        images: paths of the image files that the import will decode, sorted.
        class_names: the classes those paths give (sorted); ``class_counts`` images per class.
        rejected, skipped: as in :class:`ImportReport`, for what the directory already shows.
    """

    source: str
    names: NameDecoding
    images: list[str]
    class_names: tuple[str, ...]
    class_counts: dict[str, int]
    rejected: list[tuple[str, str]]
    skipped: list[tuple[str, str]]


def _skip_reason(rel: str) -> str | None:
    """Why a file is not an image candidate, or None if it has an image extension."""
    return skip_reason(rel, EXTENSIONS, "an image file")


def _classify(members: list[Member], limits: ImportLimits) -> tuple[list[Member], list, list]:
    """:func:`engine.data.archive.classify` with the image extensions (:func:`_skip_reason`)."""
    return classify(members, limits, _skip_reason)


def _source(path: str | os.PathLike[str], source_label: str | None) -> tuple[Path, str]:
    src, label = Path(path).expanduser(), source_label or str(path)
    if not src.exists():
        raise DatasetError(f"{label}: no such file or folder")
    return src, label


def scan_archive(
    path: str | os.PathLike[str],
    *,
    name_encoding: str | None = None,
    limits: ImportLimits | None = None,
    source_label: str | None = None,
) -> ArchiveScan:
    """Read an archive's directory (or a folder's listing) and say what :func:`import_archive` would
    take, without reading any member: decoded names, class names and counts, refusals already known.

    Args: as :func:`import_archive`.
    Raises:
        DatasetError: missing path, not a zip/folder, too many entries, a bad ``name_encoding``.
    """
    src, label = _source(path, source_label)
    with Members(src, label, limits or ImportLimits.from_env()) as ms:
        names = decode_names(ms.members, name_encoding)
        candidates, rejected, skipped = _classify(ms.members, ms.limits)
    paths = [m.name for m in candidates]
    labels, class_names = _labels(paths)
    return ArchiveScan(label, names, paths, class_names, dict(Counter(labels)), sorted(rejected), sorted(skipped))


def _fill_rgb(fill: Fill) -> tuple[int, int, int]:
    """RGB of a fill colour given as a Pillow colour string (``"white"``, ``"#808080"``) or a tuple."""
    try:
        rgb = ImageColor.getrgb(fill) if isinstance(fill, str) else tuple(fill)
    except (ValueError, TypeError):
        raise DatasetError(f"fill colour {fill!r} is not a colour; use a name or #rrggbb") from None
    if len(rgb) == 4 and rgb[3] == 255:
        rgb = rgb[:3]
    if len(rgb) != 3 or not all(isinstance(v, int) and 0 <= v <= 255 for v in rgb):
        raise DatasetError(f"fill colour {fill!r} must be an opaque RGB colour, e.g. 'white' or (0, 0, 0)")
    return rgb  # type: ignore[return-value]


def _labels(paths: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """Class name per path (first sub-folder after stripping one common top folder) and sorted class names."""
    parts = [PurePosixPath(p).parts for p in paths]
    if all(len(p) > 1 for p in parts) and len({p[0] for p in parts}) == 1:
        parts = [p[1:] for p in parts]
    names = [p[0] if len(p) > 1 else UNLABELED for p in parts]
    return names, tuple(sorted(set(names)))


def _default_name(path: Path) -> str:
    stem = path.name if path.is_dir() else path.stem
    name = re.sub(r"[^a-z0-9_-]", "-", stem.lower()).lstrip("-_")[:64]
    if not name:
        raise DatasetError(f"{path.name}: cannot make a dataset name from {stem!r}; pass name=...")
    return name


def import_archive(
    path: str | os.PathLike[str],
    name: str | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    image_size: int = 32,
    val_fraction: float = 0.1,
    seed: int = 0,
    overwrite: bool = False,
    source_label: str | None = None,
    fill: Fill = "white",
    name_encoding: str | None = None,
    limits: ImportLimits | None = None,
) -> ImportReport:
    """Import a ``.zip`` file or a folder of images and register it as dataset ``name``.

    See the module docstring for which files are used, how names, pixels, labels and colour are
    decided and how images are resized. The split is :func:`engine.data.dataset.seeded_split`
    (``val_fraction`` of each class to val, stratified when possible; the same seed gives the same
    split). The dataset is registered atomically: a failed import leaves no partial dataset and leaves
    an existing one intact.

    Args:
        path: a ``.zip`` file or a folder.
        name: dataset name; default: the archive/folder name without extension, lower-cased, other
            characters than ``a-z0-9_-`` replaced by ``-``.
        workspace: workspace folder (default ``$MASKLAB_WORKSPACE`` or ``./workspace``).
        image_size: output height and width in pixels.
        val_fraction: fraction of images put in the val split, in [0, 1).
        seed: split seed.
        overwrite: replace an existing dataset of that name (only once the import succeeded).
        source_label: how reports and errors name the archive (default: ``path``); the dashboard
            passes the uploaded file's name, not the temporary copy's path.
        fill: colour that transparency is composited over and the padding is filled with: a Pillow
            colour string (``"white"``, ``"#808080"``) or an RGB tuple.
        name_encoding: encoding of the member names the archive does not mark as UTF-8 (e.g.
            ``"cp932"``); default: detected (see :mod:`engine.data.archive`).
        limits: bounds of this import; default :meth:`ImportLimits.from_env`.
    Returns:
        An :class:`ImportReport`; its ``dataset`` is the registered dataset's info (images stored as
        uint8 ``[N, image_size, image_size, C]``, C in {1, 3}).
    Raises:
        DatasetError: missing path, not a zip/folder, too many entries, invalid/reserved/existing name,
            bad ``image_size``/``val_fraction``/``fill``/``name_encoding`` or limits, or no usable image
            (the message names the path and the first reasons).
    """
    src, label = _source(path, source_label)
    name = validate_name(name if name is not None else _default_name(src))
    if name in bundled.BUNDLED:
        raise DatasetError(f"dataset name {name!r} is reserved for a bundled dataset; choose another name")
    if storage.is_registered(name, workspace) and not overwrite:
        raise DatasetError(f"dataset {name!r} already exists; choose another name or replace it"
                           f" (`data add --overwrite`, or tick 'Replace' on the Data page)")  # fmt: skip
    if not (isinstance(image_size, int) and 4 <= image_size <= 1024):
        raise DatasetError(f"image_size must be an integer in [4, 1024], not {image_size!r}")
    if not 0.0 <= val_fraction < 1.0:
        raise DatasetError(f"val_fraction must be in [0, 1), not {val_fraction}")
    rgb = _fill_rgb(fill)
    limits = limits or ImportLimits.from_env()

    report = ImportReport(source=label, fill=rgb)
    paths: list[str] = []
    images: list[Image.Image] = []
    left = limits.max_decoded_bytes
    stored = image_size * image_size * 3  # the resized copy each image keeps
    with Members(src, label, limits) as ms:
        report.names = decode_names(ms.members, name_encoding)
        candidates, report.rejected, report.skipped = _classify(ms.members, limits)
        for m in candidates:
            try:
                if m.size is not None and m.size + stored > left:
                    raise Refused(budget_reason(m.size + stored, left, limits))
                try:
                    data = m.read()
                except Exception as e:  # noqa: BLE001 - a bad CRC, an unsupported method, a broken link...
                    raise Refused(read_problem(e), str(e)) from None
                left -= len(data) + stored
                im, need = open_header(data, check_format(m.name, data), limits, left)
                img, note = decode(im, data, rgb)
                left -= need
            except Refused as r:
                report.rejected.append((m.name, r.reason))
                if r.detail:
                    report.details[m.name] = r.detail
                continue
            images.append(ImageOps.contain(img, (image_size, image_size), method=Image.Resampling.LANCZOS))
            paths.append(m.name)
            if note is not None:
                report.converted.append((m.name, note))
    report.rejected.sort()
    report.skipped.sort()
    if not images:
        if not report.rejected:
            raise DatasetError(f"{label}: no image files found ({len(report.skipped)} other files skipped)")
        refused = "; ".join(f"{p}: {r}" for p, r in report.rejected[:3])
        raise DatasetError(f"{label}: no readable images; {len(report.rejected)} files refused: {refused}")

    padded = any(im.size != (image_size, image_size) for im in images)
    gray_fill = rgb[0] == rgb[1] == rgb[2]
    channels = 1 if all(im.mode == "L" for im in images) and (gray_fill or not padded) else 3
    mode, color = ("L", rgb[0]) if channels == 1 else ("RGB", rgb)
    pixels = np.stack([
        np.asarray(ImageOps.pad(im.convert(mode), (image_size, image_size), color=color)) for im in images
    ]).reshape(len(images), image_size, image_size, channels)  # fmt: skip
    names, class_names = _labels(paths)
    labels = np.array([class_names.index(n) for n in names], dtype=np.int64)
    split = seeded_split(labels, val_fraction, seed)
    fill_text = "white" if rgb == (255, 255, 255) else "#{:02x}{:02x}{:02x}".format(*rgb)
    info = DatasetInfo(
        name=name,
        modality="image",
        source=f"upload:{src.name}",
        image_shape=(channels, image_size, image_size),
        class_names=class_names,
        n_train=int((split == 0).sum()),
        n_val=int((split == 1).sum()),
        created_at=storage.utc_now(),
        description=f"Imported from {src.name}: {len(images)} images in {len(class_names)} classes, "
        f"resized to {image_size}x{image_size} (transparency and padding over {fill_text}).",
    )
    storage.write_dataset(info, pixels, labels, split, workspace, overwrite=overwrite)
    report.dataset, report.accepted = info, len(images)
    return report
