"""IDX files (the MNIST format): reading them, and importing an image/label pair as a dataset.

Format (LeCun et al. 1998, http://yann.lecun.com/exdb/mnist/): a big-endian header of two zero
bytes, a type code, the number of dimensions ``n``, then ``n`` uint32 sizes, then the values in
row-major order. Type codes: ``0x08`` unsigned byte, ``0x09`` signed byte, ``0x0B`` int16, ``0x0C``
int32, ``0x0D`` float32, ``0x0E`` float64 (:data:`IDX_TYPES`). MNIST's images are ``0x08`` with 3
dimensions (magic number 2051), its labels ``0x08`` with 1 (2049). Files may be gzip-compressed.

Import (:func:`import_idx`, dispatched by :mod:`engine.data.ingest` for a zip or folder that holds
IDX files): image files are those named ``*idx3-ubyte`` (``[N, H, W]``, grey) or ``*idx4-ubyte``
(``[N, H, W, C]``, C in {1, 3}), labels ``*idx1-ubyte``, each optionally ``.gz``, with ``-``, ``.``
or ``_`` before ``idx`` and ``ubyte``. An image file is paired with the labels file of the same
name with ``images``/``idx3``/``idx4`` read as ``labels``/``idx1`` (``train-images-idx3-ubyte.gz``
with ``train-labels-idx1-ubyte.gz``); a single image file and a single labels file pair whatever
their names. Rules:

- Images must be type ``0x08`` (8-bit pixels, stored as they are: 0 = background for MNIST); other
  image types are refused (their value range is not defined by the format). Labels may be any
  integer type; class ``k`` is named ``str(value)``, classes sorted by value.
- Images keep their stored size (IDX is already a fixed-size array; ``image_size`` does not apply).
- Split: pairs named ``train*`` and ``t10k*`` / ``test*`` keep that official split (train / val);
  otherwise the seeded stratified split of every image importer (``val_fraction``, ``seed``).
- Bounds (:class:`~engine.data.limits.ImportLimits`): each member's size and compression ratio from
  the zip directory, and the bytes a header announces against ``max_decoded_bytes`` before any
  value is read (a gzip file is never inflated past what its header announces plus one byte, the
  check for trailing data). A file whose data is shorter or longer than its header says, an image
  file whose count differs from its labels', an unknown type code, or a pair that cannot be formed
  is refused with the file named.
"""

from __future__ import annotations

import gzip
import io
import re
import struct
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from engine.access.policy import permission
from engine.data import storage
from engine.data.archive import Members, classify, decode_names, import_outcome, import_target, read_problem
from engine.data.catalog import check_new_name
from engine.data.dataset import DatasetInfo, classes_text, seeded_split
from engine.data.importer import ImportReport, default_name
from engine.data.ingest import SourcePlan
from engine.data.limits import ImportLimits, human_bytes
from engine.errors import DatasetError
from engine.messages import describe_error

#: type code -> (numpy big-endian dtype, name in the format's description)
IDX_TYPES: dict[int, tuple[str, str]] = {
    0x08: (">u1", "unsigned byte"), 0x09: (">i1", "signed byte"), 0x0B: (">i2", "short"),
    0x0C: (">i4", "int"), 0x0D: (">f4", "float"), 0x0E: (">f8", "double"),
}  # fmt: skip
INTEGER_TYPES = (0x08, 0x09, 0x0B, 0x0C)
_NAME = re.compile(r"^(?P<stem>.*?)[-._]?idx(?P<n>[134])[-._]ubyte(?:\.gz)?$", re.IGNORECASE)
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class IdxHeader:
    """An IDX header: ``type_code`` (a key of :data:`IDX_TYPES`) and ``dims`` (sizes, outermost first)."""

    type_code: int
    dims: tuple[int, ...]

    @property
    def magic(self) -> int:
        """The first four bytes as a big-endian integer (2051 for MNIST images, 2049 for labels)."""
        return (self.type_code << 8) | len(self.dims)

    @property
    def dtype(self) -> np.dtype:
        """The values' numpy dtype (big-endian)."""
        return np.dtype(IDX_TYPES[self.type_code][0])

    @property
    def nbytes(self) -> int:
        """Bytes of data the header announces."""
        return int(np.prod(self.dims, dtype=np.int64)) * self.dtype.itemsize


