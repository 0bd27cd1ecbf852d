"""Import a folder or a .zip of images as a labelled dataset, with a per-file report.

Rules (see :func:`import_archive`):

- Zip members are read in memory, never extracted. Images: ``.png``, ``.jpg``, ``.jpeg`` (any case).
  Directories are ignored; hidden files, ``__MACOSX/`` entries and other extensions are *skipped*;
  image files that are empty, larger than 50 MB uncompressed, or that Pillow cannot decode (including
  decompression bombs) are *rejected* with the reason, and the good files are kept.
- Labels are first-level sub-folder names, after stripping one top folder common to every image
  (``zip -r stamps.zip stamps/`` makes one). Images not in a sub-folder get the class ``unlabeled``.
- Colour: if every image is grayscale (modes 1, L, LA, I, I;16, F) the dataset has 1 channel, else 3.
  Transparent images are composited over white. Each image is resized to ``image_size`` x
  ``image_size`` keeping its aspect ratio, padding the short side with white (``ImageOps.pad``, LANCZOS).
"""

from __future__ import annotations

import io
import os
import re
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from engine.data import bundled, storage
from engine.data.dataset import DatasetInfo, seeded_split, validate_name
from engine.errors import DatasetError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")
MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_MEMBERS = 200_000
UNLABELED = "unlabeled"
GRAY_MODES = {"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"}


@dataclass
class ImportReport:
    """What :func:`import_archive` did with every file.

    Attributes:
        source: the archive or folder path as given.
        dataset: the registered dataset's info.
        accepted: number of images in the dataset.
        rejected: ``(path inside the archive, reason)`` for image files that could not be used.
        skipped: ``(path, reason)`` for files that are not images (``__MACOSX/``, hidden, other extensions).
    """

    source: str
    dataset: DatasetInfo | None = None
    accepted: int = 0
    rejected: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        """Multi-line report: the dataset, every rejected file with its reason, skipped files by reason."""
        lines = [f"Import of {self.source}: {self.accepted} images accepted, "
                 f"{len(self.rejected)} rejected, {len(self.skipped)} skipped."]  # fmt: skip
        if self.dataset is not None:
            d = self.dataset
            c, h, w = d.image_shape
            lines.append(
                f"Dataset {d.name!r}: {d.n_train} train + {d.n_val} val images, {c}x{h}x{w}, "
                f"{len(d.class_names)} classes ({', '.join(d.class_names)})."
            )
        if self.rejected:
            lines.append("Rejected:")
            lines += [f"  {path}: {reason}" for path, reason in self.rejected]
        if self.skipped:
            lines.append("Skipped (not images):")
            lines += [f"  {n} x {reason}" for reason, n in Counter(r for _, r in self.skipped).most_common()]
        return "\n".join(lines)


def _skip_reason(rel: str) -> str | None:
    """Why a file is not an image candidate, or None if it has an image extension."""
    parts = PurePosixPath(rel).parts
    if parts and parts[0] == "__MACOSX":
        return "macOS metadata"
    if any(p.startswith(".") for p in parts):
        return "hidden file"
    ext = PurePosixPath(rel).suffix.lower()
    if ext not in IMAGE_EXTENSIONS:
        return f"not an image file ({ext or 'no extension'})"
    return None


def _entries(path: Path, label: str) -> Iterator[tuple[str, int | None, Callable[[], bytes]]]:
    """``(relative posix path, size in bytes or None if unknown, read())`` for every file of a folder or
    zip, sorted by path. Raises DatasetError for a file that is not a zip, or too many entries."""
    if path.is_dir():
        files = []
        for root, _dirs, names in os.walk(path):
            files += [Path(root) / n for n in names]
            if len(files) > MAX_MEMBERS:
                raise DatasetError(f"{label}: more than {MAX_MEMBERS} files; import a smaller folder")
        for f in sorted(files):
            try:
                size: int | None = f.stat().st_size
            except OSError:  # e.g. a broken symlink: read_bytes() will say why
                size = None
            yield f.relative_to(path).as_posix(), size, f.read_bytes
        return
    if not zipfile.is_zipfile(path):
        raise DatasetError(f"{label}: not a zip archive or a folder")
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise DatasetError(f"{label}: cannot open zip archive ({e})") from e
    with zf:
        members = zf.infolist()
        if len(members) > MAX_MEMBERS:
            raise DatasetError(f"{label}: {len(members)} entries, over the limit of {MAX_MEMBERS}")
        for info in sorted(members, key=lambda i: i.filename):
            if not info.is_dir():
                rel = info.filename.replace("\\", "/").lstrip("/")
                yield rel, info.file_size, lambda info=info: zf.read(info)


def _to_8bit_gray(im: Image.Image) -> Image.Image:
    """Mode ``L`` from any grayscale mode; 16-bit and 32-bit values are scaled, not clipped."""
    if im.mode in ("I", "F") or im.mode.startswith("I;16"):
        a = np.asarray(im, dtype=np.float64)
        peak = 65535.0 if im.mode.startswith("I;16") or a.max() > 255 else 255.0
        return Image.fromarray(np.clip(np.round(a * (255.0 / peak)), 0, 255).astype(np.uint8), "L")
    return im.convert("L")


