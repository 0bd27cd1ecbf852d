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
- Geometry (:func:`engine.data.images.fit_square`): every image becomes ``image_size`` x
  ``image_size`` by the chosen ``geometry``: centre crop (default), stretch, or pad with ``pad_fill``
  (edge pixels, the mean colour, or a colour). Square images are only resized. ``image_size=None``
  (default) is the data's own size when every image has the same one (:func:`auto_size`). The
  report counts what was done (``geometry_counts``) and the sizes read.
- The dataset has 1 channel if every image is gray after the rules and the geometry (a pad colour
  that is not gray makes a padded image colour), else 3.
- Rows are stored in a seeded shuffled order (:func:`engine.data.sampling.import_order`), each with
  its split.
"""

from __future__ import annotations

import functools
import io
import os
import re
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image, ImageColor

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
)
from engine.data.catalog import check_new_name
from engine.data.dataset import DatasetInfo, classes_text, counted, seeded_split
from engine.data.images import (
    EXTENSIONS,
    GEOMETRIES,
    PAD_FILLS,
    PadFill,
    Refused,
    check_format,
    decode,
    fit_square,
    isolated,
    lost_on_fill_text,
    open_header,
    sniff,
)
from engine.data.limits import ImportLimits, budget_reason
from engine.data.sampling import import_order
from engine.errors import DatasetError, NothingImportedError

UNLABELED = "unlabeled"
Fill = str | tuple[int, int, int]
MIN_SIDE, MAX_SIDE = 4, 1024
"""Allowed output side in pixels."""
AUTO_MIXED_SIDE = 64
"""Side chosen by :func:`auto_size` when the images have different sizes."""
HEADER_PEEK = 64 * 1024
"""Bytes read of each member to find its size for :func:`auto_size` (more only when the header lies further)."""


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
        fill: the RGB fill colour transparency was composited over.
        geometry: ``"crop"``, ``"stretch"`` or ``"pad"``; ``pad_fill``: ``"edge"``, ``"mean"`` or RGB.
        image_size: the output side in pixels; ``size_rule``: how it was chosen ("" when given).
        source_sizes: ``"WxH" -> images`` as decoded (after EXIF orientation).
        geometry_counts: images per action of :func:`engine.data.images.fit_square`: ``kept``,
            ``resized``, ``cropped``, ``stretched``, ``padded``.
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
    geometry: str = "crop"
    pad_fill: PadFill = "edge"
    image_size: int = 0
    size_rule: str = ""
    source_sizes: Counter = field(default_factory=Counter)
    geometry_counts: Counter = field(default_factory=Counter)

    def geometry_line(self) -> str:
        """What was done to the images' size and shape, with counts, e.g. ``centre crop to 28x28
        (auto: every image is 28x28): 950 kept as they are, 50 cropped``."""
        how = GEOMETRIES.get(self.geometry, self.geometry)
        if self.geometry == "pad":
            fill = self.pad_fill if isinstance(self.pad_fill, str) else "#{:02x}{:02x}{:02x}".format(*self.pad_fill)
            how += f" (fill: {fill})"
        rule = f" ({self.size_rule})" if self.size_rule else ""
        words = {"kept": "kept as they are", "resized": "resized (square already)", "cropped": "centre-cropped",
                 "stretched": "stretched", "padded": "padded"}
        counts = ", ".join(f"{n} {words.get(a, a)}" for a, n in self.geometry_counts.most_common())
        return f"{how} to {self.image_size}x{self.image_size}{rule}: {counts or 'no image'}"

    def summary(self) -> str:
        """Multi-line report: the dataset, how names were decoded, conversions by kind, every rejected
        file with its reason, skipped files by reason."""
        lines = [f"Import of {self.source}: {counted(self.accepted, 'image')} accepted, "
                 f"{len(self.rejected)} rejected, {len(self.skipped)} skipped."]  # fmt: skip
        if self.dataset is not None:
            d = self.dataset
            c, h, w = d.image_shape
            lines.append(
                f"Dataset {d.name!r}: {d.n_train} train + {d.n_val} val images, {c}x{h}x{w}, "
                f"{classes_text(len(d.class_names))} ({', '.join(d.class_names)})."
            )
        if self.image_size:
            sizes = ", ".join(f"{k} ({n})" for k, n in self.source_sizes.most_common(5))
            more = f" and {len(self.source_sizes) - 5} more sizes" if len(self.source_sizes) > 5 else ""
            lines.append(f"Geometry: {self.geometry_line()}. Sizes read: {sizes}{more}.")
        if self.names is not None and (self.names.how != "ascii" or self.names.backslashed):
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
    labels, class_names = class_labels(paths)
    return ArchiveScan(label, names, paths, class_names, dict(Counter(labels)), sorted(rejected), sorted(skipped))


def fill_rgb(fill: Fill) -> tuple[int, int, int]:
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


def class_labels(paths: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """Class name per path (first sub-folder after stripping one common top folder) and sorted class names."""
    parts = [PurePosixPath(p).parts for p in paths]
    if all(len(p) > 1 for p in parts) and len({p[0] for p in parts}) == 1:
        parts = [p[1:] for p in parts]
    names = [p[0] if len(p) > 1 else UNLABELED for p in parts]
    return names, tuple(sorted(set(names)))


def default_name(path: Path) -> str:
    """A dataset name from a source's file or folder name (``My Set.zip`` -> ``my-set``).

    Raises:
        DatasetError: nothing usable is left of the name.
    """
    stem = path.name if path.is_dir() else path.stem
    name = re.sub(r"[^a-z0-9_-]", "-", stem.lower()).lstrip("-_")[:64]
    if not name:
        raise DatasetError(f"{path.name}: cannot make a dataset name from {stem!r}; pass name=...")
    return name


def parse_pad_fill(pad_fill: PadFill | str) -> PadFill:
    """``"edge"``, ``"mean"``, or the RGB of a colour (a name, ``#rrggbb`` or a tuple)."""
    if isinstance(pad_fill, str) and pad_fill.strip().lower() in PAD_FILLS:
        return pad_fill.strip().lower()
    try:
        return fill_rgb(pad_fill)
    except DatasetError:
        raise DatasetError(f"pad fill {pad_fill!r} is not 'edge', 'mean' or a colour (a name such as "
                           "'black', or #rrggbb)") from None


def _header_size(m: Member) -> tuple[int, int] | None:
    """``(width, height)`` from the member's header (its first :data:`HEADER_PEEK` bytes, or all of
    it when the header lies further, e.g. a TIFF directory at the end); None when unreadable (the
    import pass then refuses it with the reason)."""
    for read in ((lambda: m.head(HEADER_PEEK)) if m.head else None, m.read):
        if read is None:
            continue
        try:
            data = read()
            fmt = sniff(data)
            if fmt is None:
                return None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return Image.open(io.BytesIO(data), formats=[fmt]).size
        except Exception:  # noqa: BLE001 - a header cut by the peek, a damaged member: try the whole, then give up
            continue
    return None


def _fitted(img: Image.Image, size: int, geometry: str, pad: PadFill, report: ImportReport) -> Image.Image:
    """``img`` made ``size`` square by ``geometry`` (:func:`fit_square`), counted in ``report``."""
    report.source_sizes[f"{img.size[0]}x{img.size[1]}"] += 1
    fitted, action = fit_square(img, size, geometry, pad)
    report.geometry_counts[action] += 1
    return fitted


def auto_size(sizes: Counter) -> tuple[int, str]:
    """The side :func:`import_archive` uses when ``image_size`` is None, and why (for the report).

    Every image of one size ``W x H``: its shorter side (the data's own size: MNIST's 28x28 stays
    28x28, no resampling; 640x480 photos become 480x480). Sizes that differ: :data:`AUTO_MIXED_SIDE`
    (a size a CPU run can train). Clamped to the allowed [4, 1024].

    Args:
        sizes: ``(width, height) -> images``.
    """
    if len(sizes) == 1:
        (w, h), n = next(iter(sizes.items()))
        side = min(max(min(w, h), MIN_SIDE), MAX_SIDE)
        return side, f"auto: every image is {w}x{h}"
    if not sizes:
        return AUTO_MIXED_SIDE, "auto"
    (w0, h0), _ = sizes.most_common(1)[0]
    return AUTO_MIXED_SIDE, (f"auto: sizes differ ({len(sizes)} sizes, most often {w0}x{h0}); "
                             f"choose the size to keep more detail")




def read_image(m: Member, limits: ImportLimits, rgb: tuple[int, int, int], left: int,
               stored: int) -> tuple[Image.Image, str | None, int]:
    """Read and decode one image member under the import's byte budget (the rules of the module
    docstring; shared by image and paired imports).

    Args:
        m: the member; limits: the import's bounds; rgb: the colour transparency goes over.
        left: bytes of the import's budget (inflated + decoded) still free.
        stored: bytes the kept, resized copy will take.

    Returns:
        ``(image, conversion note or None, bytes left after this image)``; the image is 8-bit
        ``L`` or ``RGB`` at its own size.

    Raises:
        Refused: with the reason (and the library's message as ``detail``): over the budget or a
            limit, unreadable, of no accepted format or another than its name says, undecodable.
    """
    if m.size is not None and m.size + stored > left:
        raise Refused(budget_reason(m.size + stored, left, limits))
    try:
        data = m.read()
    except Exception as e:  # noqa: BLE001 - a bad CRC, an unsupported method, a broken link...
        raise Refused(read_problem(e), str(e)) from None
    left -= len(data) + stored
    im, need = open_header(data, check_format(m.name, data), limits, left)
    img, note = decode(im, data, rgb)
    return img, note, left - need


@permission("data.import", import_target, import_outcome)
def import_archive(
    path: str | os.PathLike[str],
    name: str | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    image_size: int | None = None,
    geometry: str = "crop",
    pad_fill: PadFill | str = "edge",
    val_fraction: float = 0.1,
    seed: int = 0,
    overwrite: bool = False,
    source_label: str | None = None,
    fill: Fill = "white",
    name_encoding: str | None = None,
    limits: ImportLimits | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import a ``.zip`` file or a folder of images and register it as dataset ``name``.

    See the module docstring for which files are used, how names, pixels, labels and colour are
    decided and how images are made square (:func:`engine.data.images.fit_square`). The split is
    :func:`engine.data.dataset.seeded_split` (``val_fraction`` of each class to val, stratified when
    possible; the same seed gives the same split), decided in path order; the rows are then stored in
    the seeded order of :func:`engine.data.sampling.import_order`. The dataset is registered
    atomically: a failed import leaves no partial dataset and leaves an existing one intact.

    Args:
        path: a ``.zip`` file or a folder.
        name: dataset name; default: the archive/folder name without extension, lower-cased, other
            characters than ``a-z0-9_-`` replaced by ``-``.
        workspace: workspace folder (default ``$MASKLAB_WORKSPACE`` or ``./workspace``).
        image_size: output height and width in pixels, in [4, 1024]; None: :func:`auto_size` (the
            data's own size when every image has it).
        geometry: ``"crop"`` (centre crop, the default), ``"stretch"`` or ``"pad"``: how an image
            that is not square becomes square.
        pad_fill: for ``"pad"``: ``"edge"`` (default), ``"mean"``, or a colour (name, ``#rrggbb``, RGB tuple).
        val_fraction: fraction of images put in the val split, in [0, 1).
        seed: split and storage-order seed.
        overwrite: replace an existing dataset of that name (only once the import succeeded).
        source_label: how reports and errors name the archive (default: ``path``); the dashboard
            passes the uploaded file's name, not the temporary copy's path.
        fill: colour that transparency is composited over: a Pillow colour string (``"white"``,
            ``"#808080"``) or an RGB tuple.
        name_encoding: encoding of the member names the archive does not mark as UTF-8 (e.g.
            ``"cp932"``); default: detected (see :mod:`engine.data.archive`).
        limits: bounds of this import; default :meth:`ImportLimits.from_env`.
        progress: called as ``progress(done, total)`` after each image file is read (a background
            import reports it; see :mod:`engine.data.jobs`).
    Returns:
        An :class:`ImportReport`; its ``dataset`` is the registered dataset's info (images stored as
        uint8 ``[N, S, S, C]``, ``S`` the side used, C in {1, 3}); ``geometry_counts`` says what was
        done to how many images.
    Raises:
        DatasetError: missing path, not a zip/folder, too many entries, invalid/reserved/existing name,
            bad ``image_size``/``geometry``/``pad_fill``/``val_fraction``/``fill``/``name_encoding`` or
            limits, or no usable image (the message names the path and the first reasons).
    """
    src, label = _source(path, source_label)
    name = check_new_name(name if name is not None else default_name(src), workspace, overwrite)
    if image_size is not None and not (isinstance(image_size, int) and MIN_SIDE <= image_size <= MAX_SIDE):
        raise DatasetError(f"image size must be a whole number of pixels from {MIN_SIDE} to {MAX_SIDE}, "
                           f"not {image_size!r}")
    if geometry not in GEOMETRIES:
        raise DatasetError(f"geometry {geometry!r} is not one of {', '.join(GEOMETRIES)} "
                           "(centre crop, stretch, or pad)")
    if not 0.0 <= val_fraction < 1.0:
        raise DatasetError(f"val_fraction must be in [0, 1), not {val_fraction}")
    rgb = fill_rgb(fill)
    pad = parse_pad_fill(pad_fill)
    limits = limits or ImportLimits.from_env()

    report = ImportReport(source=label, fill=rgb, geometry=geometry, pad_fill=pad)
    paths: list[str] = []
    left = limits.max_decoded_bytes
    with Members(src, label, limits) as ms:
        report.names = decode_names(ms.members, name_encoding)
        candidates, report.rejected, report.skipped = _classify(ms.members, limits)
        auto = image_size is None
        if auto:  # the budget's estimate, from the headers; the size itself comes from the accepted images
            sizes = Counter(s for s in map(_header_size, candidates)
                            if s is not None and s[0] * s[1] <= limits.max_image_pixels)
            estimate = auto_size(sizes)[0]
        stored = (estimate if auto else image_size) ** 2 * 3  # the resized copy each image keeps
        decoded: list[tuple[Image.Image, str | None]] = []
        for i, m in enumerate(candidates):
            if progress is not None:
                progress(i, len(candidates))
            try:
                img, note, left = isolated(functools.partial(read_image, m, limits, rgb, left, stored))
                if not auto:  # resized now: the full-size image is not kept
                    img = isolated(functools.partial(_fitted, img, image_size, geometry, pad, report))
            except Refused as r:
                r.record(report, m.name)
                continue
            decoded.append((img, note))
            paths.append(m.name)
            if note is not None:
                report.converted.append((m.name, note))
        if auto:  # chosen from the images that were accepted: a refused one has no say
            image_size, report.size_rule = auto_size(Counter(img.size for img, _ in decoded))
            fitted, kept = [], []
            for (img, note), p in zip(decoded, paths):
                try:
                    fitted.append((isolated(functools.partial(_fitted, img, image_size, geometry, pad, report)), note))
                    kept.append(p)
                except Refused as r:
                    r.record(report, p)
            decoded, paths, keep = fitted, kept, set(kept)
            report.converted = [(p, n) for p, n in report.converted if p in keep]
        report.image_size = image_size
        images = [img for img, _ in decoded]
        if progress is not None:
            progress(len(candidates), len(candidates))
    report.rejected.sort()
    report.skipped.sort()
    if not images:
        if not report.rejected:
            raise DatasetError(f"{label}: no image files found ({len(report.skipped)} other files skipped)")
        refused = first_refusals(report.rejected)
        raise NothingImportedError(f"{label}: no readable images; {counted(len(report.rejected), 'file')} refused: "
                                   f"{refused}", report.rejected, report.skipped)

    channels = 1 if all(im.mode == "L" for im in images) else 3
    mode = "L" if channels == 1 else "RGB"
    pixels = np.stack([np.asarray(im.convert(mode)) for im in images]).reshape(
        len(images), image_size, image_size, channels)  # fmt: skip
    names, class_names = class_labels(paths)
    labels = np.array([class_names.index(n) for n in names], dtype=np.int64)
    split = seeded_split(labels, val_fraction, seed)
    order = import_order(len(labels), seed)  # stored shuffled: a class-ordered zip gives no class-ordered slice
    pixels, labels, split = pixels[order], labels[order], split[order]
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
        description=f"Imported from {src.name}: {counted(len(images), 'image')} in {classes_text(len(class_names))}; "
        f"{report.geometry_line()} (transparency over {fill_text}).{lost_on_fill_text(report.converted)}",
    )
    storage.write_dataset(info, pixels, labels, split, workspace, overwrite=overwrite)
    report.dataset, report.accepted = info, len(images)
    return report