def read_header(f, where: str) -> IdxHeader:
    """Read and check an IDX header from the binary stream ``f``.

    Raises:
        DatasetError: naming ``where``: truncated, non-zero first bytes (not IDX), unknown type code,
            no dimensions.
    """
    head = f.read(4)
    if len(head) < 4:
        raise DatasetError(f"{where}: truncated IDX header ({len(head)} bytes)")
    zero, type_code, ndim = struct.unpack(">HBB", head)
    if zero != 0:
        raise DatasetError(f"{where}: not an IDX file (first bytes {head[:2].hex()}, expected 0000)")
    if type_code not in IDX_TYPES:
        raise DatasetError(f"{where}: unknown IDX type code 0x{type_code:02X} (known: "
                           f"{', '.join(f'0x{k:02X}' for k in IDX_TYPES)})")
    if ndim == 0:
        raise DatasetError(f"{where}: IDX header with no dimensions")
    raw = f.read(4 * ndim)
    if len(raw) < 4 * ndim:
        raise DatasetError(f"{where}: truncated IDX header (expected {ndim} dimension sizes)")
    return IdxHeader(type_code, struct.unpack(f">{ndim}I", raw))


def _stream(data: bytes) -> io.BufferedIOBase:
    """A binary stream of ``data``, inflated on the fly when it is gzip."""
    raw = io.BytesIO(data)
    return gzip.GzipFile(fileobj=raw, mode="rb") if data[:2] == GZIP_MAGIC else raw


def read_idx(data: bytes, where: str, max_bytes: int | None = None) -> np.ndarray:
    """The array stored in an IDX file's bytes (gzip or not), native byte order.

    Args:
        data: the file's bytes. where: how messages name the file.
        max_bytes: refuse a header announcing more data than this (checked before reading it).

    Raises:
        DatasetError: naming ``where``: as :func:`read_header`, data over ``max_bytes``, fewer or more
            data bytes than the header announces, a damaged gzip stream.
    """
    try:
        f = _stream(data)
        h = read_header(f, where)
        if max_bytes is not None and h.nbytes > max_bytes:
            raise DatasetError(f"{where}: its header announces {human_bytes(h.nbytes)} of values; the import has "
                               f"{human_bytes(max_bytes)} left (MASKLAB_MAX_DECODED_BYTES)")
        body = f.read(h.nbytes + 1)  # one more byte: trailing data is refused too
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise DatasetError(f"{where}: damaged gzip data ({describe_error(e)})") from None
    if len(body) != h.nbytes:
        what = "fewer" if len(body) < h.nbytes else "more"
        raise DatasetError(f"{where}: {what} data bytes than its header announces ({h.dims}, "
                           f"{IDX_TYPES[h.type_code][1]}: {h.nbytes} bytes)")
    return np.frombuffer(body, dtype=h.dtype).reshape(h.dims).astype(h.dtype.newbyteorder("="))


def read_idx_file(path: Path, header_only: bool = False) -> IdxHeader | np.ndarray:
    """An IDX file on disk (gzip or not): its header only, or its array.

    Raises:
        DatasetError: naming the file: unreadable, or as :func:`read_idx`.
    """
    try:
        if header_only:
            with open(path, "rb") as raw:
                f = gzip.GzipFile(fileobj=raw, mode="rb") if raw.read(2) == GZIP_MAGIC else raw
                raw.seek(0)
                return read_header(f, str(path))
        return read_idx(Path(path).read_bytes(), str(path))
    except OSError as e:
        raise DatasetError(f"{path}: cannot read IDX file ({describe_error(e)})") from e


# ---------------------------------------------------------------- import


@dataclass(frozen=True)
class IdxPair:
    """One images file and its labels file (paths inside the source), and the split its name gives
    (``"train"``, ``"val"`` or ``""`` when the name says nothing)."""

    images: str
    labels: str
    split: str


def idx_kind(name: str) -> int | None:
    """Dimensions an IDX file name announces (1 labels, 3 or 4 images), or None for another name."""
    m = _NAME.match(PurePosixPath(name).name)
    return int(m.group("n")) if m else None


def _partner(name: str) -> str:
    """The labels-file name expected for an images-file name (case kept, ``.gz`` dropped)."""
    base = PurePosixPath(name)
    stem = re.sub(r"idx[34]", "idx1", base.name, flags=re.IGNORECASE)
    stem = re.sub(r"images", "labels", stem, flags=re.IGNORECASE)
    return str(base.with_name(re.sub(r"\.gz$", "", stem, flags=re.IGNORECASE)))


def _split_hint(name: str) -> str:
    n = PurePosixPath(name).name.lower()
    if n.startswith("train"):
        return "train"
    if n.startswith(("t10k", "test")):
        return "val"
    return ""


