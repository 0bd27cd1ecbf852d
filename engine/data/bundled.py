"""Bundled datasets, available offline without an upload.

- ``digits``: scikit-learn's ``load_digits`` (1797 images 8x8, 1 channel, classes "0".."9"); pixel
  values 0..16 are mapped to 0..255 with ``round(v * 255 / 16)``; seeded stratified split
  (:func:`engine.data.dataset.seeded_split`), 10% val, seed 0.
- ``fashion-mnist``: the IDX gzip files of Debian's ``dataset-fashion-mnist`` package in
  ``/usr/share/datasets/fashion-mnist`` (or ``$MASKLAB_FASHION_MNIST_DIR``); 28x28, 1 channel, 10
  classes; the official split: train = the 60,000 training images, val = the 10,000 test (t10k) images.
- ``asterisk-prompts``: the voice prompts of Debian's ``asterisk-core-sounds-en-wav`` in
  ``/usr/share/asterisk/sounds/en_US_f_Allison`` (or ``$MASKLAB_ASTERISK_DIR``), audio at 8 kHz,
  label = folder, transcripts; built by :func:`engine.data.audio.build_asterisk` (rules there).
- ``tuxpaint-stamps``: image-caption pairs from Debian's ``tuxpaint-stamps-default`` in
  ``/usr/share/tuxpaint/stamps`` (or ``$MASKLAB_TUXPAINT_DIR``), 32x32 RGB, label = category folder;
  built by :func:`engine.data.paired.build_tuxpaint` (rules there).
- ``fortunes``: the fortune-cookie files of Debian's ``fortunes`` package (with ``fortunes-min``) in
  ``/usr/share/games/fortunes`` (or ``$MASKLAB_FORTUNES_DIR``): one document per fortune (entries are
  separated by lines holding a single ``%``), label = topic file name. Every topic file without an
  extension is read except ``ascii-art`` (pictures, not text); backspace overstrikes (``_\bx``, old
  terminal underlining) are removed; then the import's cleaning
  (:func:`engine.data.text.clean_texts`: whitespace normalised, empty and duplicate fortunes
  dropped); seeded stratified split, 10% val, seed 0.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.data import audio, paired
from engine.data.catalog import BUNDLED
from engine.data.dataset import Dataset, DatasetInfo, ImageDataset, TextDataset, n_val_for, seeded_split
from engine.data.idx import read_idx_file
from engine.data.tabular import decode_utf8
from engine.data.text import clean_texts, text_stats
from engine.errors import DatasetError
from engine.messages import describe_error

FASHION_ENV = "MASKLAB_FASHION_MNIST_DIR"
FASHION_DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "val": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
FASHION_HOW_TO = (
    "install the Debian package dataset-fashion-mnist (sudo apt-get install dataset-fashion-mnist), "
    f"which puts the IDX files in {FASHION_DEFAULT_DIR}; or set ${FASHION_ENV} to a folder holding "
    + ", ".join(f for pair in FASHION_FILES.values() for f in pair)
)
IDX_IMAGES_MAGIC, IDX_LABELS_MAGIC = 2051, 2049
DIGITS_CLASS_COUNTS = (178, 182, 177, 183, 181, 182, 181, 179, 174, 180)  # of load_digits(); N = 1797
DIGITS_VAL_FRACTION, DIGITS_SEED = 0.1, 0
FORTUNES_ENV = "MASKLAB_FORTUNES_DIR"
FORTUNES_DEFAULT_DIR = "/usr/share/games/fortunes"
FORTUNES_EXCLUDED = ("ascii-art",)
FORTUNES_VAL_FRACTION, FORTUNES_SEED = 0.1, 0
FORTUNES_HOW_TO = (
    "install the Debian package fortunes (sudo apt-get install fortunes), which puts the topic files "
    f"in {FORTUNES_DEFAULT_DIR}; or set ${FORTUNES_ENV} to a folder of fortune files (entries separated "
    "by lines holding a single %)"
)
_OVERSTRIKE = re.compile("[^\\x08]\\x08")
_FORTUNE_SEPARATOR = re.compile(r"^%\r?$", re.MULTILINE)

DESCRIPTIONS = {
    "digits": "Handwritten digits 0-9 from scikit-learn (UCI optdigits): 1797 grayscale images, 8x8 pixels.",
    "fashion-mnist": "Zalando Fashion-MNIST: 70,000 grayscale 28x28 images of clothing in 10 classes "
    "(train = 60,000 official training images, val = the 10,000 official test images).",
    "fortunes": "Fortune cookies from Debian's fortunes package: about 15,000 short quotations, jokes and "
    "aphorisms in 42 topics (label = topic, e.g. computers, food, science). Licence: BSD (The Regents of "
    "the University of California), see /usr/share/doc/fortunes/copyright; the texts are quoted from "
    "many authors.",
}
DESCRIPTIONS["asterisk-prompts"] = audio.ASTERISK_DESCRIPTION
DESCRIPTIONS["tuxpaint-stamps"] = paired.TUXPAINT_DESCRIPTION
assert tuple(DESCRIPTIONS) == BUNDLED, "engine.data.catalog.BUNDLED lists the bundled sets in listing order"


@dataclass(frozen=True)
class BundledStatus:
    """Whether a bundled dataset can be used on this machine, and how to get it if not."""

    name: str
    available: bool
    description: str
    how_to_get: str


def fashion_dir() -> Path:
    """Folder of the Fashion-MNIST IDX files: ``$MASKLAB_FASHION_MNIST_DIR``, else the Debian package's."""
    return Path(os.environ.get(FASHION_ENV) or FASHION_DEFAULT_DIR)


