"""In-memory datasets: :class:`DatasetInfo` (metadata), :class:`ImageDataset` (pixels),
:class:`TextDataset` (UTF-8 documents), the seeded split (stratified, or by group).

Each dataset class says which arrays it stores (one ``<name>.npy`` each, :mod:`engine.data.storage`; :meth:`LabelledRows.arrays`,
:meth:`LabelledRows.from_arrays`) and how they must match the metadata
(:meth:`LabelledRows.problems`); each modality names its class
(:attr:`engine.modalities.Modality.dataset_type`), so :mod:`engine.data.storage` reads and writes
every modality through one path.

Heavy libraries (torch, pandas, scikit-learn) are imported inside the functions that need them, so that
listing datasets from the dashboard stays cheap.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from engine.errors import DatasetError

if TYPE_CHECKING:
    import pandas as pd
    import torch

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""A dataset name: lower-case letters, digits, ``_`` and ``-``; starts with a letter or digit; 1-64 chars."""

SPLITS = ("train", "val")
"""Split names; a dataset's ``split`` array stores their index (0 = train, 1 = val)."""


def counted(n: int, one: str, many: str | None = None) -> str:
    """``counted(1, "image")`` -> ``"1 image"``, ``counted(1200, "image")`` -> ``"1,200 images"``
    (``many`` for an irregular plural): counts in the import reports and descriptions."""
    return f"{n:,} {one}" if n == 1 else f"{n:,} {many or one + 's'}"