def find_pairs(names: list[str], where: str) -> list[IdxPair]:
    """Pair the IDX image files among ``names`` with their labels files (see the module docstring).

    Raises:
        DatasetError: naming ``where``: no images or no labels file, or an images file without a
            labels partner (the message lists what was found).
    """
    images = sorted(n for n in names if idx_kind(n) in (3, 4))
    labels = sorted(n for n in names if idx_kind(n) == 1)
    if not images or not labels:
        raise DatasetError(f"{where}: an IDX import needs an images file (*-idx3-ubyte[.gz]) and a labels file "
                           f"(*-idx1-ubyte[.gz]); found images {images or 'none'}, labels {labels or 'none'}")
    if len(images) == 1 and len(labels) == 1:
        return [IdxPair(images[0], labels[0], _split_hint(images[0]))]
    by_key = {re.sub(r"\.gz$", "", lb, flags=re.IGNORECASE).lower(): lb for lb in labels}
    pairs = []
    for im in images:
        lb = by_key.get(_partner(im).lower())
        if lb is None:
            raise DatasetError(f"{where}: no labels file for {im} (expected {_partner(im)}[.gz]); labels files: "
                               f"{', '.join(labels)}")
        pairs.append(IdxPair(im, lb, _split_hint(im)))
    return pairs


def load_pairs(members, pairs: list[IdxPair], where: str, limits: ImportLimits) -> list[tuple[np.ndarray, np.ndarray]]:
    """Read every pair: ``[(images uint8 [N, H, W, C], raw labels int64 [N])]``.

    Args:
        members: decoded :class:`engine.data.archive.Member` objects by name.

    Raises:
        DatasetError: a file over a limit, unreadable, of the wrong type or shape, or a count mismatch.
    """
    left = limits.max_decoded_bytes
    out = []
    for p in pairs:
        arrays = []
        for name in (p.images, p.labels):
            m = members[name]
            try:
                data = m.read()
            except Exception as e:  # noqa: BLE001 - a bad CRC, an unsupported method, a broken link...
                raise DatasetError(f"{where}/{name}: {read_problem(e)}") from None
            a = read_idx(data, f"{where}/{name}", max_bytes=left)
            left -= a.nbytes
            arrays.append(a)
        x, y = arrays
        if x.dtype != np.uint8:
            raise DatasetError(f"{where}/{p.images}: IDX images of type {x.dtype} ; masklab imports 8-bit images "
                               f"(type 0x08, unsigned byte), whose 0..255 range is defined")
        if x.ndim == 3:
            x = x[..., None]
        if x.ndim != 4 or x.shape[3] not in (1, 3) or min(x.shape[1:3]) < 1:
            raise DatasetError(f"{where}/{p.images}: images of shape {x.shape}; expected [N, H, W] or [N, H, W, C] "
                               f"with C = 1 or 3")
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise DatasetError(f"{where}/{p.labels}: labels of shape {y.shape} and type {y.dtype}; expected one "
                               f"integer per image ([N])")
        if len(x) != len(y):
            raise DatasetError(f"{where}: {p.images} holds {len(x)} images but {p.labels} holds {len(y)} labels")
        out.append((np.ascontiguousarray(x), y.astype(np.int64)))
    shapes = {a.shape[1:] for a, _ in out}
    if len(shapes) > 1:
        raise DatasetError(f"{where}: the IDX image files have different image shapes {sorted(shapes)}")
    return out