def _fashion_available() -> bool:
    d = fashion_dir()
    return all((d / f).is_file() for pair in FASHION_FILES.values() for f in pair)


def fortunes_dir() -> Path:
    """Folder of the fortune files: ``$MASKLAB_FORTUNES_DIR``, else the Debian package's."""
    return Path(os.environ.get(FORTUNES_ENV) or FORTUNES_DEFAULT_DIR)


def _fortune_files() -> list[Path]:
    """The topic files used (sorted by name): regular files without extension, not excluded."""
    d = fortunes_dir()
    if not d.is_dir():
        return []
    return sorted(
        p for p in d.iterdir()
        if not p.suffix and p.name not in FORTUNES_EXCLUDED and p.is_file() and not p.is_symlink()
    )  # fmt: skip


def bundled_status() -> list[BundledStatus]:
    """Status of every bundled dataset (checks files only; loads no data)."""
    return [
        BundledStatus("digits", True, DESCRIPTIONS["digits"], "part of scikit-learn; nothing to install"),
        BundledStatus("fashion-mnist", _fashion_available(), DESCRIPTIONS["fashion-mnist"], FASHION_HOW_TO),
        BundledStatus("fortunes", bool(_fortune_files()), DESCRIPTIONS["fortunes"], FORTUNES_HOW_TO),
        BundledStatus("asterisk-prompts", audio.asterisk_available(), DESCRIPTIONS["asterisk-prompts"],
                      audio.ASTERISK_HOW_TO),
        BundledStatus("tuxpaint-stamps", paired.tuxpaint_available(), DESCRIPTIONS["tuxpaint-stamps"],
                      paired.TUXPAINT_HOW_TO),
    ]


def is_available(name: str) -> bool:
    """True if bundled dataset ``name`` can be built here."""
    return (
        name == "digits"
        or (name == "fashion-mnist" and _fashion_available())
        or (name == "fortunes" and bool(_fortune_files()))
        or (name == "asterisk-prompts" and audio.asterisk_available())
        or (name == "tuxpaint-stamps" and paired.tuxpaint_available())
    )


def remove_overstrikes(text: str) -> str:
    """Text as a terminal shows it: each backspace erases the character before it, so both the
    ``_\bx`` form and the ``___\b\b\bword`` form of underlining leave only the letters."""
    while "\b" in text:
        erased = _OVERSTRIKE.sub("", text)
        if erased == text:  # backspaces with nothing before them
            return text.replace("\b", "")
        text = erased
    return text


def parse_fortunes(text: str) -> list[str]:
    """The entries of one fortune file's text (overstrikes removed; not yet cleaned)."""
    return _FORTUNE_SEPARATOR.split(remove_overstrikes(text))


@functools.lru_cache(maxsize=2)
def _fortunes(files: tuple[tuple[str, int, int], ...]) -> TextDataset:
    """Build the fortunes dataset from ``(path, size, mtime_ns)`` of its files (cached per file state)."""
    texts: list[str] = []
    topics: list[int] = []
    for k, (path, _, _) in enumerate(files):
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise DatasetError(f"{path}: cannot read fortune file ({describe_error(e)}); {FORTUNES_HOW_TO}") from e
        entries = parse_fortunes(decode_utf8(data, path))
        texts += entries
        topics += [k] * len(entries)
    kept, cleaned, counts = clean_texts(texts)
    names = [Path(p).name for p, _, _ in files]
    used = sorted({topics[i] for i in kept})
    remap = {k: j for j, k in enumerate(used)}
    labels = np.array([remap[topics[i]] for i in kept], dtype=np.int64)
    split = seeded_split(labels, FORTUNES_VAL_FRACTION, FORTUNES_SEED)
    info = DatasetInfo(
        name="fortunes",
        modality="text",
        source="bundled:fortunes",
        image_shape=None,
        class_names=tuple(names[k] for k in used),
        n_train=int((split == 0).sum()),
        n_val=int((split == 1).sum()),
        created_at="",
        description=DESCRIPTIONS["fortunes"],
        stats={**text_stats(cleaned), "cleaning": counts.as_dict()},
    )
    return TextDataset.from_texts(info, cleaned, labels, split)


def _build_fortunes() -> TextDataset:
    files = _fortune_files()
    if not files:
        raise DatasetError(f"bundled dataset 'fortunes' is not available: {FORTUNES_HOW_TO}")
    return _fortunes(tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))