def classes_text(n: int) -> str:
    """``"1 class"`` / ``"3 classes"``."""
    return counted(n, "class", "classes")


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid dataset name (:data:`NAME_RE`), else raise :class:`DatasetError`."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise DatasetError(
            f"invalid dataset name {name!r}: use 1-64 characters a-z, 0-9, '_' or '-', "
            "starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class DatasetInfo:
    """Metadata of one dataset, stored as ``<workspace>/datasets/<name>/meta.json``.

    Attributes:
        name: dataset name, matches :data:`NAME_RE`.
        modality: a registered modality (:func:`engine.modalities.modality_names`): ``"image"``,
            ``"text"``, ``"audio"``, ``"paired"`` (an image and its caption per row) or a plug-in's.
        source: where the data came from, e.g. ``"bundled:digits"``, ``"upload:stamps.zip"``.
        image_shape: images and paired: ``(C, H, W)`` in pixels, ``C`` in {1, 3}; None for other modalities.
        class_names: label ``k`` is ``class_names[k]``.
        n_train: number of train rows (images, documents).
        n_val: number of validation rows.
        created_at: ISO-8601 UTC time of registration in the workspace; ``""`` for a bundled set that
            :func:`engine.data.list_datasets` describes before it was first loaded (registered).
        description: one human sentence or two.
        stats: modality-specific summary numbers for the Data page; text: ``docs``, ``chars_mean``,
            ``chars_median``, ``chars_max``, ``words_mean``, ``words_max`` (characters and
            whitespace-separated words per document) and ``cleaning`` (the import's cleaning counts);
            audio: ``sample_rate`` (Hz) and durations (:func:`engine.data.audio.audio_stats`).
            ``{}`` when there is nothing to say (images, old ``meta.json`` files).
        source_hash: sha256 (hex) of the stored arrays (:func:`engine.data.storage.content_hash`),
            set when the dataset is written; ``""`` for an old ``meta.json``, an unregistered
            bundled set, or an info built before writing. Equal hashes mean equal data, split
            included. Left out of ``==`` (it is derived from the arrays, not declared metadata, so
            an info compares equal before and after it is written): compare it explicitly.
        group_names: group ``g`` of a row (``groups`` array) is ``group_names[g]``; ``()`` when the
            dataset has no groups.
    """

    name: str
    modality: str
    source: str
    image_shape: tuple[int, int, int] | None
    class_names: tuple[str, ...]
    n_train: int
    n_val: int
    created_at: str
    description: str
    stats: dict[str, Any] = field(default_factory=dict, hash=False)  # a dict: left out of hash(), kept in ==
    source_hash: str = field(default="", compare=False)
    group_names: tuple[str, ...] = ()

    @property
    def n_classes(self) -> int:
        """Number of classes (``len(class_names)``)."""
        return len(self.class_names)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists)."""
        d = asdict(self)
        d["image_shape"] = None if self.image_shape is None else list(self.image_shape)
        d["class_names"] = list(self.class_names)
        d["group_names"] = list(self.group_names)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DatasetInfo:
        """Inverse of :meth:`to_dict`; extra keys are ignored, and the keys added after the first
        release (``stats``, ``source_hash``, ``group_names``; ``image_shape`` for non-images) may be
        missing. Raises KeyError/TypeError/ValueError."""
        shape = d.get("image_shape")
        stats = d.get("stats") or {}
        if not isinstance(stats, dict):
            raise TypeError(f"stats must be a JSON object, not {type(stats).__name__}")
        return cls(
            name=str(d["name"]),
            modality=str(d["modality"]),
            source=str(d["source"]),
            image_shape=None if shape is None else tuple(int(v) for v in shape),  # type: ignore[arg-type]
            class_names=tuple(str(c) for c in d["class_names"]),
            n_train=int(d["n_train"]),
            n_val=int(d["n_val"]),
            created_at=str(d["created_at"]),
            description=str(d["description"]),
            stats=dict(stats),
            source_hash=str(d.get("source_hash") or ""),
            group_names=tuple(str(g) for g in d.get("group_names") or ()),
        )


class LabelledRows:
    """What every dataset shares: ``info``, one class label and one split per row, and how its
    arrays are stored (one ``.npy`` file each, see :mod:`engine.data.storage`) and checked against ``info``.
    A dataset read from the workspace holds its payload arrays (pixels, text bytes, PCM samples) as
    read-only memory maps: index rows (:meth:`indices`, then e.g. ``images[rows]``) rather than
    converting whole arrays.

    A subclass is a dataclass with at least ``info: DatasetInfo``, ``labels`` int64 ``[N]`` and
    ``split`` uint8 ``[N]`` (0 = train, 1 = val); it lists its stored arrays in :attr:`ARRAYS`
    (required) and :attr:`OPTIONAL_ARRAYS`, and adds its own checks in :meth:`_own_problems`.
    """

    ARRAYS: ClassVar[tuple[str, ...]] = ("labels", "split")
    OPTIONAL_ARRAYS: ClassVar[tuple[str, ...]] = ()
    #: dtype each stored array is converted to.
    DTYPES: ClassVar[dict[str, type]] = {"labels": np.int64, "split": np.uint8}

    info: DatasetInfo
    labels: np.ndarray
    split: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def indices(self, split: str) -> np.ndarray:
        """Row indices (int64 ``[n]``) of the ``"train"`` or ``"val"`` split, in stored order.

        Raises ValueError for any other split name.
        """
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'val', not {split!r}")
        return np.flatnonzero(self.split == SPLITS.index(split))

    def counts(self) -> pd.DataFrame:
        """Rows per class and split: columns ``class_name``, ``split`` ("train"/"val"), ``count`` (int64).

        One row for every class x split pair (zeros included), classes in label order, train before val.
        """
        import pandas as pd  # noqa: PLC0415 (heavy: listing datasets stays cheap, module docstring)
        k = self.info.n_classes
        per_split = [np.bincount(self.labels[self.split == s], minlength=k) for s in range(len(SPLITS))]
        rows = [
            (c, split_name, int(per_split[s][i]))
            for i, c in enumerate(self.info.class_names)
            for s, split_name in enumerate(SPLITS)
        ]
        return pd.DataFrame(rows, columns=["class_name", "split", "count"]).astype({"count": "int64"})

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays stored (one ``<name>.npy`` each), by name, converted to their stored dtypes (:attr:`DTYPES`);
        optional arrays that are None are left out."""
        out = {}
        for key in self.ARRAYS + self.OPTIONAL_ARRAYS:
            a = getattr(self, key)
            if a is not None:
                out[key] = np.ascontiguousarray(a, dtype=self.DTYPES[key])
        return out

    @classmethod
    def from_arrays(cls, info: DatasetInfo, arrays: dict[str, np.ndarray]):
        """Build the dataset from ``info`` and the arrays of :meth:`arrays` (optional ones may be absent)."""
        optional = {k: arrays.get(k) for k in cls.OPTIONAL_ARRAYS}
        return cls(info=info, **{k: arrays[k] for k in cls.ARRAYS}, **optional)  # type: ignore[call-arg]

    @classmethod
    def problems(cls, info: DatasetInfo, arrays: dict[str, np.ndarray]) -> list[str]:
        """Why ``arrays`` do not match ``info`` (empty list: they do).

        Shared checks: labels int64 ``[N]`` in ``[0, n_classes)``, split ``[N]`` giving
        ``n_train`` train and ``n_val`` val rows; then the subclass's :meth:`_own_problems`.
        """
        missing = [k for k in cls.ARRAYS if k not in arrays]
        if missing:
            return [f"missing arrays {', '.join(missing)}"]
        labels, split = arrays["labels"], arrays["split"]
        n = labels.shape[0] if labels.ndim == 1 else -1
        problems = []
        if labels.dtype != np.int64 or n < 0 or (n and not 0 <= labels.min() <= labels.max() < info.n_classes):
            problems.append(f"labels must be int64 [N] in [0, {info.n_classes})")
        if split.shape != (n,) or ((split == 0).sum(), (split == 1).sum()) != (info.n_train, info.n_val):
            problems.append(f"split does not give {info.n_train} train + {info.n_val} val rows")
        return problems + cls._own_problems(info, arrays, n)

    @classmethod
    def _own_problems(cls, info: DatasetInfo, arrays: dict[str, np.ndarray], n: int) -> list[str]:
        """Modality-specific checks of :meth:`problems` (``n`` = rows, -1 if the labels are malformed)."""
        return []