def _class_names(raw: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    values = np.unique(raw)
    return np.searchsorted(values, raw).astype(np.int64), tuple(str(int(v)) for v in values)


def _skip_reason(rel: str) -> str | None:
    parts = PurePosixPath(rel).parts
    if parts and (parts[0] == "__MACOSX" or any(q.startswith(".") for q in parts)):
        return "hidden or macOS metadata"
    return None if idx_kind(rel) else "not an IDX file"


@contextmanager
def _members(path: Path, label: str, name_encoding: str | None, limits: ImportLimits):
    """``(IDX members by cleaned name, skipped [(name, reason)])`` of a zip or folder, kept open.
    An IDX file refused from the directory (unsafe path, over a size limit) refuses the import."""
    with Members(path, label, limits) as ms:
        decode_names(ms.members, name_encoding)
        candidates, rejected, skipped = classify(ms.members, limits, _skip_reason)
        if rejected:
            raise DatasetError(f"{label}: " + "; ".join(f"{n}: {why}" for n, why in rejected))
        yield {m.name: m for m in candidates}, skipped


def holds_idx(names: list[str]) -> bool:
    """True when ``names`` (paths in a zip or folder) include an IDX images file and a labels file."""
    kinds = {idx_kind(n) for n in names}
    return 1 in kinds and bool(kinds & {3, 4})


def inspect_idx(path: Path, options, label: str):
    """What :func:`import_idx` would import (reads the files: their headers and labels decide the
    classes). Returns a :class:`engine.data.ingest.SourcePlan`."""
    limits = ImportLimits.from_env()
    with _members(path, label, options.name_encoding, limits) as (members, skipped):
        pairs = find_pairs(list(members), label)
        loaded = load_pairs(members, pairs, label, limits)
    labels, classes = _class_names(np.concatenate([y for _, y in loaded]))
    plan = SourcePlan(label, "image", "IDX (MNIST format)")
    plan.class_names, plan.n_items = classes, len(labels)
    plan.label_counts = {classes[k]: int(n) for k, n in sorted(Counter(labels.tolist()).items())}
    first = pairs[0]
    plan.preview = [{"file": f"{first.images}[{i}]", "label": classes[labels[i]]} for i in range(min(10, len(labels)))]
    x = loaded[0][0]
    plan.notes.append(f"{len(pairs)} IDX pair(s): " + "; ".join(f"{p.images} + {p.labels}" for p in pairs))
    plan.notes.append(f"{x.shape[1]}x{x.shape[2]} px, {x.shape[3]} channel(s), kept at their stored size; "
                      + _split_note(pairs, options))
    plan.skipped = _unused(members, pairs) + skipped
    return plan


def _unused(members: dict, pairs: list[IdxPair]) -> list[tuple[str, str]]:
    used = {f for p in pairs for f in (p.images, p.labels)}
    return [(n, "an IDX file without a partner") for n in sorted(set(members) - used)]


def _official(pairs: list[IdxPair]) -> bool:
    return all(p.split for p in pairs) and {p.split for p in pairs} == {"train", "val"}


def _split_note(pairs: list[IdxPair], options) -> str:
    if _official(pairs):
        return "split as named (train* = train, t10k*/test* = val)"
    return f"seeded stratified split, {options.val_fraction:g} to val (seed {options.seed})"


@permission("data.import", import_target, import_outcome)
def import_idx(path: Path, name: str | None, options, *, workspace=None, overwrite: bool = False,
               source_label: str | None = None, limits: ImportLimits | None = None, image_size: int | None = None,
               fill: str = "white", geometry: str = "crop", pad_fill: str = "edge", progress=None):
    """Import the IDX pair(s) of a zip or folder as an image dataset (rules in the module docstring).

    Args: as :func:`engine.data.ingest.import_source` (``options.val_fraction``, ``options.seed``,
        ``options.name_encoding``); ``image_size``, ``fill``, ``geometry``, ``pad_fill`` and ``progress`` do not
        apply (IDX images keep their own size) and are ignored.

    Returns:
        An :class:`engine.data.importer.ImportReport` (``accepted`` = images, ``dataset`` = the stored info).

    Raises:
        DatasetError: as :func:`find_pairs` and :func:`load_pairs`, an invalid or taken name. Nothing is
            written then.
        PermissionDeniedError: ``actor=`` (default :func:`engine.access.policy.current_identity`) is not an
            editor, or demo mode; checked before anything is read.
    """
    label = source_label or str(path)
    limits = limits or ImportLimits.from_env()
    name = check_new_name(name if name is not None else default_name(path), workspace, overwrite)
    with _members(path, label, options.name_encoding, limits) as (members, skipped):
        pairs = find_pairs(list(members), label)
        loaded = load_pairs(members, pairs, label, limits)
    images = np.concatenate([x for x, _ in loaded])
    labels, classes = _class_names(np.concatenate([y for _, y in loaded]))
    if _official(pairs):
        split = np.concatenate([np.full(len(y), 0 if p.split == "train" else 1, np.uint8)
                                for p, (_, y) in zip(pairs, loaded)])
    else:
        split = seeded_split(labels, options.val_fraction, options.seed)
    _, h, w, c = images.shape
    info = DatasetInfo(
        name=name, modality="image", source=f"upload:{path.name}", image_shape=(c, h, w), class_names=classes,
        n_train=int((split == 0).sum()), n_val=int((split == 1).sum()), created_at=storage.utc_now(),
        description=f"Imported from the IDX files of {path.name}: {len(images)} images {h}x{w} in "
                    f"{classes_text(len(classes))} ({_split_note(pairs, options)}).",
    )  # fmt: skip
    folder = storage.write_dataset(info, images, labels, split, workspace, overwrite=overwrite)
    report = ImportReport(source=label, dataset=storage.read_info(folder), accepted=len(images))
    report.skipped = _unused(members, pairs) + skipped
    return report