def _decode(data: bytes, size: int) -> Image.Image:
    """Decode one image to mode ``L`` (grayscale source) or ``RGB``, transparent parts over white,
    EXIF rotation applied, padded to ``size`` x ``size``. Raises on bad data or decompression bombs."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        im = Image.open(io.BytesIO(data))
        im.load()
    im = ImageOps.exif_transpose(im)
    gray = im.mode in GRAY_MODES
    if im.mode in ("RGBA", "LA", "La", "PA", "RGBa") or "transparency" in im.info:
        im = Image.alpha_composite(Image.new("RGBA", im.size, "white"), im.convert("RGBA"))
    im = _to_8bit_gray(im) if gray else im.convert("RGB")
    return ImageOps.pad(im, (size, size), method=Image.Resampling.LANCZOS, color="white")


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
) -> ImportReport:
    """Import a ``.zip`` file or a folder of images and register it as dataset ``name``.

    See the module docstring for which files are used, how labels and colour are decided and how
    images are resized. The split is :func:`engine.data.dataset.seeded_split` (``val_fraction`` of
    each class to val, stratified when possible; the same seed gives the same split). The dataset is
    registered atomically: a failed import leaves no partial dataset and leaves an existing one intact.

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
    Returns:
        An :class:`ImportReport`; its ``dataset`` is the registered dataset's info (images stored as
        uint8 ``[N, image_size, image_size, C]``, C in {1, 3}).
    Raises:
        DatasetError: missing path, not a zip/folder, too many entries, invalid/reserved/existing name,
            bad ``image_size``/``val_fraction``, or no readable image (the message names the path and
            the first reasons).
    """
    src = Path(path).expanduser()
    label = source_label or str(path)
    if not src.exists():
        raise DatasetError(f"{label}: no such file or folder")
    name = validate_name(name if name is not None else _default_name(src))
    if name in bundled.BUNDLED:
        raise DatasetError(f"dataset name {name!r} is reserved for a bundled dataset; choose another name")
    if storage.is_registered(name, workspace) and not overwrite:
        raise DatasetError(f"dataset {name!r} already exists; choose another name or replace it"
                               f" (`data add --overwrite`, or tick 'Replace' on the Data page)")
    if not (isinstance(image_size, int) and 4 <= image_size <= 1024):
        raise DatasetError(f"image_size must be an integer in [4, 1024], not {image_size!r}")
    if not 0.0 <= val_fraction < 1.0:
        raise DatasetError(f"val_fraction must be in [0, 1), not {val_fraction}")

    report = ImportReport(source=label)
    paths: list[str] = []
    images: list[Image.Image] = []
    for rel, size, read in _entries(src, label):
        if (reason := _skip_reason(rel)) is not None:
            report.skipped.append((rel, reason))
        elif size == 0:
            report.rejected.append((rel, "empty file"))
        elif size is not None and size > MAX_FILE_BYTES:
            limit = MAX_FILE_BYTES // 2**20
            report.rejected.append((rel, f"too large: {size / 2**20:.0f} MB (limit {limit} MB)"))
        else:
            try:
                data = read()
            except Exception as e:  # noqa: BLE001 - a bad CRC, an unsupported compression, a broken link...
                report.rejected.append((rel, f"cannot read file: {e}"))
                continue
            try:
                images.append(_decode(data, image_size))
                paths.append(rel)
            except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
                report.rejected.append((rel, f"image too large: {e}"))
            except UnidentifiedImageError:
                report.rejected.append((rel, "not a PNG or JPEG image that Pillow can read"))
            except Exception as e:  # noqa: BLE001 - any decoder failure rejects this one file
                report.rejected.append((rel, f"cannot decode image: {e}"))
    if not images:
        if not report.rejected:
            raise DatasetError(f"{label}: no PNG or JPEG images found ({len(report.skipped)} other files skipped)")
        refused = "; ".join(f"{p}: {r}" for p, r in report.rejected[:3])
        raise DatasetError(f"{label}: no readable images; {len(report.rejected)} files refused: {refused}")

    channels = 1 if all(im.mode == "L" for im in images) else 3
    pixels = np.stack([np.asarray(im if channels == 1 else im.convert("RGB")) for im in images])
    pixels = pixels.reshape(len(images), image_size, image_size, channels)
    names, class_names = _labels(paths)
    labels = np.array([class_names.index(n) for n in names], dtype=np.int64)
    split = seeded_split(labels, val_fraction, seed)
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
        f"resized to {image_size}x{image_size} (padded with white).",
    )
    storage.write_dataset(info, pixels, labels, split, workspace, overwrite=overwrite)
    report.dataset, report.accepted = info, len(images)
    return report