@dataclass(eq=False)
class ImageDataset(LabelledRows):
    """A labelled image dataset held in memory.

    Attributes:
        info: its :class:`DatasetInfo` (modality ``image``).
        images: uint8 ``[N, H, W, C]``, pixel values 0..255 (``C`` = ``info.image_shape[0]``).
        labels: int64 ``[N]``, class index into ``info.class_names``.
        split: uint8 ``[N]``, 0 = train, 1 = val.
    """

    ARRAYS: ClassVar[tuple[str, ...]] = ("images", "labels", "split")
    DTYPES: ClassVar[dict[str, type]] = {**LabelledRows.DTYPES, "images": np.uint8}

    info: DatasetInfo
    images: np.ndarray
    labels: np.ndarray
    split: np.ndarray

    def tensors(self, split: str, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``"train"`` or ``"val"`` split (its first ``limit`` rows in stored order when given)
        as tensors (:meth:`rows_tensors`). Raises ValueError for any other split name."""
        return self.rows_tensors(self.indices(split)[:limit])

    def rows_tensors(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``rows`` (int ``[n]`` row indices of the dataset, any order) as tensors; only those
        rows are read (from a memory-mapped dataset: from disk or the page cache).

        Returns:
            ``x``: float32 ``[n, C, H, W]``, values in [0, 1] (pixel / 255);
            ``y``: int64 ``[n]`` class indices.
        Raises IndexError for a row out of range.
        """
        import torch  # noqa: PLC0415 (the data package serves the dashboard and import jobs without torch)

        rows = np.asarray(rows, dtype=np.int64)
        x = torch.from_numpy(np.asarray(self.images[rows])).permute(0, 3, 1, 2).float().div_(255.0).contiguous()
        y = torch.from_numpy(self.labels[rows].astype(np.int64))
        return x, y

    @classmethod
    def _own_problems(cls, info: DatasetInfo, arrays: dict[str, np.ndarray], n: int) -> list[str]:
        images = arrays["images"]
        if info.image_shape is None or len(info.image_shape) != 3:
            return [f"image_shape must be (C, H, W), not {info.image_shape}"]
        c, h, w = info.image_shape
        if images.dtype != np.uint8 or images.shape != (n, h, w, c):
            return [f"images {images.dtype} {images.shape}, expected uint8 ({n}, {h}, {w}, {c})"]
        return []


@dataclass(eq=False)
class TextDataset(LabelledRows):
    """A labelled text dataset held in memory: documents stored compactly as UTF-8 bytes + offsets.

    Document ``i`` is ``text_bytes[text_offsets[i]:text_offsets[i + 1]].decode("utf-8")``.

    Attributes:
        info: its :class:`DatasetInfo` (modality ``text``, ``image_shape`` None).
        text_bytes: uint8 ``[total]``, every document's UTF-8 bytes one after the other.
        text_offsets: int64 ``[N + 1]``, byte offsets: starts at 0, non-decreasing, ends at ``total``.
        labels: int64 ``[N]``, class index into ``info.class_names``.
        split: uint8 ``[N]``, 0 = train, 1 = val.
        groups: optional int64 ``[N]``, index into ``info.group_names`` (e.g. the author of each
            document); a group's rows are all in one split.
    """

    ARRAYS: ClassVar[tuple[str, ...]] = ("text_bytes", "text_offsets", "labels", "split")
    OPTIONAL_ARRAYS: ClassVar[tuple[str, ...]] = ("groups",)
    DTYPES: ClassVar[dict[str, type]] = {
        **LabelledRows.DTYPES, "text_bytes": np.uint8, "text_offsets": np.int64, "groups": np.int64,
    }  # fmt: skip

    info: DatasetInfo
    text_bytes: np.ndarray
    text_offsets: np.ndarray
    labels: np.ndarray
    split: np.ndarray
    groups: np.ndarray | None = None

    @classmethod
    def from_texts(
        cls,
        info: DatasetInfo,
        texts: list[str],
        labels: np.ndarray,
        split: np.ndarray,
        groups: np.ndarray | None = None,
    ) -> TextDataset:
        """Pack ``texts`` (``N`` strings) into ``text_bytes`` / ``text_offsets``; other arrays as given."""
        data, offsets = _pack([t.encode("utf-8") for t in texts], np.uint8)
        return cls(info, data, offsets, np.asarray(labels, np.int64), np.asarray(split, np.uint8),
                   None if groups is None else np.asarray(groups, np.int64))  # fmt: skip

    def text(self, i: int) -> str:
        """Document ``i`` (0-based row index; negative counts from the end). Raises IndexError."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"document {i} out of range for {n} documents")
        i %= n
        return self.text_bytes[self.text_offsets[i] : self.text_offsets[i + 1]].tobytes().decode("utf-8")

    def texts(self, split: str | None = None, limit: int | None = None) -> list[str]:
        """The documents of the ``"train"`` or ``"val"`` split in stored order (every document when
        ``split`` is None), the first ``limit`` of them when given (only those are decoded).
        Raises ValueError for another split name."""
        rows = np.arange(len(self)) if split is None else self.indices(split)
        return self.texts_at(rows[:limit])

    def texts_at(self, rows: np.ndarray) -> list[str]:
        """Documents ``rows`` (int ``[n]`` row indices, any order); only their bytes are read."""
        data, off = self.text_bytes, self.text_offsets
        return [data[off[i] : off[i + 1]].tobytes().decode("utf-8") for i in np.asarray(rows, dtype=np.int64)]

    @classmethod
    def _own_problems(cls, info: DatasetInfo, arrays: dict[str, np.ndarray], n: int) -> list[str]:
        return (_packed_problems(arrays, "text_bytes", "text_offsets", np.uint8, n)
                + _groups_problems(info, arrays.get("groups"), n))


def _packed_problems(arrays: dict[str, np.ndarray], data_key: str, offsets_key: str, dtype: type, n: int) -> list[str]:
    """Why a packed array (``data_key`` ``[total]`` of ``dtype``, row ``i`` at
    ``data[offsets[i]:offsets[i + 1]]``) and its int64 ``[n + 1]`` offsets are malformed (empty: they are not)."""
    data, off = arrays[data_key], arrays[offsets_key]
    name = np.dtype(dtype).name
    if data.dtype != dtype or data.ndim != 1:
        return [f"{data_key} {data.dtype} {data.shape}, expected {name} [total]"]
    if off.dtype != np.int64 or off.shape != (n + 1,) or off[0] != 0 or off[-1] != data.shape[0] \
            or (np.diff(off) < 0).any():  # fmt: skip
        return [f"{offsets_key} must be int64 [{n + 1}], from 0 to {data.shape[0]}, non-decreasing"]
    return []


def _groups_problems(info: DatasetInfo, groups: np.ndarray | None, n: int) -> list[str]:
    """Why an optional ``groups`` array does not match ``info.group_names`` (empty: it does)."""
    if groups is None:
        if info.group_names:
            return [f"meta has {len(info.group_names)} group names but there is no groups array"]
    elif groups.dtype != np.int64 or groups.shape != (n,) or \
            (n and not 0 <= groups.min() <= groups.max() < len(info.group_names)):  # fmt: skip
        return [f"groups must be int64 [{n}] in [0, {len(info.group_names)})"]
    return []


def _pack(rows: list[bytes] | list[np.ndarray], dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """``(data [total] of dtype, offsets int64 [N + 1])``: ``rows`` (bytes or 1-D arrays) one after the other."""
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    if rows and isinstance(rows[0], (bytes, bytearray)):
        data = np.frombuffer(b"".join(rows), dtype=dtype).copy()
    else:
        data = np.concatenate([np.asarray(r, dtype=dtype) for r in rows]) if rows else np.zeros(0, dtype)
    return data, offsets


PCM_SCALE = 32767.0
"""int16 PCM <-> float: ``pcm = round(clip(x, -1, 1) * 32767)``, ``x = pcm / 32767`` (symmetric, so
full scale maps to +-1 both ways; -32768 is never written)."""


@dataclass(eq=False)
class AudioDataset(LabelledRows):
    """A labelled audio dataset held in memory: mono clips at one sample rate, stored as int16 PCM
    one after the other, with offsets (2 bytes a sample: a 1 s clip at 16 kHz is 32 KB).

    Clip ``i`` is ``audio_pcm[audio_offsets[i]:audio_offsets[i + 1]] / 32767`` (:data:`PCM_SCALE`),
    float samples in [-1, 1] at ``sample_rate[0]`` Hz (the pipeline rate the import resampled to).

    Attributes:
        info: its :class:`DatasetInfo` (modality ``audio``; ``stats`` holds ``sample_rate``
            and duration statistics, see :func:`engine.data.audio.audio_stats`).
        audio_pcm: int16 ``[total]`` samples of every clip.
        audio_offsets: int64 ``[N + 1]`` sample offsets: from 0, non-decreasing, ends at ``total``.
        sample_rate: int64 ``[1]``: Hz of every clip (stored with the samples, so it is part of
            the content hash).
        labels: int64 ``[N]``, class index into ``info.class_names``.
        split: uint8 ``[N]``, 0 = train, 1 = val.
        groups: optional int64 ``[N]``, index into ``info.group_names`` (e.g. the speaker); a
            group's clips are all in one split.
        text_bytes, text_offsets: optional transcripts, packed as in :class:`TextDataset`
            (``""`` for a clip without one); both or neither.
    """

    ARRAYS: ClassVar[tuple[str, ...]] = ("audio_pcm", "audio_offsets", "sample_rate", "labels", "split")
    OPTIONAL_ARRAYS: ClassVar[tuple[str, ...]] = ("groups", "text_bytes", "text_offsets")
    DTYPES: ClassVar[dict[str, type]] = {
        **LabelledRows.DTYPES, "audio_pcm": np.int16, "audio_offsets": np.int64, "sample_rate": np.int64,
        "groups": np.int64, "text_bytes": np.uint8, "text_offsets": np.int64,
    }  # fmt: skip

    info: DatasetInfo
    audio_pcm: np.ndarray
    audio_offsets: np.ndarray
    sample_rate: np.ndarray
    labels: np.ndarray
    split: np.ndarray
    groups: np.ndarray | None = None
    text_bytes: np.ndarray | None = None
    text_offsets: np.ndarray | None = None

    @classmethod
    def from_clips(
        cls,
        info: DatasetInfo,
        clips: list[np.ndarray],
        sample_rate: int,
        labels: np.ndarray,
        split: np.ndarray,
        groups: np.ndarray | None = None,
        transcripts: list[str] | None = None,
    ) -> AudioDataset:
        """Pack ``clips`` (``N`` int16 ``[n_i]`` arrays, see :func:`to_pcm`) and optional transcripts."""
        pcm, offsets = _pack(clips, np.int16)
        text = _pack([t.encode("utf-8") for t in transcripts], np.uint8) if transcripts is not None else (None, None)
        return cls(info, pcm, offsets, np.array([sample_rate], np.int64), np.asarray(labels, np.int64),
                   np.asarray(split, np.uint8), None if groups is None else np.asarray(groups, np.int64), *text)

    @property
    def rate(self) -> int:
        """Sample rate in Hz."""
        return int(self.sample_rate[0])

    def lengths(self) -> np.ndarray:
        """Samples per clip, int64 ``[N]``."""
        return np.diff(self.audio_offsets)

    def clip(self, i: int) -> np.ndarray:
        """Clip ``i`` as float32 ``[n]`` in [-1, 1] (negative ``i`` counts from the end). Raises IndexError."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"clip {i} out of range for {n} clips")
        i %= n
        return self.audio_pcm[self.audio_offsets[i] : self.audio_offsets[i + 1]].astype(np.float32) / PCM_SCALE

    def transcript(self, i: int) -> str:
        """The transcript of clip ``i`` (``""`` when the dataset or the clip has none)."""
        if self.text_bytes is None:
            return ""
        return self.text_bytes[self.text_offsets[i] : self.text_offsets[i + 1]].tobytes().decode("utf-8")

    @classmethod
    def _own_problems(cls, info: DatasetInfo, arrays: dict[str, np.ndarray], n: int) -> list[str]:
        problems = _packed_problems(arrays, "audio_pcm", "audio_offsets", np.int16, n)
        rate = arrays["sample_rate"]
        if rate.dtype != np.int64 or rate.shape != (1,) or rate[0] <= 0:
            problems.append(f"sample_rate must be int64 [1], > 0 (got {rate.dtype} {rate.shape})")
        elif info.stats.get("sample_rate") not in (None, int(rate[0])):
            problems.append(f"sample_rate {int(rate[0])} Hz, meta says {info.stats['sample_rate']} Hz")
        if ("text_bytes" in arrays) != ("text_offsets" in arrays):
            problems.append("text_bytes and text_offsets go together")
        elif "text_bytes" in arrays:
            problems += _packed_problems(arrays, "text_bytes", "text_offsets", np.uint8, n)
        return problems + _groups_problems(info, arrays.get("groups"), n)


def to_pcm(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Float samples -> int16 PCM (:data:`PCM_SCALE`); returns ``(pcm [n], clipped)``, ``clipped``
    the number of samples outside [-1, 1] that were clipped to full scale."""
    x = np.asarray(x, dtype=np.float32)
    clipped = int(np.count_nonzero(np.abs(x) > 1.0))
    return np.round(np.clip(x, -1.0, 1.0) * PCM_SCALE).astype(np.int16), clipped


@dataclass(eq=False)
class PairedDataset(LabelledRows):
    """Image-text pairs held in memory: row ``i`` is image ``images[i]`` and its caption, packed as in
    :class:`TextDataset`. One row per pair, so the seeded split (one split value per row) keeps both
    members of a pair in the same split by construction.

    Attributes:
        info: its :class:`DatasetInfo` (modality ``paired``, ``image_shape`` ``(C, H, W)``).
        images: uint8 ``[N, H, W, C]``, pixel values 0..255.
        text_bytes: uint8 ``[total]``, every caption's UTF-8 bytes one after the other.
        text_offsets: int64 ``[N + 1]``, byte offsets of the captions (from 0, non-decreasing).
        labels: int64 ``[N]``, class index into ``info.class_names`` (``unlabeled`` when the source
            has no labels).
        split: uint8 ``[N]``, 0 = train, 1 = val.
    """

    ARRAYS: ClassVar[tuple[str, ...]] = ("images", "text_bytes", "text_offsets", "labels", "split")
    DTYPES: ClassVar[dict[str, type]] = {**ImageDataset.DTYPES, **TextDataset.DTYPES}

    info: DatasetInfo
    images: np.ndarray
    text_bytes: np.ndarray
    text_offsets: np.ndarray
    labels: np.ndarray
    split: np.ndarray

    # The image half reads like an ImageDataset, the caption half like a TextDataset.
    tensors = ImageDataset.tensors
    rows_tensors = ImageDataset.rows_tensors
    text = TextDataset.text
    texts = TextDataset.texts
    texts_at = TextDataset.texts_at

    @classmethod
    def from_pairs(cls, info: DatasetInfo, images: np.ndarray, captions: list[str], labels: np.ndarray,
                   split: np.ndarray) -> PairedDataset:
        """Pack ``captions`` (``N`` strings) beside ``images`` uint8 ``[N, H, W, C]``; other arrays as given."""
        data, offsets = _pack([t.encode("utf-8") for t in captions], np.uint8)
        return cls(info, np.asarray(images, np.uint8), data, offsets, np.asarray(labels, np.int64),
                   np.asarray(split, np.uint8))

    @classmethod
    def _own_problems(cls, info: DatasetInfo, arrays: dict[str, np.ndarray], n: int) -> list[str]:
        return (ImageDataset._own_problems(info, arrays, n)
                + _packed_problems(arrays, "text_bytes", "text_offsets", np.uint8, n))


Dataset = ImageDataset | TextDataset | AudioDataset | PairedDataset
"""Any in-memory dataset."""

def n_val_for(n: int, val_fraction: float) -> int:
    """Rows of a stratum of ``n`` that :func:`seeded_split` puts in val: ``val_fraction * n`` rounded
    half up, at least 1 when ``val_fraction > 0``, at most ``n - 1`` (0 when ``n < 2``)."""
    if val_fraction <= 0 or n < 2:
        return 0
    return min(n - 1, max(1, math.floor(val_fraction * n + 0.5)))


def seeded_split(
    labels: np.ndarray, val_fraction: float, seed: int, groups: np.ndarray | None = None
) -> np.ndarray:
    """Seeded train/val split; the same labels, fraction, seed (and groups) always give the same split.

    Without ``groups``: stratified when every class has at least 2 rows: each class puts
    :func:`n_val_for` of its rows (about ``val_fraction``, at least 1, never all) in val. Otherwise a
    plain seeded random split of ``n_val_for(N, val_fraction)`` rows. Rows are drawn with
    ``numpy.random.default_rng(seed)``.

    With ``groups`` (e.g. one id per author or speaker), every row of a group lands in the same
    split, so no group is seen in both; the split is by group, not stratified by class. The groups
    are put in a seeded random order and taken into val one by one, skipping a group that would
    make val larger than ``n_val_for(N, val_fraction)`` rows; when no group fits, the first group in
    that order goes to val alone. Fewer than 2 groups, or ``val_fraction == 0``: everything is train.

    Args:
        labels: int ``[N]`` class indices.
        val_fraction: in [0, 1).
        seed: random seed.
        groups: optional int ``[N]`` group id of each row.
    Returns:
        uint8 ``[N]``: 0 = train, 1 = val.
    Raises:
        DatasetError: ``val_fraction`` outside [0, 1), or ``groups`` not of shape ``[N]``.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise DatasetError(f"val_fraction must be in [0, 1), not {val_fraction}")
    labels = np.asarray(labels)
    split = np.zeros(labels.shape[0], dtype=np.uint8)
    rng = np.random.default_rng(seed)
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != labels.shape:
            raise DatasetError(f"groups has shape {groups.shape}, labels {labels.shape}: one group per row")
        return _group_split(groups, val_fraction, rng)
    classes, counts = np.unique(labels, return_counts=True)
    stratified = counts.size > 0 and counts.min() >= 2
    strata = [np.flatnonzero(labels == c) for c in classes] if stratified else [np.arange(labels.shape[0])]
    for rows in strata:
        split[rng.permutation(rows)[: n_val_for(rows.size, val_fraction)]] = 1
    return split


def _group_split(groups: np.ndarray, val_fraction: float, rng: np.random.Generator) -> np.ndarray:
    """The ``groups`` branch of :func:`seeded_split`."""
    split = np.zeros(groups.shape[0], dtype=np.uint8)
    ids, inverse, sizes = np.unique(groups, return_inverse=True, return_counts=True)
    target = n_val_for(groups.shape[0], val_fraction)
    if ids.size < 2 or target == 0:
        return split
    in_val = np.zeros(ids.size, dtype=bool)
    taken = 0
    order = rng.permutation(ids.size)
    for g in order:
        if taken + sizes[g] <= target:
            in_val[g] = True
            taken += sizes[g]
            if taken == target:
                break
    if not in_val.any():
        in_val[order[0]] = True
    split[in_val[inverse]] = 1
    return split