def _read_idx(path: Path, magic: int, header_only: bool = False) -> np.ndarray | tuple[int, ...]:
    """Read a gzip IDX file (:mod:`engine.data.idx`): uint8 ``[N, H, W]`` (magic 2051) or ``[N]``
    (magic 2049); or just its dims. Raises DatasetError naming the file and how to get it."""
    try:
        header = read_idx_file(path, header_only=True)
        if header.magic != magic:
            kind = "images" if magic == IDX_IMAGES_MAGIC else "labels"
            raise DatasetError(f"{path}: not an IDX {kind} file (magic number {header.magic}, expected {magic})")
        return header.dims if header_only else read_idx_file(path)
    except DatasetError as e:
        raise DatasetError(f"{e}; {FASHION_HOW_TO}") from None


def bundled_info(name: str, created_at: str = "") -> DatasetInfo:
    """Metadata of a bundled dataset without loading its pixels (Fashion-MNIST: reads only the IDX
    headers; fortunes: parses the topic files once per process and file state, ~0.1 s).

    Raises DatasetError if ``name`` is not bundled or its files are missing/invalid.
    """
    if name == "digits":
        n_val = sum(n_val_for(n, DIGITS_VAL_FRACTION) for n in DIGITS_CLASS_COUNTS)
        shape, classes = (1, 8, 8), tuple(str(i) for i in range(10))
        n_train = sum(DIGITS_CLASS_COUNTS) - n_val
    elif name == "fashion-mnist":
        if not _fashion_available():
            raise DatasetError(f"bundled dataset 'fashion-mnist' is not available: {FASHION_HOW_TO}")
        d = fashion_dir()
        n_train, h, w = _read_idx(d / FASHION_FILES["train"][0], IDX_IMAGES_MAGIC, header_only=True)
        n_val = _read_idx(d / FASHION_FILES["val"][0], IDX_IMAGES_MAGIC, header_only=True)[0]
        shape, classes = (1, h, w), FASHION_CLASSES
    elif name == "fortunes":
        return dataclasses.replace(_build_fortunes().info, created_at=created_at)
    elif name == "asterisk-prompts":
        return audio.asterisk_info(created_at)
    elif name == "tuxpaint-stamps":
        return paired.tuxpaint_info(created_at)
    else:
        raise DatasetError(f"{name!r} is not a bundled dataset (bundled: {', '.join(BUNDLED)})")
    return DatasetInfo(
        name=name,
        modality="image",
        source=f"bundled:{name}",
        image_shape=shape,
        class_names=classes,
        n_train=int(n_train),
        n_val=int(n_val),
        created_at=created_at,
        description=DESCRIPTIONS[name],
    )


def build_bundled(name: str, created_at: str) -> Dataset:
    """Build a bundled dataset in memory (digits: ~0.1 s; fashion-mnist: ~1 s to decompress;
    fortunes: ~0.1 s).

    Returns an :class:`ImageDataset` with images uint8 ``[N, H, W, 1]``, or for ``fortunes`` a
    :class:`TextDataset`.
    Raises DatasetError if ``name`` is not bundled or its files are missing/invalid (naming the
    file; a fortune file that is not UTF-8 names the line).
    """
    if name == "fortunes":
        ds = _build_fortunes()
        return dataclasses.replace(ds, info=dataclasses.replace(ds.info, created_at=created_at))
    if name == "asterisk-prompts":
        return audio.build_asterisk(created_at)
    if name == "tuxpaint-stamps":
        return paired.build_tuxpaint(created_at)
    info = bundled_info(name, created_at)
    if name == "digits":
        from sklearn.datasets import load_digits  # noqa: PLC0415 (scikit-learn loads only when an evaluation or baseline runs)

        digits = load_digits()
        images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
        labels = digits.target.astype(np.int64)
        split = seeded_split(labels, DIGITS_VAL_FRACTION, DIGITS_SEED)
    else:
        d = fashion_dir()
        parts = []
        for s, (img_file, lbl_file) in enumerate(FASHION_FILES.values()):
            x = _read_idx(d / img_file, IDX_IMAGES_MAGIC)
            y = _read_idx(d / lbl_file, IDX_LABELS_MAGIC)
            if x.shape[0] != y.shape[0]:
                raise DatasetError(f"{d / img_file}: {len(x)} images but {d / lbl_file} has {len(y)} labels")
            if y.size and y.max() >= len(FASHION_CLASSES):
                raise DatasetError(f"{d / lbl_file}: label {y.max()} outside 0..{len(FASHION_CLASSES) - 1}")
            parts.append((x, y, np.full(y.shape[0], s, dtype=np.uint8)))
        images = np.concatenate([p[0] for p in parts])[..., None]
        labels = np.concatenate([p[1] for p in parts]).astype(np.int64)
        split = np.concatenate([p[2] for p in parts])
    return ImageDataset(info=info, images=images, labels=labels, split=split)
